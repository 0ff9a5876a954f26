#!/usr/bin/env bash
# Loader benchmark: memsnap against Python's pickle.load on snapshot-shaped pickles of ~300 MB
# and ~1 GB, of every file shape, every command, and the MCP server.
#
# Shapes (SHAPES): memsnap (bench/gensnap through memsnap's own writer, which shares more than
# CPython does: the easy end), real-2.10 and real-2.9 (bench/gensnap -shape real: as CPython
# writes PyTorch 2.10's dump with Python-only stacks, 2.9's with C++ and Python stacks, a new
# compile_context string per event), tile-2.10, tile-2.9, tile-2.5, tile-2.1 (bench/tilesnap:
# the shared real file of that version, its trace repeated to the size and re-encoded as CPython
# would; skipped when ../shared/snapshots/real is absent).
#
# Builds memsnap, generates the files (cached in /tmp, keyed by the generators' and the pickle
# writer's sources and the flags), then for each file alternates
# RUNS rounds of
#   (settle: an unmeasured memsnap summarize)
#   memsnap summarize FILE --json >/dev/null
#   python3 -c 'import gc,pickle,sys; gc.disable(); pickle.load(open(sys.argv[1],"rb"))' FILE
#   (settle)
#   memsnap top-stacks | oom | fragmentation | replay FILE --json, memsnap diff FILE FILE --json,
#   memsnap check FILE --max-peak 1TiB --json, whatif FILE --set expandable_segments=True --json,
#   plot FILE -o X.png, trim FILE --last-events 100000 -o X.pickle, convert FILE -o X.pickle
# under /usr/bin/time -v, each with the file in the page cache, and times a cold and a warm MCP
# summarize call (bench/mcpbench).
# It prints, per file, the median wall time, peak RSS and CPU time of each, the ratios python/memsnap
# side by side for both files (medians, then the fastest rounds), each command against
# summarize (the ratio of the medians, and the median of each round's ratio), and the MCP
# calls against the CLI.
#
# It ends with the worst shape's ratio (the median over rounds of python / memsnap summarize).
# The CPU column is the ratio of the median CPU times (user + system: memsnap's helper
# goroutines count, CPython's load is one thread), which a busy host disturbs less than the
# wall times.
#
# Environment: RUNS (default 5), SIZES (default "300 1000": which files, in MB), SHAPES
# (default all of the above), FILE (measure this snapshot only, instead of generating), MEMSNAP (use this binary
# instead of building ./cmd/memsnap), PYTHON (default python3), COMMANDS (default "top-stacks
# oom fragmentation replay diff check whatif plot trim convert"; empty for summarize and
# Python only), MCP (default 1; 0 skips
# the MCP calls), BASELINE (another memsnap binary, e.g. one built from an earlier commit: each
# memsnap command is also run with it, right after, in every round, and each file's table gets
# the median of the per-round ratios new / baseline: on a host that speeds and slows by half
# within minutes, the paired ratio says what a change did when the plain times cannot).
set -euo pipefail

cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
PYTHON=${PYTHON:-python3}
SIZES=${SIZES:-300 1000}
SHAPES=${SHAPES:-memsnap real-2.10 real-2.9 tile-2.10 tile-2.9 tile-2.5 tile-2.1}
REAL=${REAL:-../shared/snapshots/real}
COMMANDS=${COMMANDS-top-stacks oom fragmentation replay diff check whatif plot trim convert}
MCP=${MCP:-1}

if [[ ! -x /usr/bin/time ]]; then
	echo "loader.sh: installing GNU time" >&2
	apt-get update >/dev/null && apt-get install -y time >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [[ -z "${MEMSNAP:-}" ]]; then
	echo "loader.sh: building memsnap" >&2
	go build -o "$work/memsnap" ./cmd/memsnap
	MEMSNAP=$work/memsnap
fi
if [[ "$MCP" != 0 ]]; then
	go build -o "$work/mcpbench" ./bench/mcpbench
fi

# tiled VERSION: the shared real file bench/tilesnap tiles for that version.
tiled() {
	case $1 in
	2.10) echo "$REAL/pt2.10_user-metadata_windows_cs336.pickle" ;;
	2.9) echo "$REAL/pt2.9plus_cs336-compile_optimizer-annotation_no-segment-events.pickle" ;;
	2.5) echo "$REAL/pt2.5-2.7_torch-compile_cpp-frames_cs336-fwd.pickle" ;;
	2.1) echo "$REAL/pt2.1_hf-qlora-bnb-accelerate-llama-train_ftcourse.pickle" ;;
	*) echo "loader.sh: no shared file to tile for $1" >&2; exit 1 ;;
	esac
}

# snapshot SHAPE MB: the cached file of that shape and about MB megabytes (empty when the
# shape needs the shared real files and they are absent).
snapshot() {
	local shape=$1 mb=$2 flags="" tool=gensnap
	case $shape in
	memsnap) flags="-events $((mb * 5500))" ;;
	real-2.10) flags="-shape real -version 2.10 -frames python -events $((mb * 10900))" ;;
	real-2.9) flags="-shape real -version 2.9 -frames mixed -depth 46 -events $((mb * 4650))" ;;
	tile-*)
		tool=tilesnap
		local src
		src=$(tiled "${shape#tile-}")
		[[ -f "$src" ]] || { echo "loader.sh: $shape skipped: no $src" >&2; return 0; }
		flags="-i $src -mb $mb"
		;;
	*) echo "loader.sh: unknown shape $shape" >&2; exit 1 ;;
	esac
	local key
	key=$( (cat bench/gensnap/*.go bench/tilesnap/*.go bench/internal/pyval/*.go analysis/pickle/writer/*.go; echo "$flags") | sha256sum | cut -c1-12)
	local file=/tmp/memsnap-bench-$shape-$mb-$key.pickle
	if [[ ! -s "$file" ]]; then
		echo "loader.sh: generating $file" >&2
		[[ -x "$work/$tool" ]] || go build -o "$work/$tool" "./bench/$tool"
		# shellcheck disable=SC2086
		"$work/$tool" -o "$file.tmp" $flags
		mv "$file.tmp" "$file"
	fi
	echo "$file"
}

# measure OUT CMD...: runs CMD under /usr/bin/time -v, appends "seconds kbytes cpu-seconds" to
# OUT: the wall time to the millisecond (GNU time's own is in hundredths, 6% of a 0.16 s run),
# the peak RSS, and user plus system time (on two cores a command's wall time cannot fall
# below half its CPU time). The
# snapshot is read into the page cache first ($f: the file of the round): VMs drop cached file
# pages under a run, and whichever tool came first after a drop paid the disk for the other.
measure() {
	local out=$1
	shift
	cat "$f" >/dev/null
	local t0 t1
	t0=$(date +%s%N)
	if ! /usr/bin/time -v -o "$work/time.txt" "$@" >/dev/null 2>"$work/err.txt"; then
		echo "loader.sh: failed: $*" >&2
		cat "$work/err.txt" "$work/time.txt" >&2
		exit 1
	fi
	t1=$(date +%s%N)
	awk -v ns=$((t1 - t0)) '
		/User time \(seconds\)/ { user = $NF }
		/System time \(seconds\)/ { sys = $NF }
		/Maximum resident set size/ { rss = $NF }
		END {
			if (rss == "" || user == "" || sys == "") { exit 1 }
			printf "%.4f %s %.2f\n", ns / 1e9, rss, user + sys
		}' "$work/time.txt" >>"$out" || { echo "loader.sh: cannot parse /usr/bin/time output" >&2; exit 1; }
}

# settle runs memsnap summarize unmeasured. On a VM the process after one that used much more
# memory pays to have that memory made resident again (here: top-stacks of the 296 MB file took
# 1.0 s right after Python's load, 0.65 s after memsnap's, the difference all system time), so
# each round starts with it (after the last round's diff and MCP server) and it runs again
# after Python's: every measured memsnap process then follows one of its own size.
settle() {
	"$MEMSNAP" summarize "$f" --json >/dev/null
}

# median COLUMN FILE
median() {
	cut -d' ' -f"$1" "$2" | sort -g | awk '{ v[NR] = $1 } END {
		if (NR == 0) { print 0; exit }
		if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# paired NEW BASE: the median over rounds of NEW's wall time / BASE's.
paired() {
	paste -d' ' <(cut -d' ' -f1 "$1") <(cut -d' ' -f1 "$2") | awk '{ print $1 / $2 }' >"$work/ratios"
	median 1 "$work/ratios"
}

# fastest COLUMN FILE: the smallest value (the host's other work only ever slows a run down).
fastest() {
	cut -d' ' -f"$1" "$2" | sort -g | head -1
}

if [[ -n "${FILE:-}" ]]; then
	files=("$FILE")
else
	files=()
	for shape in $SHAPES; do
		for mb in $SIZES; do
			f=$(snapshot "$shape" "$mb")
			[[ -z "$f" ]] || files+=("$f")
		done
	done
fi

summary=$work/summary.txt
for f in "${files[@]}"; do
	[[ -s "$f" ]] || { echo "loader.sh: $f is missing or empty" >&2; exit 1; }
	bytes=$(stat -c %s "$f")
	echo "loader.sh: $f ($bytes bytes), $RUNS rounds" >&2
	d=$work/$(basename "$f")
	mkdir -p "$d"
	for i in $(seq "$RUNS"); do
		settle
		measure "$d/summarize" "$MEMSNAP" summarize "$f" --json
		[[ -z "${BASELINE:-}" ]] || measure "$d/summarize.base" "$BASELINE" summarize "$f" --json
		measure "$d/python" "$PYTHON" -c 'import gc,pickle,sys; gc.disable(); pickle.load(open(sys.argv[1],"rb"))' "$f"
		settle
		for c in $COMMANDS; do
			for bin in "$MEMSNAP" ${BASELINE:+"$BASELINE"}; do
				out=$d/$c
				[[ $bin == "$MEMSNAP" ]] || out=$d/$c.base
				case $c in
				diff) measure "$out" "$bin" diff "$f" "$f" --json ;;
				check) measure "$out" "$bin" check "$f" --max-peak 1TiB --json ;;
				whatif) measure "$out" "$bin" whatif "$f" --set expandable_segments=True --json ;;
				plot) measure "$out" "$bin" plot "$f" -o "$work/out.png" ;;
				trim) measure "$out" "$bin" trim "$f" --last-events 100000 -o "$work/out.pickle" --force ;;
				convert) measure "$out" "$bin" convert "$f" -o "$work/out.pickle" --force ;;
				*) measure "$out" "$bin" "$c" "$f" --json ;;
				esac
				rm -f "$work/out.png" "$work/out.pickle"
			done
		done
		if [[ "$MCP" != 0 ]]; then
			cat "$f" >/dev/null
			"$work/mcpbench" -memsnap "$MEMSNAP" -n 5 "$f" >>"$d/mcp"
		fi
		echo "loader.sh: round $i: summarize $(tail -1 "$d/summarize"), python $(tail -1 "$d/python") (s, KiB, CPU s)" >&2
	done
	mw=$(median 1 "$d/summarize")
	mr=$(median 2 "$d/summarize")
	pw=$(median 1 "$d/python")
	pr=$(median 2 "$d/python")
	echo "$(basename "$f") $bytes $mw $mr $pw $pr $(fastest 1 "$d/summarize") $(fastest 1 "$d/python") $(paired "$d/python" "$d/summarize") $(median 3 "$d/summarize") $(median 3 "$d/python")" >>"$summary"
	{
		echo
		awk -v f="$(basename "$f")" -v b="$bytes" -v runs="$RUNS" -v base="${BASELINE:-}" 'BEGIN { printf "%s (%.0f MB), median of %d rounds\n", f, b / 1e6, runs
			printf "  %-28s %9s %9s %9s %11s %8s%s\n", "", "wall (s)", "x summ.", "(paired)", "RSS (MiB)", "CPU (s)", base == "" ? "" : "  x baseline (paired)" }'
		for c in summarize $COMMANDS; do
			w=$(median 1 "$d/$c")
			r=$(median 2 "$d/$c")
			u=$(median 3 "$d/$c")
			label="memsnap $c"
			case $c in
			diff) label="memsnap diff (the file twice)" ;;
			check) label="memsnap check --max-peak" ;;
			whatif) label="memsnap whatif (expandable)" ;;
			plot) label="memsnap plot (timeline PNG)" ;;
			trim) label="memsnap trim (100k events)" ;;
			convert) label="memsnap convert (pickle)" ;;
			esac
			vs=""
			[[ -z "${BASELINE:-}" ]] || vs=$(paired "$d/$c" "$d/$c.base")
			ps=$(paired "$d/$c" "$d/summarize")
			awk -v l="$label" -v w="$w" -v r="$r" -v u="$u" -v s="$mw" -v ps="$ps" -v vs="$vs" 'BEGIN { printf "  %-28s %9.3f %8.2fx %8.2fx %11.0f %8.2f", l, w, w / s, ps, r / 1024, u
				if (vs != "") printf " %12.2fx", vs
				printf "\n" }'
		done
		ps=$(paired "$d/python" "$d/summarize")
		awk -v w="$pw" -v r="$pr" -v u="$(median 3 "$d/python")" -v s="$mw" -v ps="$ps" 'BEGIN { printf "  %-28s %9.3f %8.2fx %8.2fx %11.0f %8.2f\n", "python3 pickle.load", w, w / s, ps, r / 1024, u }'
		if [[ "$MCP" != 0 ]]; then
			cw=$(median 1 "$d/mcp")
			ww=$(median 2 "$d/mcp")
			awk -v c="$cw" -v w="$ww" -v s="$mw" 'BEGIN {
				printf "  %-28s %9.3f %8.2fx\n", "MCP summarize, cold", c, c / s
				printf "  %-28s %9.4f\n", "MCP summarize, warm", w }'
		fi
	} >>"$work/details.txt"
done

cat "$work/details.txt"
echo
awk 'BEGIN { printf "%-52s %10s %10s %8s %9s %8s %12s %12s %8s\n", "python3 pickle.load / memsnap summarize", "memsnap s", "python s", "speed", "(paired)", "CPU", "memsnap MiB", "python MiB", "memory" }
{ printf "%-52s %10.3f %10.3f %7.2fx %8.2fx %7.2fx %12.0f %12.0f %7.2fx\n", sprintf("%s (%.0f MB)", $1, $2 / 1e6), $3, $5, $5 / $3, $9, $11 / $10, $4 / 1024, $6 / 1024, $4 / $6 }' "$summary"
echo
awk 'BEGIN { printf "%-36s %10s %10s %8s\n", "fastest rounds (the host slows runs down)", "memsnap s", "python s", "speed" }
{ printf "%-36s %10.3f %10.3f %7.2fx\n", sprintf("%s (%.0f MB)", $1, $2 / 1e6), $7, $8, $8 / $7 }' "$summary"
echo
sort -k9 -g "$summary" | head -1 | awk '{ printf "worst shape: %s, %.2fx CPython (paired median), at %.2fx its memory\n", $1, $9, $4 / $6 }'
