#!/usr/bin/env bash
# The forward-auth example in one command, on free loopback ports: an
# upstream, geolimit (geolimit.yaml) and nginx or Caddy in front (their
# shipped files, with the ports changed), stopped together on Ctrl-C.
#
#   examples/forward-auth/run.sh            # nginx
#   examples/forward-auth/run.sh caddy
#   examples/forward-auth/run.sh nginx --check   # a smoke test, then stop (CI runs it)
#
# Needs Go, python3, curl and nginx (with auth_request) or caddy.
. "$(dirname "$0")/../lib/common.sh"
EX="$ROOT/examples/forward-auth"
proxy=${1:-nginx}
[ "${2:-}" = --check ] && CHECK=1

UP=$(freeport) API=$(freeport) FA=$(freeport) FRONT=$(freeport) NATS=$(freeport)
upstream "$UP"
sed -e "s/127.0.0.1:8080/127.0.0.1:$API/" -e "s/127.0.0.1:8090/127.0.0.1:$FA/" "$EX/geolimit.yaml" >"$TMP/geolimit.yaml"
bg edge "$(edge)" -config "$TMP/geolimit.yaml" -nats "127.0.0.1:$NATS"
waitport "$FA"

case $proxy in
nginx)
  NGINX=$(command -v nginx || echo /usr/sbin/nginx)
  mkdir -p "$TMP/nginx/geolimit" "$TMP/nginx/logs"
  cp "$EX"/nginx/geolimit/*.conf "$TMP/nginx/geolimit/"
  sed -e "s/server 127.0.0.1:8090;/server 127.0.0.1:$FA;/" -e "s#http://127.0.0.1:9000#http://127.0.0.1:$UP#" \
      -e "s/listen 80;/listen 127.0.0.1:$FRONT;/" "$EX/nginx/site.conf" >"$TMP/nginx/site.conf"
  cat >"$TMP/nginx/nginx.conf" <<CONF
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/logs/error.log;
events {}
http {
    access_log $TMP/nginx/logs/access.log;
    client_body_temp_path $TMP/nginx; proxy_temp_path $TMP/nginx; fastcgi_temp_path $TMP/nginx;
    uwsgi_temp_path $TMP/nginx; scgi_temp_path $TMP/nginx;
    include site.conf;
}
CONF
  bg nginx "$NGINX" -p "$TMP/nginx/" -c "$TMP/nginx/nginx.conf" -g 'daemon off;'
  ;;
caddy)
  sed -e "s/forward_auth 127.0.0.1:8090/forward_auth 127.0.0.1:$FA/" -e "s/reverse_proxy 127.0.0.1:9000/reverse_proxy 127.0.0.1:$UP/" \
      -e "s#^http://:8000 {#http://:$FRONT {#" "$EX/caddy/Caddyfile" >"$TMP/Caddyfile"
  HOME=$TMP XDG_DATA_HOME=$TMP XDG_CONFIG_HOME=$TMP bg caddy caddy run --config "$TMP/Caddyfile" --adapter caddyfile
  ;;
*) echo "usage: $0 [nginx|caddy] [--check]" >&2; exit 2 ;;
esac
waitport "$FRONT"

echo "$proxy on http://127.0.0.1:$FRONT in front of http://127.0.0.1:$UP; geolimit's API on http://127.0.0.1:$API (status page: http://127.0.0.1:$API/ui)"
echo "try: for i in \$(seq 7); do curl -s -o /dev/null -w '%{http_code} ' -XPOST http://127.0.0.1:$FRONT/login; done"
echo "     (prints 200 200 200 200 200 429 429: the login rule passes 5 POSTs a minute per client on to the upstream)"

[ -n "${CHECK:-}" ] && smoke_login "$FRONT" "forward auth ($proxy)"
hold
