#!/usr/bin/env bash
# bench/view.sh: `memstat view` on generated snapshots (bench/run.sh calls
# it last; it can run alone after make build). For each file: `memstat
# stats` end to end (median of RUNS), then bench/viewbench: the time from
# starting `memstat view` to the page's first picture (the URL, the page,
# info, the overview and the whole-trace window), zoom and pan requests at
# every level of detail (median, 90th percentile, max), the allocator
# state at the peak and one entry later, and the server's peak RSS. The
# figures go to BENCHMARKS.md between this script's markers.
#
# Environment: RUNS (default 3), GEN, SKIP_1GB=1, QUICK=1 (a small file,
# one run, the section to bench/out/BENCHMARKS.quick.md), as bench/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=bench/out
BIN=bin/memstat
RUNS=${RUNS:-3}
GEN=${GEN:-../shared/tools/gen_snapshot.py}
DOC=BENCHMARKS.md
FILES=("torch-100MB torch 860000 8600" "torch-1GB torch 8600000 86000")
[ "${SKIP_1GB:-}" = 1 ] && FILES=("${FILES[@]:0:1}")
if [ "${QUICK:-}" = 1 ]; then
	RUNS=1 DOC=$OUT/BENCHMARKS.quick.md FILES=("torch-quick torch 20000 200")
fi
mkdir -p "$OUT"
[ -x "$BIN" ] || { echo "bench: $BIN missing; run make build" >&2; exit 1; }
go build -o "$OUT/viewbench" ./bench/viewbench

median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
mb() { awk -v b="$1" 'BEGIN {printf "%.0f", b / 1e6}'; }
rows=""
for spec in "${FILES[@]}"; do
	read -r name mode entries segs <<<"$spec"
	f="$OUT/$name.pickle"
	if [ ! -s "$f" ]; then
		echo "bench: generating $f" >&2
		python3 "$GEN" --mode "$mode" --entries "$entries" --segments "$segs" --seed 1 "$f.tmp"
		mv "$f.tmp" "$f"
	fi
	cat "$f" >/dev/null
	st=""
	for ((i = 0; i < RUNS; i++)); do
		t=$( { /usr/bin/time -f "%e" "$BIN" stats "$f" >/dev/null; } 2>&1 | tail -1)
		st+="$t"$'\n'
	done
	stats_s=$(median <<<"$st")
	echo "bench: memstat view $f" >&2
	j=$("$OUT/viewbench" -bin "$BIN" "$f" 2>/dev/null)
	val() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$j" "$1"; }
	fp=$(val first_page_s)
	rows+="| $name | $(mb "$(stat -c %s "$f")") | $(val entries) | $stats_s | $(printf %.2f "$fp") | $(awk -v a="$fp" -v b="$stats_s" 'BEGIN {printf "%.2f", a / b}') | $(printf %.0f "$(val zoom_pan_median_ms)") / $(printf %.0f "$(val zoom_pan_p90_ms)") / $(printf %.0f "$(val zoom_pan_max_ms)") | $(printf %.0f "$(val first_group_by_ms)") | $(printf %.0f "$(val state_at_peak_ms)") / $(printf %.0f "$(val state_next_entry_ms)") | $(awk -v k="$(val peak_rss_kb)" 'BEGIN {printf "%.0f", k / 1024}') | $(awk -v k="$(val peak_rss_kb)" -v s="$(stat -c %s "$f")" 'BEGIN {printf "%.2f", k * 1024 / s}') |"$'\n'
done

now=$(date -u '+%Y-%m-%d %H:%M UTC')
cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
section=$(
	cat <<EOF
## memstat view (bench/view.sh)

Machine: $cpu, $(nproc) CPUs. Date: $now. memstat $(git describe --tags --always --dirty 2>/dev/null || echo unknown).
Command: \`bench/view.sh\` (\`make bench\` runs it last). stats: \`bin/memstat stats FILE\`, median of $RUNS.
view: \`bench/viewbench\` starts \`bin/memstat view FILE --no-open\` and times, from the start, the page's
first picture (URL printed, then the page, \`/api/info\`, \`/api/overview\` and the whole-trace window at 1300
columns: everything the page asks for before it draws); then zoom/pan: $((40 + 10)) windows of 1300 columns
from the whole trace down to 200 entries at random places (40 with one band per allocation, top 300; 10 by
stack, top 40), latency per request; the first group-by request (it builds the grouping); the allocator state
at the peak (a replay up to it) and at the next entry (one step); the server's peak RSS (VmHWM).

| snapshot | MB | entries | stats s | first page s | first page / stats | zoom/pan ms median / p90 / max | first group-by ms | state at peak / next ms | peak RSS MB | RSS / file |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
$rows
EOF
)
begin='<!-- bench/view.sh: begin (generated; edit bench/view.sh instead) -->'
end='<!-- bench/view.sh: end -->'
[ -f "$DOC" ] || printf '# Benchmarks\n' >"$DOC"
grep -qF "$begin" "$DOC" || printf '\n%s\n%s\n' "$begin" "$end" >>"$DOC"
body=$(mktemp)
printf '%s\n' "$section" >"$body"
tmp=$(mktemp "$DOC.XXXXXX")
awk -v begin="$begin" -v end="$end" -v body="$body" '
	$0 == begin {print; while ((getline line < body) > 0) print line; skip = 1; next}
	$0 == end {skip = 0}
	!skip {print}
' "$DOC" >"$tmp"
rm -f "$body"
mv "$tmp" "$DOC"
echo "bench: wrote $DOC" >&2
