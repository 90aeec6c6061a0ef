#!/usr/bin/env bash
# bench-repl-tail.sh measures the latency tail of POST /v1/check while the
# node replicates to a second region, on loopback with wrk:
#
#   two regions (eu/ams and us/iad), each one edge process with an embedded
#   nats-server whose gateway links it to the other; KEYS distinct keys
#   (100 000) are first loaded into a global rule, so that every flush and
#   every anti-entropy round has that many keys to walk; then wrk drives
#   POST /v1/check on eu/ams over the same KEYS keys, alternately on the
#   global rule (replicated to us/iad) and on a node-scope rule (never
#   replicated), and a bare net/http handler (edge -bare-baseline), and
#   prints the p50/p99 of each and the p99 ratios global/node (goal <= 1.5)
#   and global/bare.
#
# Usage: scripts/bench-repl-tail.sh            (from the repository root)
# Env:   DURATION (10s per run) ROUNDS (3 alternating global/node runs)
#        THREADS (1) CONNS (16) KEYS (100000) RATE (0 = as fast as wrk can;
#        otherwise each connection waits so that the sum is about RATE/s)
#        ANTI_ENTROPY (5s) FLUSH (50ms) PROFILE (empty; a file name writes
#        the eu/ams CPU profile there) EDGE_BIN (empty = build ./cmd/edge;
#        otherwise the edge binary to run, e.g. one built from another commit)
#
# wrk shares the 2 cores with both servers, so single figures move with
# other load on the machine; global and node runs alternate for that reason.
set -euo pipefail

DURATION=${DURATION:-10s}
THREADS=${THREADS:-1}
CONNS=${CONNS:-16}
KEYS=${KEYS:-100000}
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-0}
ANTI_ENTROPY=${ANTI_ENTROPY:-5s}
FLUSH=${FLUSH:-50ms}
PROFILE=${PROFILE:-}

cd "$(dirname "$0")/.."
root=$(pwd)

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh

# free_port: a TCP port nobody listens on right now.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
API_A=$(free_port); API_B=$(free_port)
NATS_A=$(free_port); NATS_B=$(free_port)
GW_A=$(free_port); GW_B=$(free_port)

if [ -n "${EDGE_BIN:-}" ]; then
	cp "$EDGE_BIN" "$work/edge"
else
	echo "building edge" >&2
	go build -o "$work/edge" ./cmd/edge
fi

# config REGION POP NODE API NATS GW OTHER_REGION OTHER_GW OTHER_POP
config() {
	cat <<YAML
node: {id: $3, region: $1, pop: $2}
listen: {api: "127.0.0.1:$4"}
nats:
  embedded:
    listen: 127.0.0.1:$5
    gateway:
      name: $1
      listen: 127.0.0.1:$6
      gateways: [{name: $7, urls: ["nats://127.0.0.1:$8"]}]
rules:
  - {name: global, limit: 1000000000000, window: 1m, scope: global}
  - {name: node, limit: 1000000000000, window: 1m, scope: node}
replication:
  flush_interval: $FLUSH
  anti_entropy_interval: $ANTI_ENTROPY
  peer_timeout: 2s
  expected_pops: [$9]
YAML
}
config eu ams ams-1 "$API_A" "$NATS_A" "$GW_A" us "$GW_B" us/iad >"$work/a.yaml"
config us iad iad-1 "$API_B" "$NATS_B" "$GW_B" eu "$GW_A" eu/ams >"$work/b.yaml"

prof=()
[ -n "$PROFILE" ] && case "$PROFILE" in /*) prof=(-cpuprofile "$PROFILE") ;; *) prof=(-cpuprofile "$root/$PROFILE") ;; esac
"$work/edge" -config "$work/a.yaml" -log-level warn -watch-interval 0 "${prof[@]}" >"$work/a.out" 2>"$work/a.err" &
pids+=($!)
"$work/edge" -config "$work/b.yaml" -log-level warn -watch-interval 0 >"$work/b.out" 2>"$work/b.err" &
pids+=($!)
BARE=$(free_port)
"$work/edge" -bare-baseline -bare-listen "127.0.0.1:$BARE" -log-level warn >"$work/bare.out" 2>&1 &
pids+=($!)

wait_http() {
	for _ in $(seq 1 100); do
		if curl -s -o /dev/null "http://$1/healthz"; then return 0; fi
		sleep 0.1
	done
	echo "server on $1 did not start" >&2
	cat "$work/a.err" "$work/b.err" >&2
	exit 1
}
wait_http "127.0.0.1:$API_A"
wait_http "127.0.0.1:$API_B"
for _ in $(seq 1 100); do
	curl -s -o /dev/null -X POST -d '{}' "http://127.0.0.1:$BARE/v1/check" && break
	sleep 0.1
done

# Wait until each region hears the other (no partition listed).
for _ in $(seq 1 100); do
	if curl -s "http://127.0.0.1:$API_A/v1/status" | grep -q '"partitions":\[\]' &&
		curl -s "http://127.0.0.1:$API_B/v1/status" | grep -q '"partitions":\[\]'; then
		break
	fi
	sleep 0.2
done

keyexpr='"10." .. math.floor(k / 65536) .. "." .. math.floor(k / 256) % 256 .. "." .. k % 256'

# Load every key once into the global rule: 1000 POST /v1/checks of 100.
cat >"$work/load.lua" <<LUA
local b = 0
function request()
  local parts = {}
  for i = 1, 100 do
    local k = (b * 100 + i - 1) % $KEYS
    parts[i] = '{"rule":"global","key":"' .. $keyexpr .. '"}'
  end
  b = b + 1
  return wrk.format("POST", "/v1/checks", {["Content-Type"] = "application/json"}, '{"checks":[' .. table.concat(parts, ",") .. ']}')
end
LUA

# check.lua RULE: one POST /v1/check per request over KEYS keys in a random
# order (per thread), bodies formatted once in init.
check_lua() {
	cat <<LUA
local reqs = {}
local n = 0
local pause = 0
function init(args)
  for k = 0, $KEYS - 1 do
    reqs[k + 1] = wrk.format("POST", "/v1/check", {["Content-Type"] = "application/json"}, '{"rule":"$1","key":"' .. $keyexpr .. '","cost":1}')
  end
  math.randomseed(os.time() + #args)
  for i = #reqs, 2, -1 do
    local j = math.random(i)
    reqs[i], reqs[j] = reqs[j], reqs[i]
  end
  if $RATE > 0 then pause = 1000 * $CONNS / $RATE end
end
function delay() return pause end
function request()
  n = n % #reqs + 1
  return reqs[n]
end
LUA
}
check_lua global >"$work/global.lua"
check_lua node >"$work/node.lua"

echo "loading $KEYS keys into the global rule" >&2
wrk -t1 -c4 -d"$((KEYS / 20000 + 2))s" -s "$work/load.lua" "http://127.0.0.1:$API_A" >/dev/null

# ms VALUE: wrk's latency figure (us, ms or s) in milliseconds.
ms() { awk -v v="$1" 'BEGIN {
	if (v ~ /us$/) { sub(/us$/, "", v); print v / 1000 }
	else if (v ~ /ms$/) { sub(/ms$/, "", v); print v + 0 }
	else { sub(/s$/, "", v); print v * 1000 } }'; }

# runwrk RULE [ADDR]: one wrk run against eu/ams (or ADDR); appends
# "p50_ms p99_ms requests/s" to $work/RULE.runs.
runwrk() {
	local out p50 p99 rps lua=$1
	[ "$1" = bare ] && lua=node
	out=$(wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$work/$lua.lua" "http://${2:-127.0.0.1:$API_A}")
	p50=$(ms "$(echo "$out" | awk '$1 == "50%" {print $2}')")
	p99=$(ms "$(echo "$out" | awk '$1 == "99%" {print $2}')")
	rps=$(echo "$out" | awk '/^Requests\/sec/ {print $2}')
	printf "%-6s p50 %7.3f ms   p99 %7.3f ms   %8.0f requests/s\n" "$1" "$p50" "$p99" "$rps"
	echo "$p50 $p99 $rps" >>"$work/$1.runs"
}

echo "wrk -t$THREADS -c$CONNS -d$DURATION --latency x $ROUNDS rounds (alternating), $KEYS keys, rate ${RATE:-max}, flush $FLUSH, anti-entropy $ANTI_ENTROPY, $(nproc) CPUs, $(go version | awk '{print $3}')"
for _ in $(seq 1 "$ROUNDS"); do
	runwrk global
	runwrk node
	runwrk bare "127.0.0.1:$BARE"
done

# The peer region must have received the global keys.
seen=$(curl -s "http://127.0.0.1:$API_B/v1/keys/global/10.0.0.1" | grep -o '"estimate":[0-9.]*' || true)
echo "us/iad sees global/10.0.0.1: ${seen:-nothing}"

# Ratio of the median p99s over the rounds and of the worst.
awk '
	FNR == 1 {f++}
	{p99[f, FNR] = $2; n[f] = FNR; if ($2 > worst[f]) worst[f] = $2}
	END {
		for (g = 1; g <= 3; g++) {
			m = n[g]
			for (i = 1; i <= m; i++) v[i] = p99[g, i]
			for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] < v[i]) {t = v[i]; v[i] = v[j]; v[j] = t}
			med[g] = (m % 2) ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
		}
		printf "p99 median over rounds: global %.3f ms, node %.3f ms, ratio global/node %.2f (goal <= 1.5)\n", med[1], med[2], med[1] / med[2]
		printf "p99 worst round:        global %.3f ms, node %.3f ms, ratio %.2f\n", worst[1], worst[2], worst[1] / worst[2]
		printf "bare net/http handler:  p99 median %.3f ms; global/bare %.2f, node/bare %.2f\n", med[3], med[1] / med[3], med[2] / med[3]
	}' "$work/global.runs" "$work/node.runs" "$work/bare.runs"
