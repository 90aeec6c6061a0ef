#!/usr/bin/env bash
# bench-floors.sh compares the front ends with their floors, in process, in
# the same run, alternated round by round:
#
#   1. POST /v1/check through net/http's server against a bare net/http
#      handler answering the same JSON (BenchmarkCheckServer: bare, check;
#      goal >= 0.93, as scripts/bench-http.sh measures on sockets), and
#      against the bare handler writing the same RateLimit header fields
#      (bare-fields: net/http's own cost for the whole answer);
#   2. the rate limit service's ShouldRateLimit of one descriptor, 32
#      concurrent callers over 4 gRPC connections on loopback, against a bare
#      grpc-go server answering a fixed OK (BenchmarkRLSFloor: bare, rls;
#      goal >= 0.90), and against one answering the service's fields, fixed
#      (bare-fields: gRPC's and protobuf's own cost for the same answer).
#
# Each round runs every variant once; the script prints the median ns/op
# and process CPU per request (cpu-ns/op) of each, and the ratio of the
# medians (floor / front end: the front end's share of the floor's rate).
#
# Usage: scripts/bench-floors.sh        (from the repository root)
# Env:   ROUNDS (5) BENCHTIME (3s for the HTTP pair, 20000x for gRPC)
set -euo pipefail

ROUNDS=${ROUNDS:-5}
HTTP_TIME=${HTTP_TIME:-3s}
RLS_TIME=${RLS_TIME:-20000x}

cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "building the server's test binary" >&2
go test -c -o "$work/server.test" ./server

# run PATTERN TIME: one benchmark run; appends "name ns cpu" lines.
run() {
	"$work/server.test" -test.run '^$' -test.bench "$1" -test.benchtime "$2" |
		awk '/^Benchmark/ {
			name = $1; sub(/-[0-9]+$/, "", name); ns = ""; cpu = ""
			for (i = 2; i < NF; i++) { if ($(i+1) == "ns/op") ns = $i; if ($(i+1) == "cpu-ns/op") cpu = $i }
			print name, ns, cpu
		}' >>"$work/runs"
}

echo "$ROUNDS rounds (alternating), $(nproc) CPUs, $(go version | awk '{print $3}')"
for r in $(seq 1 "$ROUNDS"); do
	echo "round $r" >&2
	run '^BenchmarkCheckServer$/^bare$' "$HTTP_TIME"
	run '^BenchmarkCheckServer$/^bare-fields$' "$HTTP_TIME"
	run '^BenchmarkCheckServer$/^check$' "$HTTP_TIME"
	run '^BenchmarkRLSFloor$/^bare$' "$RLS_TIME"
	run '^BenchmarkRLSFloor$/^bare-fields$' "$RLS_TIME"
	run '^BenchmarkRLSFloor$/^rls$' "$RLS_TIME"
done

# median NAME COLUMN: the median of a column (2 ns/op, 3 cpu-ns/op).
median() {
	awk -v n="$1" -v c="$2" '$1 == n {print $c}' "$work/runs" | sort -g |
		awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
report() {
	local floor=$1 front=$2 goal=$3
	local fns fcpu ns cpu
	fns=$(median "$floor" 2) fcpu=$(median "$floor" 3) ns=$(median "$front" 2) cpu=$(median "$front" 3)
	awk -v a="$floor" -v b="$front" -v fns="$fns" -v fcpu="$fcpu" -v ns="$ns" -v cpu="$cpu" -v g="$goal" 'BEGIN {
		printf "%-34s %10.0f ns/op %10.0f cpu-ns/op\n", a, fns, fcpu
		printf "%-34s %10.0f ns/op %10.0f cpu-ns/op\n", b, ns, cpu
		printf "ratio (floor/front end)            %10.3f%s; CPU %.3f\n", fns / ns, (g == "" ? "" : " (goal >= " g ")"), fcpu / cpu
	}'
}
report BenchmarkCheckServer/bare BenchmarkCheckServer/check 0.93
report BenchmarkCheckServer/bare-fields BenchmarkCheckServer/check ""
report BenchmarkRLSFloor/bare BenchmarkRLSFloor/rls 0.90
report BenchmarkRLSFloor/bare-fields BenchmarkRLSFloor/rls ""
