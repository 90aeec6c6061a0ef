#!/usr/bin/env bash
# Checks the deployment files: the alert rules with promtool (syntax and
# their unit tests), every query of the Grafana dashboard by turning it
# into a recording rule promtool parses, and the systemd unit with
# systemd-analyze verify (against a freshly built edge, whose path replaces
# /usr/local/bin/edge in a copy of the unit). Needs promtool, python3 and
# go on PATH, and systemd-analyze (GEOLIMIT_REQUIRE_SYSTEMD=1 fails without
# it; otherwise the unit's check is skipped, said so).
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
if command -v systemd-analyze >/dev/null; then
  (cd .. && go build -o "$tmp/edge" ./cmd/edge)
  sed "s|/usr/local/bin/edge|$tmp/edge|g" systemd/geolimit-edge.service >"$tmp/geolimit-edge.service"
  systemd-analyze verify "$tmp/geolimit-edge.service"
  echo "deploy: systemd-analyze verify accepts systemd/geolimit-edge.service"
elif [ "${GEOLIMIT_REQUIRE_SYSTEMD:-}" = 1 ]; then
  echo "deploy: systemd-analyze not found and GEOLIMIT_REQUIRE_SYSTEMD=1"; exit 1
else
  echo "deploy: systemd-analyze not found: the systemd unit is not verified"
fi
echo "deploy: alert rules, their tests and $(grep -c 'record:' "$tmp/dashboard-queries.yaml") dashboard queries check out"
