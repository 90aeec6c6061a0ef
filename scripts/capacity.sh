#!/bin/sh
# capacity.sh prints what one node receives from other PoPs, and what a
# simulator run costs, on fleets of PoPs of 3 nodes (50 000 requests/s over
# 1 000 Zipf keys on one global rule of 1 000 per 10 s, 20 simulated
# seconds; scripts/gen-edge-scenarios.sh -fleet), with region voices off
# and on (docs/performance.md, "Region voices").
#
#   scripts/capacity.sh [PoPs/regions[/loss[/rate/keys]] ...]
#       (default: 30/10 100/5 100/10 100/20)
#   VOICES=on scripts/capacity.sh 100/10/0.005    (region voices on only)
#
# loss is the share of the messages between regions lost (none by
# default); rate and keys replace the 50 000 requests/s and 1 000 keys.
# Needs jq and /usr/bin/time. Each fleet runs once per setting of VOICES
# (about 100 s of CPU at 100 PoPs with region voices off).
set -eu
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- 30/10 100/5 100/10 100/20
voices=${VOICES:-off on}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/sim" ./cmd/sim
echo "| PoPs | regions | loss | region voices | per node: messages/s | entries/s | KB/s | max admitted/limit | admitted / central | simulator CPU s | memory MB |"
echo "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"
for f in "$@"; do
	IFS=/ read -r pops regions loss rate keys <<-EOF2
	$f
	EOF2
	bash scripts/gen-edge-scenarios.sh -fleet "$pops" "$regions" "$tmp/fleet.yaml" "${rate:-50000}" "${keys:-1000}" "${loss:-}" >/dev/null
	for v in $voices; do
		/usr/bin/time -f "%U %M" -o "$tmp/time" "$tmp/sim" -scenario "$tmp/fleet.yaml" -region-voices "$v" \
			-no-timing -quiet -json "$tmp/report.json" >/dev/null
		read -r cpu mem <"$tmp/time"
		jq -r --arg p "$pops" --arg r "$regions" --arg l "${loss:-0}" --arg v "$v" --arg cpu "$cpu" --arg mem "$mem" \
			'.replication as $x | "| \($p) | \($r) | \($l) | \($v) | \($x.node_inbound_messages_per_s | round) | \($x.node_inbound_entries_per_s | round) | \($x.node_inbound_bytes_per_s / 1000 | round) | \(.max_admitted_ratio * 1000 | round / 1000) | \(.admitted / .central.admitted * 1000 | round / 1000) | \($cpu | tonumber | round) | \($mem | tonumber / 1024 | round) |"' \
			"$tmp/report.json"
	done
done
