# bench-lib.sh is sourced by the benchmark scripts: it installs wrk when it
# is missing, makes the scratch directory $work and, on exit, stops the
# processes whose PIDs the script added to pids and removes $work.

if ! command -v wrk >/dev/null 2>&1; then
	echo "wrk not found; installing it with apt-get" >&2
	SUDO=""
	[ "$(id -u)" -ne 0 ] && SUDO=sudo
	$SUDO apt-get update -qq >/dev/null
	$SUDO apt-get install -y -qq wrk >/dev/null
fi

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
