#!/usr/bin/env bash
# bench-http.sh measures the edge daemon's decision API on loopback with wrk:
#
#   1. POST /v1/check against a bare net/http handler returning the same JSON
#      (edge -bare-baseline), in the same run, and prints the ratio
#      (goal >= 0.93);
#   2. POST /v1/checks with 100 checks per request, and prints decisions/s
#      (goal >= 1M/s on 2 cores).
#
# Usage: scripts/bench-http.sh            (from the repository root)
# Env:   DURATION (5s per run) ROUNDS (3 alternating bare/check runs)
#        THREADS (2) CONNS (32) API_ADDR (127.0.0.1:18080)
#        BARE_ADDR (127.0.0.1:18081) KEYS (1000 distinct keys cycled)
#
# wrk shares the machine with the servers, and other load disturbs single
# runs, so bare and check runs alternate and are summed; the server CPU per
# request (from /proc) is printed too, as a load-independent comparison.
set -euo pipefail

DURATION=${DURATION:-5s}
THREADS=${THREADS:-2}
CONNS=${CONNS:-32}
API_ADDR=${API_ADDR:-127.0.0.1:18080}
BARE_ADDR=${BARE_ADDR:-127.0.0.1:18081}
KEYS=${KEYS:-1000}
ROUNDS=${ROUNDS:-3}

cd "$(dirname "$0")/.."

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh

echo "building edge" >&2
go build -o "$work/edge" ./cmd/edge

cat >"$work/edge.yaml" <<YAML
listen: {api: "$API_ADDR"}
nats: {embedded: {listen: "127.0.0.1:-1"}}
rules:
  - {name: bench, limit: 1000000000000, window: 1m, scope: node}
YAML

"$work/edge" -config "$work/edge.yaml" -log-level warn -watch-interval 0 >"$work/edge.out" 2>"$work/edge.err" &
pids+=($!)
"$work/edge" -bare-baseline -bare-listen "$BARE_ADDR" -log-level warn >"$work/bare.out" 2>&1 &
pids+=($!)

wait_http() {
	for _ in $(seq 1 100); do
		if curl -s -o /dev/null -X POST -d '{}' "http://$1/v1/check"; then return 0; fi
		sleep 0.1
	done
	echo "server on $1 did not start" >&2
	cat "$work/edge.err" >&2
	exit 1
}
wait_http "$API_ADDR"
wait_http "$BARE_ADDR"

# Requests are formatted once in init() (after wrk has set Host), so that
# wrk spends as little as possible per request: it shares the CPUs.
# One POST /v1/check per request, cycling over KEYS distinct keys.
cat >"$work/check.lua" <<LUA
local reqs = {}
local n = 0
function init(args)
  for i = 1, $KEYS do
    local body = '{"rule":"bench","key":"10.0.' .. math.floor(i / 256) .. '.' .. (i % 256) .. '","cost":1}'
    reqs[i] = wrk.format("POST", "/v1/check", {["Content-Type"] = "application/json"}, body)
  end
end
function request()
  n = n % #reqs + 1
  return reqs[n]
end
LUA

# 100 checks per POST /v1/checks; 64 prebuilt bodies over KEYS keys.
cat >"$work/checks.lua" <<LUA
local reqs = {}
local n = 0
function init(args)
  local k = 0
  for b = 1, 64 do
    local parts = {}
    for i = 1, 100 do
      k = k % $KEYS + 1
      parts[i] = '{"rule":"bench","key":"10.0.' .. math.floor(k / 256) .. '.' .. (k % 256) .. '"}'
    end
    local body = '{"checks":[' .. table.concat(parts, ",") .. ']}'
    reqs[b] = wrk.format("POST", "/v1/checks", {["Content-Type"] = "application/json"}, body)
  end
end
function request()
  n = n % #reqs + 1
  return reqs[n]
end
LUA

# cpu_ticks PID: user+system CPU time of a process, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

# runwrk NAME URL SCRIPT PID: one wrk run; appends "requests seconds cpu_s"
# to $work/NAME.runs.
runwrk() {
	local before after out bad
	before=$(cpu_ticks "$4")
	out=$(wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" -s "$3" "$2")
	after=$(cpu_ticks "$4")
	bad=$(echo "$out" | awk '/Non-2xx/ {print $NF}')
	if [ -n "$bad" ]; then
		echo "warning: $1: $bad non-2xx responses" >&2
	fi
	echo "$out" | awk -v c="$((after - before))" -v hz="$HZ" '
		/requests in/ {n = $1; s = $4; sub(/s,?$/, "", s)}
		END {print n, s, c / hz}' >>"$work/$1.runs"
}

echo "warming up" >&2
wrk -t1 -c8 -d2s -s "$work/check.lua" "http://$API_ADDR" >/dev/null
wrk -t1 -c8 -d2s -s "$work/check.lua" "http://$BARE_ADDR" >/dev/null

edge_pid=${pids[0]}
bare_pid=${pids[1]}
echo "wrk -t$THREADS -c$CONNS -d$DURATION x $ROUNDS rounds (alternating), $(nproc) CPUs, $(go version | awk '{print $3}')"
for _ in $(seq 1 "$ROUNDS"); do
	runwrk bare "http://$BARE_ADDR" "$work/check.lua" "$bare_pid"
	runwrk check "http://$API_ADDR" "$work/check.lua" "$edge_pid"
done
runwrk checks "http://$API_ADDR" "$work/checks.lua" "$edge_pid"

# sum NAME: "requests/s cpu-us-per-request" over all rounds.
sum() { awk '{n += $1; s += $2; c += $3} END {printf "%.0f %.2f", n / s, c / n * 1e6}' "$work/$1.runs"; }
read -r bare_rps bare_cpu <<<"$(sum bare)"
read -r check_rps check_cpu <<<"$(sum check)"
read -r batch_rps batch_cpu <<<"$(sum checks)"
awk -v b="$bare_rps" -v c="$check_rps" -v m="$batch_rps" -v bc="$bare_cpu" -v cc="$check_cpu" -v mc="$batch_cpu" 'BEGIN {
	printf "bare net/http baseline   %10.0f requests/s   server CPU %6.2f us/request\n", b, bc
	printf "POST /v1/check           %10.0f requests/s   server CPU %6.2f us/request\n", c, cc
	printf "ratio check/bare         %10.3f   (goal >= 0.93); server CPU ratio bare/check %.3f\n", c / b, bc / cc
	printf "POST /v1/checks x100     %10.0f requests/s = %.0f decisions/s   (goal >= 1000000); server CPU %.3f us/decision\n", m, m * 100, mc / 100
}'
