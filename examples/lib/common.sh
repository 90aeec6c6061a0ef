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

# upstream serves a directory listing on 127.0.0.1:$1 (any GET answers 200).
upstream() {
  mkdir -p "$TMP/www" && echo "hello from the upstream" >"$TMP/www/index.html"
  bg upstream python3 -m http.server --bind 127.0.0.1 --directory "$TMP/www" "$1"
}

# status prints the HTTP status of a request: status METHOD URL [curl args].
status() {
  local m=$1 u=$2; shift 2
  curl -s -o /dev/null -w '%{http_code}' -X "$m" "$@" "$u"
}

# smoke_login checks a proxy on 127.0.0.1:$1 in front of the upstream with
# the examples' login rule (5 POSTs a minute per client): seven POSTs to
# /login give five passed on (the upstream answers them 501: it serves GET
# only) and two 429, a denial carries Retry-After, and a GET reaches the
# upstream. $2 names the proxy in the messages.
smoke_login() {
  local codes=""
  for _ in $(seq 7); do codes="$codes $(status POST "http://127.0.0.1:$1/login")"; done
  echo "POST /login x7:$codes"
  [ "$(echo "$codes" | tr ' ' '\n' | grep -c 429)" = 2 ] || { echo "want the 6th and 7th denied" >&2; exit 1; }
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
