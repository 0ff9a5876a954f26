#!/usr/bin/env bash
# Loader regression guard (run by .ci/run): memsnap summarize against CPython's bare pickle.load
# (gc off) on a ~30 MB snapshot shaped like a real PyTorch dump, in the same run: 3 rounds,
# each timing both back to back, and the median of the rounds' ratios (python / memsnap). It
# fails below MIN_RATIO (default 5); it prints ratios only, never absolute times, which a
# shared machine cannot keep. The file is bench/tilesnap's tiling of the shared real 2.10
# snapshot when it is there, else bench/gensnap's real shape of 2.10 (the commonest shapes'
# hardest: a new compile_context string per event, as CPython writes them). REAL overrides
# the shared files' folder.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
MIN_RATIO=${MIN_RATIO:-5}
if ! command -v "$PYTHON" >/dev/null 2>&1; then
	echo "bench/guard.sh: skipped: no $PYTHON to compare with"
	exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/memsnap" ./cmd/memsnap
real=${REAL:-../shared/snapshots/real}/pt2.10_user-metadata_windows_cs336.pickle
f=$work/guard.pickle
if [[ -f "$real" ]]; then
	go run ./bench/tilesnap -i "$real" -mb 30 -o "$f" 2>/dev/null
	shape="tiled $(basename "$real")"
else
	go run ./bench/gensnap -shape real -version 2.10 -frames python -events 330000 -blocks 20000 -segments 400 -o "$f" 2>/dev/null
	shape="gensnap -shape real -version 2.10 -frames python"
fi
# secs CMD...: the command's wall time in seconds.
secs() {
	local t0 t1
	t0=$(date +%s%N)
	"$@" >/dev/null
	t1=$(date +%s%N)
	echo $(((t1 - t0) / 1000))
}
cat "$f" >/dev/null
"$work/memsnap" summarize "$f" --json >/dev/null # settle
ratios=()
for _ in 1 2 3; do
	m=$(secs "$work/memsnap" summarize "$f" --json)
	p=$(secs "$PYTHON" -c 'import gc,pickle,sys; gc.disable(); pickle.load(open(sys.argv[1],"rb"))' "$f")
	ratios+=("$(awk -v p="$p" -v m="$m" 'BEGIN { printf "%.2f", p / m }')")
done
median=$(printf '%s\n' "${ratios[@]}" | sort -g | sed -n 2p)
echo "bench/guard.sh: memsnap summarize is ${median}x CPython's pickle.load (rounds: ${ratios[*]}) on $(($(stat -c %s "$f") / 1000000)) MB, $shape; the floor is ${MIN_RATIO}x"
if awk -v r="$median" -v min="$MIN_RATIO" 'BEGIN { exit !(r < min) }'; then
	echo "bench/guard.sh: FAIL: below ${MIN_RATIO}x" >&2
	exit 1
fi
