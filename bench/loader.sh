#!/usr/bin/env bash
# Loader benchmark: memsnap summarize vs Python's pickle.load on a ~300 MB snapshot-shaped pickle.
#
# Builds memsnap, generates the file with bench/gensnap (cached in /tmp, keyed by the generator's
# and the pickle writer's sources), then alternates RUNS runs of
#   memsnap summarize FILE --json >/dev/null
#   python3 -c 'import gc,pickle,sys; gc.disable(); pickle.load(open(sys.argv[1],"rb"))' FILE
# under /usr/bin/time -v and prints the median wall time and median peak RSS of each, and the
# ratios python/memsnap.
#
# Environment: RUNS (default 5), FILE (use this snapshot instead of generating one),
# MEMSNAP (use this binary instead of building ./cmd/memsnap), PYTHON (default python3),
# GENSNAP_FLAGS (extra flags for bench/gensnap, e.g. "-events 200000").
set -euo pipefail

cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
PYTHON=${PYTHON:-python3}

if [[ ! -x /usr/bin/time ]]; then
	echo "loader.sh: installing GNU time" >&2
	apt-get update >/dev/null && apt-get install -y time >/dev/null
fi

if [[ -z "${MEMSNAP:-}" ]]; then
	echo "loader.sh: building memsnap" >&2
	go build -o /tmp/memsnap ./cmd/memsnap
	MEMSNAP=/tmp/memsnap
fi

if [[ -z "${FILE:-}" ]]; then
	key=$( (cat bench/gensnap/main.go analysis/pickle/writer/*.go analysis/snapshot/*.go; echo "${GENSNAP_FLAGS:-}") | sha256sum | cut -c1-12)
	FILE=/tmp/memsnap-bench-$key.pickle
	if [[ ! -s "$FILE" ]]; then
		echo "loader.sh: generating $FILE" >&2
		go build -o /tmp/gensnap ./bench/gensnap
		# shellcheck disable=SC2086
		/tmp/gensnap -o "$FILE.tmp" ${GENSNAP_FLAGS:-}
		mv "$FILE.tmp" "$FILE"
	fi
fi
[[ -s "$FILE" ]] || { echo "loader.sh: $FILE is missing or empty" >&2; exit 1; }
echo "loader.sh: $FILE ($(stat -c %s "$FILE") bytes), $RUNS runs each" >&2

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# measure NAME CMD...: runs CMD under /usr/bin/time -v, appends "seconds kbytes" to $tmp/NAME.
measure() {
	local name=$1
	shift
	if ! /usr/bin/time -v -o "$tmp/time.txt" "$@" >/dev/null 2>"$tmp/err.txt"; then
		echo "loader.sh: $name failed:" >&2
		cat "$tmp/err.txt" "$tmp/time.txt" >&2
		exit 1
	fi
	awk '
		/Elapsed \(wall clock\) time/ {
			n = split($NF, p, ":"); s = 0
			for (i = 1; i <= n; i++) s = s * 60 + p[i]
			wall = s
		}
		/Maximum resident set size/ { rss = $NF }
		END {
			if (wall == "" || rss == "") { exit 1 }
			print wall, rss
		}' "$tmp/time.txt" >>"$tmp/$name" || { echo "loader.sh: cannot parse /usr/bin/time output" >&2; exit 1; }
}

for i in $(seq "$RUNS"); do
	measure memsnap "$MEMSNAP" summarize "$FILE" --json
	measure python "$PYTHON" -c 'import gc,pickle,sys; gc.disable(); pickle.load(open(sys.argv[1],"rb"))' "$FILE"
	echo "loader.sh: run $i: memsnap $(tail -1 "$tmp/memsnap"), python $(tail -1 "$tmp/python") (s, KiB)" >&2
done

# median COLUMN FILE
median() {
	cut -d' ' -f"$1" "$2" | sort -g | awk '{ v[NR] = $1 } END {
		if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

mw=$(median 1 "$tmp/memsnap")
mr=$(median 2 "$tmp/memsnap")
pw=$(median 1 "$tmp/python")
pr=$(median 2 "$tmp/python")
awk -v mw="$mw" -v mr="$mr" -v pw="$pw" -v pr="$pr" -v runs="$RUNS" 'BEGIN {
	printf "%-26s %12s %14s\n", "median of " runs " runs", "wall (s)", "peak RSS (MiB)"
	printf "%-26s %12.2f %14.1f\n", "memsnap summarize --json", mw, mr / 1024
	printf "%-26s %12.2f %14.1f\n", "python3 pickle.load", pw, pr / 1024
	if (mw > 0 && mr > 0) printf "%-26s %11.2fx %13.2fx\n", "ratio python/memsnap", pw / mw, pr / mr
}'
