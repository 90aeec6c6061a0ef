#!/bin/sh
# share-table.sh prints the accuracy table of the share partition policy
# (docs/replication.md, "Where share guesses"): for each scenario, the share
# run against the central limiter on the same arrivals, over the phases with
# a fault (the whole run when there is none); max a/l over the whole run.
#
#   scripts/share-table.sh [scenario ...]     (default: the scenarios below)
#
# Needs jq. Runs `go run ./cmd/sim -compare share -no-timing`, with the
# flags in SIM_FLAGS too (e.g. SIM_FLAGS='-region-voices on').
set -eu
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- site-failover-cut two-sided-surge failover-during-cut crash-loops-overload \
	skewed-regions-10s skewed-regions-1s hot-key-20pops below-half-4pops below-half-16pops \
	below-half-32pops two-regions-cut rolling-cuts three-regions-one-isolated hot-key-attack \
	crash-loop-one-node-pop crash-loop-whole-pop crash-loop-with-state hour-windows-cut hour-windows-two-regions \
	failover-to-one-pop failover-spread failover-region-of-three failover-region-to-one-pop \
	failover-region-to-one-pop-2 hot-key-20pops-mixed hot-key-20pops-one-node hot-key-80nodes \
	skewed-three-regions-1s skewed-two-pops-1s below-half-anycast stop-loop-whole-pop stop-loop-one-node-pops \
	skewed-four-pops-1s skewed-behind-1s skewed-two-pops-1500ms-1s hot-key-12pops-three-nodes \
	hour-windows-region-cut below-half-anycast-24pops below-half-anycast-one-node \
	skewed-ahead-500ms-1s skewed-behind-1500ms-1s skewed-five-pops-1s crash-loop-lone-pop crash-failover failover-lone-region \
	heal-after-failover-1m heal-after-surge below-half-anycast-one-node-24pops below-half-anycast-limit-200 \
	failover-in-cut-window failover-in-cut-window-30s uneven-pops-at-limit hot-key-1s-windows \
	failover-region-of-four rise-at-cut stop-loop-lossy failover-uneven-demand small-side-surge \
	failover-to-one-pop-of-three
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/sim" ./cmd/sim
echo "| scenario | admitted, share / central | max a/l share | max a/l central | lowest region, share / central | rejected below half, share / central |"
echo "|---|---:|---:|---:|---:|---:|"
for s in "$@"; do
	# shellcheck disable=SC2086 # SIM_FLAGS holds several flags
	"$tmp/sim" ${SIM_FLAGS:-} -scenario "$s" -compare share -no-timing -quiet -json "$tmp/report.json" >/dev/null
	jq -r --arg s "$s" '(if has("runs") then .runs[0] else . end) as $r
	| ([$r.phases[] | select(.name == "partitioned")] | if length == 0 then [$r.phases[] | select(.name == "healthy")] else . end) as $f
	| ([$r.central.phases[] | select(.name == "partitioned")] | if length == 0 then [$r.central.phases[] | select(.name == "healthy")] else . end) as $c
	| ([$f[].admitted] | add) as $fa | ([$c[].admitted] | add) as $ca
	| ([$f[].regions[]] | group_by(.region) | map({key: .[0].region, value: (map(.admitted) | add)}) | from_entries) as $fr
	| ([$c[].regions[]] | group_by(.region) | map({key: .[0].region, value: (map(.admitted) | add)}) | from_entries) as $cr
	| ([$cr | keys[] | select($cr[.] > 0) | $fr[.] / $cr[.]] | min) as $low
	| "| \($s) | \($fa / $ca * 1000 | round / 1000) | \($r.max_admitted_ratio * 1000 | round / 1000) | \($r.central.max_admitted_ratio * 1000 | round / 1000) | \($low * 100 | round / 100) | \($r.rejected_below_half) / \($r.central.rejected_below_half) |"' "$tmp/report.json"
done
