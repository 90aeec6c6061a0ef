#!/usr/bin/env bash
# The HAProxy example in one command, on free loopback ports: an upstream,
# geolimit (geolimit.yaml, listen.spoa) and HAProxy in front (haproxy.cfg
# and geolimit-spoe.conf, with the ports changed), stopped together on
# Ctrl-C.
#
#   examples/haproxy/run.sh
#   examples/haproxy/run.sh --check   # a smoke test, then stop (CI runs it)
#
# Needs Go, python3, curl and haproxy (2.6 or later).
. "$(dirname "$0")/../lib/common.sh"
EX="$ROOT/examples/haproxy"
[ "${1:-}" = --check ] && CHECK=1

UP=$(freeport) API=$(freeport) SPOA=$(freeport) FRONT=$(freeport) NATS=$(freeport)
upstream "$UP"
sed -e "s/127.0.0.1:8080/127.0.0.1:$API/" -e "s/127.0.0.1:12345/127.0.0.1:$SPOA/" "$EX/geolimit.yaml" >"$TMP/geolimit.yaml"
bg edge "$(edge)" -config "$TMP/geolimit.yaml" -nats "127.0.0.1:$NATS"
waitport "$SPOA"
sed -e "s/bind 127.0.0.1:8000/bind 127.0.0.1:$FRONT/" -e "s/server app 127.0.0.1:9000/server app 127.0.0.1:$UP/" \
    -e "s/server geolimit 127.0.0.1:12345/server geolimit 127.0.0.1:$SPOA/" \
    -e "s#config geolimit-spoe.conf#config $TMP/geolimit-spoe.conf#" "$EX/haproxy.cfg" >"$TMP/haproxy.cfg"
cp "$EX/geolimit-spoe.conf" "$TMP/"
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
bg haproxy "$HAPROXY" -db -f "$TMP/haproxy.cfg"
waitport "$FRONT"

echo "haproxy on http://127.0.0.1:$FRONT in front of http://127.0.0.1:$UP; geolimit's API on http://127.0.0.1:$API (status page: http://127.0.0.1:$API/ui)"
echo "try: for i in \$(seq 7); do curl -s -o /dev/null -w '%{http_code} ' -XPOST http://127.0.0.1:$FRONT/login; done"
echo "     (prints 200 200 200 200 200 429 429: the login rule passes 5 POSTs a minute per client on to the upstream)"

[ -n "${CHECK:-}" ] && smoke_login "$FRONT" haproxy
hold
