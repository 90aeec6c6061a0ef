# Shared by the examples' run.sh scripts: free ports, background processes
# stopped on exit, waiting for a port, and the smoke test's helpers. Source
# it; it sets -euo pipefail and a temporary directory $TMP.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

# freeport prints a TCP port of 127.0.0.1 that is free now.
freeport() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# bg runs a command in the background, its output in $TMP/<name>.log.
bg() {
  local name=$1; shift
  "$@" >"$TMP/$name.log" 2>&1 &
  PIDS+=($!)
}

# waitport waits (10 s at most) until 127.0.0.1:$1 accepts connections.
waitport() {
  for _ in $(seq 100); do
    if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),0.2)" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "nothing listens on 127.0.0.1:$1; logs:" >&2
  tail -n 20 "$TMP"/*.log >&2 || true
  return 1
}

# edge builds the daemon once into $TMP/edge.
edge() {
  [ -x "$TMP/edge" ] || (cd "$ROOT" && go build -o "$TMP/edge" ./cmd/edge)
  echo "$TMP/edge"
}

# upstream serves 127.0.0.1:$1: every request, whatever its method and
# path, is answered 200 "hello from the upstream", so that what a client
# sees is the proxy's decision (200 passed on, 429 denied).
upstream() {
  bg upstream python3 -c '
import http.server, sys
class Upstream(http.server.BaseHTTPRequestHandler):
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > 0:
            self.rfile.read(n)
        body = b"hello from the upstream\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = answer
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Upstream).serve_forever()
' "$1"
}

# status prints the HTTP status of a request: status METHOD URL [curl args].
status() {
  local m=$1 u=$2; shift 2
  curl -s -o /dev/null -w '%{http_code}' -X "$m" "$@" "$u"
}

# smoke_login checks a proxy on 127.0.0.1:$1 in front of the upstream with
# the examples' login rule (5 POSTs a minute per client): seven POSTs to
# /login give five passed on (200) and two denied (429), a denial carries
# Retry-After, and a GET reaches the upstream. $2 names the proxy in the
# messages.
smoke_login() {
  local codes=""
  for _ in $(seq 7); do codes="$codes $(status POST "http://127.0.0.1:$1/login")"; done
  echo "POST /login x7:$codes"
  [ "$codes" = " 200 200 200 200 200 429 429" ] || { echo "want 200 five times, then 429 twice" >&2; exit 1; }
  [ "$(status GET "http://127.0.0.1:$1/")" = 200 ] || { echo "GET / did not reach the upstream" >&2; exit 1; }
  curl -s -D - -o /dev/null -XPOST "http://127.0.0.1:$1/login" | grep -qi '^retry-after:' || { echo "no Retry-After on a denial" >&2; exit 1; }
  echo "$2: ok"
}

# hold waits for Ctrl-C unless CHECK is set.
hold() {
  if [ -z "${CHECK:-}" ]; then
    echo "running; Ctrl-C stops everything"
    wait
  fi
}
