#!/usr/bin/env bash
# Fails when the repository tracks build output: a file over 1 MB, an
# executable binary (ELF, Mach-O, PE, WebAssembly), or a file with the
# executable bit that is not a script (no "#!" line). Scripts with the
# executable bit are fine. Run from anywhere; checks the files git tracks
# in this work tree (.ci/run runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
limit=$((1024 * 1024))
bad=0
n=0
while IFS= read -r -d '' entry; do
  mode=${entry%% *}
  f=${entry#*$'\t'}
  [ -f "$f" ] || continue # deleted in the work tree, or a submodule
  n=$((n + 1))
  size=$(wc -c <"$f")
  if [ "$size" -gt "$limit" ]; then
    echo "tracked file over 1 MB: $f ($size bytes)"
    bad=1
  fi
  magic=$(head -c 4 -- "$f" | od -An -tx1 | tr -d ' \n')
  kind=
  case "$magic" in
  7f454c46) kind=ELF ;;
  feedface | feedfacf | cefaedfe | cffaedfe | cafebabe | bebafeca) kind=Mach-O ;;
  0061736d) kind=WebAssembly ;;
  4d5a*) kind=PE ;;
  esac
  if [ -n "$kind" ]; then
    echo "tracked executable binary ($kind): $f"
    bad=1
  elif [ "$mode" = 100755 ] && [ "$(head -c 2 -- "$f")" != "#!" ]; then
    echo "tracked file with the executable bit and no #! line: $f"
    bad=1
  fi
done < <(git ls-files -s -z)
if [ "$bad" != 0 ]; then
  echo "the repository tracks source only: remove these files (git rm --cached) and list them in .gitignore"
  exit 1
fi
echo "tracked files: $n, none over 1 MB, no executable binary"
