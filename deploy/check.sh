#!/usr/bin/env bash
# Checks the deployment files: the alert rules with promtool (syntax and
# their unit tests), and every query of the Grafana dashboard by turning it
# into a recording rule promtool parses. Needs promtool on PATH and python3.
set -euo pipefail
cd "$(dirname "$0")"
promtool check rules prometheus/geolimit-alerts.yaml
promtool test rules prometheus/geolimit-alerts.test.yaml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - grafana/geolimit-dashboard.json > "$tmp/dashboard-queries.yaml" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("groups:\n  - name: dashboard\n    rules:")
n = 0
for p in d["panels"]:
    for t in p.get("targets", []):
        e = (t["expr"].replace("$__rate_interval", "5m")
             .replace("$job", "geolimit").replace("$instance", ".*"))
        n += 1
        print(f"      - record: dashboard:q{n}\n        expr: {json.dumps(e)}")
if n == 0:
    sys.exit("no queries in the dashboard")
PY
promtool check rules "$tmp/dashboard-queries.yaml"
echo "deploy: alert rules, their tests and $(grep -c 'record:' "$tmp/dashboard-queries.yaml") dashboard queries check out"
