#!/usr/bin/env bash
# bench/view.sh: `memstat view` on generated snapshots and on a long
# recorded run (bench/run.sh calls it last; it can run alone after make
# build). For each file: `memstat stats` end to end (median of RUNS, wall
# and CPU time), then bench/viewbench: the time and the server's CPU time
# from starting `memstat view` to the page's first picture (the URL, the
# page, info, the overview and the whole-trace window), zoom and pan
# requests at every level of detail (median, 90th percentile, max), the
# allocator state at the peak and one entry later, the server's peak RSS
# at the first page and at the end; with Chromium, the page itself in
# headless Chromium: its largest JS heap and the time of a wheel zoom or
# a drag to the redrawn window. The figures go to BENCHMARKS.md between
# this script's markers.
#
# Environment: RUNS (default 3), GEN, SKIP_1GB=1, QUICK=1 (small files,
# one run, the section to bench/out/BENCHMARKS.quick.md), as bench/run.sh;
# CHROMIUM (default: chromium on the PATH; none: the browser columns read
# "-").
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=bench/out
BIN=bin/memstat
RUNS=${RUNS:-3}
GEN=${GEN:-../shared/tools/gen_snapshot.py}
DOC=BENCHMARKS.md
# name kind args: kind gen is gen_snapshot.py --mode torch (entries,
# segments), kind record is `memstat record` (its flags).
FILES=(
	"torch-100MB gen 860000 8600"
	"record-1.75M record --layers 32 --steps 200"
	"torch-1GB gen 8600000 86000"
)
[ "${SKIP_1GB:-}" = 1 ] && FILES=("${FILES[@]:0:2}")
if [ "${QUICK:-}" = 1 ]; then
	RUNS=1 DOC=$OUT/BENCHMARKS.quick.md FILES=("torch-quick gen 20000 200" "record-quick record --layers 4 --steps 20")
fi
CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
mkdir -p "$OUT"
[ -x "$BIN" ] || { echo "bench: $BIN missing; run make build" >&2; exit 1; }
go build -o "$OUT/viewbench" ./bench/viewbench

median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
mb() { awk -v b="$1" 'BEGIN {printf "%.0f", b / 1e6}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
rows=""
for spec in "${FILES[@]}"; do
	read -r name kind args <<<"$spec"
	f="$OUT/$name.pickle"
	if [ ! -s "$f" ]; then
		echo "bench: generating $f" >&2
		if [ "$kind" = record ]; then
			# shellcheck disable=SC2086 # args are the record flags
			"$BIN" record $args -o "$f.tmp.pickle" >/dev/null
			mv "$f.tmp.pickle" "$f"
		else
			read -r entries segs <<<"$args"
			python3 "$GEN" --mode torch --entries "$entries" --segments "$segs" --seed 1 "$f.tmp"
			mv "$f.tmp" "$f"
		fi
	fi
	cat "$f" >/dev/null
	st="" sc=""
	for ((i = 0; i < RUNS; i++)); do
		read -r w u s < <({ /usr/bin/time -f "%e %U %S" "$BIN" stats "$f" >/dev/null; } 2>&1 | tail -1)
		st+="$w"$'\n' sc+="$(awk -v u="$u" -v s="$s" 'BEGIN {print u + s}')"$'\n'
	done
	stats_s=$(median <<<"$st") stats_cpu=$(median <<<"$sc")
	echo "bench: memstat view $f" >&2
	j=$("$OUT/viewbench" -bin "$BIN" -chromium "$CHROMIUM" "$f" 2>/dev/null)
	val() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$j" "$1"; }
	size=$(stat -c %s "$f")
	fp=$(val first_page_s) fc=$(val first_page_cpu_s)
	rss1=$(val first_page_rss_kb) rss=$(val peak_rss_kb) rssv=$(val serving_rss_kb)
	heap=$(val js_heap_mb) bz=$(val browser_zoom_median_ms) bd=$(val browser_draw_median_ms) bs=$(val browser_state_step_median_ms)
	if awk -v h="$heap" 'BEGIN {exit !(h < 0)}'; then heap="-" bz="-" bd="-" bs="-"; else heap=$(printf %.0f "$heap") bz=$(printf %.0f "$bz") bd=$(printf %.0f "$bd") bs=$(printf %.0f "$bs"); fi
	rows+="| $name | $(mb "$size") | $(val entries) | $stats_s / $stats_cpu | $(printf %.2f "$fp") / $(printf %.2f "$fc") | $(ratio "$fp" "$stats_s") / $(ratio "$fc" "$stats_cpu") | $(printf %.0f "$(val zoom_pan_median_ms)") / $(printf %.0f "$(val zoom_pan_p90_ms)") / $(printf %.0f "$(val zoom_pan_max_ms)") | $(printf %.0f "$(val first_group_by_ms)") | $(printf %.0f "$(val state_at_peak_ms)") / $(printf %.0f "$(val state_next_entry_ms)") ($(printf %.0f "$(val state_at_peak_kb)") KB) | $(awk -v k="$rss1" 'BEGIN {printf "%.0f", k / 1024}') / $(awk -v k="$rssv" 'BEGIN {printf "%.0f", k / 1024}') / $(awk -v k="$rss" 'BEGIN {printf "%.0f", k / 1024}') | $(awk -v k="$rss1" -v s="$size" 'BEGIN {printf "%.2f", k * 1024 / s}') / $(awk -v k="$rssv" -v s="$size" 'BEGIN {printf "%.2f", k * 1024 / s}') / $(awk -v k="$rss" -v s="$size" 'BEGIN {printf "%.2f", k * 1024 / s}') | $heap | $bz / $bd | $bs |"$'\n'
done

now=$(date -u '+%Y-%m-%d %H:%M UTC')
cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
section=$(
	cat <<EOF
## memstat view (bench/view.sh)

Machine: $cpu, $(nproc) CPUs. Date: $now. memstat $(git describe --tags --always --dirty 2>/dev/null || echo unknown).
Command: \`bench/view.sh\` (\`make bench\` runs it last). Files: gen_snapshot.py --mode torch (torch-100MB, torch-1GB:
\`--entries 8600000 --segments 86000 --seed 1\`) and a long recorded run (\`memstat record --layers 32 --steps 200\`,
1.75 million events). stats: \`bin/memstat stats FILE\`, median of $RUNS, wall / CPU (user + system) seconds.
view: \`bench/viewbench\` starts \`bin/memstat view FILE --no-open\` and times, from the start, the page's
first picture (URL printed, then the page, \`/api/info\`, \`/api/overview\` and the whole-trace window at 1300
columns: everything the page asks for before it draws), wall / the server's CPU seconds (on a shared machine
the CPU ratio is steadier, not steady); then zoom/pan: $((40 + 10)) windows of 1300 columns
from the whole trace down to 200 entries at random places (40 with one band per allocation, top 300; 10 by
stack, top 40), latency per request; the first group-by request (it builds the grouping); the allocator state
at the peak (a replay up to it) and at the next entry (one step), each as the page's first request for it
(the blocks of the first 64 segments, a summary row of the 1,000 after them) and the size of that answer; the server's RSS: its peak (VmHWM) once the
first page is served (the load and the build) / what it holds then (VmRSS: serving) / its peak at the end (after
the states). Browser: the page in headless Chromium (1400x1100), 40 wheel
zooms and drags, each timed to the redrawn window (the page waits 40 ms after the last wheel event before it
asks), and the time the page spent drawing it (medians); then the allocator state at the peak and 5 steps
with the arrow key, each timed to the next state drawn (median); JS heap: the largest Performance.getMetrics
JSHeapUsedSize over the run.

| snapshot | MB | entries | stats s wall / CPU | first page s wall / CPU | first page / stats wall / CPU | zoom/pan ms median / p90 / max | first group-by ms | state at peak / next ms (answer KB) | RSS MB first page / serving / peak | RSS / file first page / serving / peak | JS heap MB | browser zoom/pan to redrawn / drawing ms | browser state step ms |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
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
