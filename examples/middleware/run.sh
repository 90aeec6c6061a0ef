#!/usr/bin/env bash
# The middleware example in one command, on a free loopback port: a Go
# service (main.go) whose handler is wrapped by geolimit's middleware,
# three requests a minute per client under /api. It prints the binary's
# size: the middleware links neither nats-server nor gRPC.
#
#   examples/middleware/run.sh
#   examples/middleware/run.sh --check   # a smoke test, then stop (CI runs it)
#
# Needs Go, python3 and curl.
. "$(dirname "$0")/../lib/common.sh"
[ "${1:-}" = --check ] && CHECK=1

(cd "$ROOT" && go build -o "$TMP/middleware" ./examples/middleware)
echo "examples/middleware: $(wc -c <"$TMP/middleware") bytes (go build -o middleware ./examples/middleware)"
PORT=$(freeport)
bg middleware "$TMP/middleware" -addr "127.0.0.1:$PORT"
waitport "$PORT"
echo "the service on http://127.0.0.1:$PORT"
echo "try: for i in \$(seq 4); do curl -s -o /dev/null -w '%{http_code} ' http://127.0.0.1:$PORT/api/hello; done"

if [ -n "${CHECK:-}" ]; then
  codes=""
  for _ in $(seq 4); do codes="$codes $(status GET "http://127.0.0.1:$PORT/api/hello")"; done
  echo "GET /api/hello x4:$codes"
  [ "$codes" = " 200 200 200 429" ] || { echo "want three passed and the fourth denied" >&2; exit 1; }
  curl -s -D - -o /dev/null "http://127.0.0.1:$PORT/api/hello" | grep -qi '^retry-after:' || { echo "no Retry-After on a denial" >&2; exit 1; }
  echo "middleware: ok"
fi
hold
