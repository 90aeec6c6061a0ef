#!/usr/bin/env bash
# The multi-region example in one command: three regions on one machine
# (eu with two nodes in PoP ams, us, ap), each region's embedded nats-server
# linked to the others by gateways, on authenticated links, every port a
# free one of 127.0.0.1 (the shipped files, with the ports and paths
# changed), stopped together on Ctrl-C.
#
#   examples/multi-region/run.sh
#   examples/multi-region/run.sh --check   # a smoke test, then stop (CI runs it)
#   examples/multi-region/run.sh --open    # the same on open links (examples/multi-region-open)
#   examples/multi-region/run.sh --secure  # with TLS too (examples/secure-multi-region, certificates made here)
#
# Needs Go, python3 and curl (and openssl for --secure).
. "$(dirname "$0")/../lib/common.sh"
EX="$ROOT/examples/multi-region" SECOND=eu-ams-2
for a in "$@"; do
  case $a in
  --check) CHECK=1 ;;
  --open) EX="$ROOT/examples/multi-region-open" ;;
  --secure) EX="$ROOT/examples/secure-multi-region" SECOND=eu-fra-1 ;;
  *) echo "usage: $0 [--check] [--open|--secure]" >&2; exit 2 ;;
  esac
done

# Every fixed port of the example gets a free one, the same in every file.
mkdir -p "$TMP/ex"
args=()
for p in 8081 8082 8083 8084 4222 4223 4224 7222 7223 7224 7946 7947; do
  np=$(freeport)
  declare "P$p=$np"
  args+=(-e "s/127\.0\.0\.1:$p\b/127.0.0.1:$np/g")
done
for f in "$EX"/*.yaml "$EX"/*.conf; do
  [ -e "$f" ] || continue
  sed "${args[@]}" -e "s#examples/[a-z-]*multi-region/#$TMP/ex/#g" "$f" >"$TMP/ex/$(basename "$f")"
done
for f in "$EX"/*.key; do # the mode authority's example key
  [ -e "$f" ] && cp "$f" "$TMP/ex/" && chmod 600 "$TMP/ex/$(basename "$f")"
done
if [ -f "$EX/gen-certs.sh" ]; then
  cp "$EX/gen-certs.sh" "$TMP/ex/" && sh "$TMP/ex/gen-certs.sh" >/dev/null 2>&1
fi

E=$(edge)
for n in eu-ams-1 us-iad-1 ap-sin-1; do bg "$n" "$E" -config "$TMP/ex/$n.yaml" -watch-interval 0; done
for p in $P8081 $P8083 $P8084; do waitport "$p"; done
bg "$SECOND" "$E" -config "$TMP/ex/$SECOND.yaml" -watch-interval 0
waitport "$P8082"
APIS="$P8081 $P8082 $P8083 $P8084"
echo "APIs: eu-ams-1 http://127.0.0.1:$P8081, $SECOND :$P8082, us-iad-1 :$P8083, ap-sin-1 :$P8084"
echo "status pages: http://127.0.0.1:$P8081/ui (eu-ams-1), http://127.0.0.1:$P8083/ui (us-iad-1), http://127.0.0.1:$P8084/ui (ap-sin-1)"
echo "try: curl -s -XPOST http://127.0.0.1:$P8083/v1/check -d '{\"rule\":\"api\",\"key\":\"198.51.100.1\"}'; sleep 10; curl -s http://127.0.0.1:$P8081/v1/keys/api/198.51.100.1"
echo "     (a count far below its limit reaches the other regions once it settles, at the second anti-entropy round after it, within 10 s; near the limit, within a flush)"

if [ -n "${CHECK:-}" ]; then
  # Every region hears the other two, then 20 checks spread over the four
  # nodes reach every node's view of the key.
  # (with eu/fra, a region of two PoPs hears three others)
  want=2; [ "$SECOND" = eu-fra-1 ] && want=-1
  heard() { curl -s "http://127.0.0.1:$1/v1/status" | python3 -c 'import json,sys; s=json.load(sys.stdin); r=s["remote_pops"]; w=int(sys.argv[1]); print(int((len(r)==w or (w<0 and len(r)>=2)) and not any(p["partitioned"] for p in r)))' "$want"; }
  for _ in $(seq 100); do
    ok=1; for p in $P8081 $P8083 $P8084; do [ "$(heard "$p")" = 1 ] || ok=0; done
    [ $ok = 1 ] && break; sleep 0.2
  done
  [ $ok = 1 ] || { echo "the regions do not hear each other" >&2; tail -n 5 "$TMP"/*.log >&2; exit 1; }
  i=0
  for _ in $(seq 5); do for p in $APIS; do
    [ "$(status POST "http://127.0.0.1:$p/v1/check" -d '{"rule":"api","key":"198.51.100.1"}')" = 200 ] || { echo "check refused" >&2; exit 1; }
    i=$((i + 1))
  done; done
  total() { curl -s "http://127.0.0.1:$1/v1/keys/api/198.51.100.1" | python3 -c 'import json,sys; print(sum(w["total"] for w in json.load(sys.stdin)["windows"]))'; }
  for _ in $(seq 100); do
    ok=1; for p in $APIS; do [ "$(total "$p")" = "$i" ] || ok=0; done
    [ $ok = 1 ] && break; sleep 0.2
  done
  [ $ok = 1 ] || { echo "the count did not reach every node" >&2; for p in $APIS; do echo "$p: $(total "$p")" >&2; done; exit 1; }
  echo "multi-region: every node counts $i: ok"
fi
hold
