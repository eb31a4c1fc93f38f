#!/usr/bin/env bash
# bench/run.sh: memstat's benchmarks (`make bench`). Figures go to
# BENCHMARKS.md, between the markers of the section this script owns; the
# rest of the file (other engineers' sections) is left as it is.
#
#  1. Generated snapshots (shared/tools/gen_snapshot.py, cached under
#     bench/out/, which git ignores): 100 MB and 1 GB, --mode torch (frames
#     shared through the pickle memo, as PyTorch >= 2.1 writes them) and
#     --mode fresh (every frame a new dict with new strings: the worst case
#     for a decoder). For each: `memstat stats FILE` end to end and CPython's
#     pickle.load of the same file alone, RUNS runs each, median wall time,
#     peak RSS (/usr/bin/time), MB/s and the ratio.
#  2. Every command on torch-100MB: wall time and peak RSS, median of RUNS,
#     and each one's ratio to `stats` (bench/commands.txt lists them).
#  3. `memstat trace`: the time to its first line (bench/firstline.py) on
#     the torch-mode files, and on a recorded 7B training run of 265,144
#     events (`memstat record ... --steps 30`), the full listing against
#     PyTorch's `_memory_viz.py trace` (MEMORY_VIZ, default
#     bench/out/_memory_viz.py: torch/cuda/_memory_viz.py of a PyTorch
#     checkout, stdlib only; without it the comparison is left out, with a
#     note).
#  4. Many ranks: `memstat stats --summary` over 64 rank files of 50 MB.
#  5. The Go benchmarks: allocator ops/s, pickle and snapshot decode/encode
#     MB/s, and snapshot.Read on the 100 MB files.
#  6. bench/view.sh: memstat view's first page against stats, zoom and pan
#     latency, the state at an event, the server's peak RSS.
#
# Environment: RUNS (default 3), GEN (path of gen_snapshot.py),
# SKIP_1GB=1 (leave out the 1 GB files), SKIP_RANKS=1, BENCHTIME (go test
# -benchtime, default 1s), MEMORY_VIZ. QUICK=1 checks the script in a few
# minutes: small files, one run, no 1 GB files or ranks, and the section
# goes to bench/out/BENCHMARKS.quick.md instead of BENCHMARKS.md.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."

OUT=bench/out
BIN=bin/memstat
RUNS=${RUNS:-3}
GEN=${GEN:-../shared/tools/gen_snapshot.py}
BENCHTIME=${BENCHTIME:-1s}
DOC=BENCHMARKS.md
TIME=/usr/bin/time
MEMORY_VIZ=${MEMORY_VIZ:-$OUT/_memory_viz.py}
QUICK=${QUICK:-}
mkdir -p "$OUT"
if [ "$QUICK" = 1 ]; then
	RUNS=1 SKIP_1GB=1 SKIP_RANKS=1 BENCHTIME=100ms DOC=$OUT/BENCHMARKS.quick.md
fi

[ -x "$BIN" ] || { echo "bench: $BIN missing; run make build (make bench does)" >&2; exit 1; }
[ -x "$TIME" ] || { echo "bench: $TIME missing (apt-get install time): it measures peak RSS" >&2; exit 1; }
command -v python3 >/dev/null || { echo "bench: python3 missing: it generates the snapshots and is the baseline" >&2; exit 1; }
[ -f "$GEN" ] || { echo "bench: $GEN missing; set GEN to gen_snapshot.py" >&2; exit 1; }

# name mode entries segments [seed]: sizes chosen so the files come out at
# about 100 MB, 1 GB and 50 MB (a torch-mode entry takes about 84 bytes
# and a segment of 20 blocks 2.9 KB; a fresh-mode entry about 2.3 KB).
SNAPSHOTS=(
	"torch-100MB torch 860000 8600"
	"fresh-100MB fresh 38000 380"
	"torch-1GB torch 8600000 86000"
	"fresh-1GB fresh 380000 3800"
)
[ "${SKIP_1GB:-}" = 1 ] && SNAPSHOTS=("${SNAPSHOTS[@]:0:2}")
# The file every command runs on, and the training run the trace listing
# is compared on (memstat record's flags).
CMDFILE=torch-100MB
RECORD=(--layers 32 --hidden 4096 --heads 32 --seq 2048 --batch 1 --device-memory 160GiB --steps 30)
RECORDED=7b-train-30steps
if [ "$QUICK" = 1 ]; then
	SNAPSHOTS=("torch-quick torch 20000 200" "fresh-quick fresh 2000 20")
	CMDFILE=torch-quick
	RECORD=(--layers 4 --hidden 512 --heads 8 --seq 512 --batch 8 --steps 3)
	RECORDED=small-train-3steps
fi

gen() { # name mode entries segments seed
	local f="$OUT/$1.pickle"
	if [ ! -s "$f" ]; then
		echo "bench: generating $f (--mode $2 --entries $3 --segments $4 --seed $5)" >&2
		python3 "$GEN" --mode "$2" --entries "$3" --segments "$4" --seed "$5" "$f.tmp"
		mv "$f.tmp" "$f"
	fi
}

# median of numbers on stdin
median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# run1 CMD...: runs it once; prints "wall_s peak_rss_kb". The command's
# stdout goes to /dev/null; a line "load SECONDS" on its stderr replaces
# the wall time (CPython's pickle.load alone).
run1() {
	local out wall rss load
	out=$("$TIME" -f "TIME %e %M" "$@" 2>&1 >/dev/null) || { echo "bench: $* failed: $out" >&2; return 1; }
	wall=$(awk '/^TIME/ {print $2}' <<<"$out")
	rss=$(awk '/^TIME/ {print $3}' <<<"$out")
	load=$(awk '/^load/ {print $2}' <<<"$out")
	[ -n "$wall" ] || { echo "bench: $* gave no timing: $out" >&2; return 1; }
	echo "${load:-$wall} $rss"
}

# compare FILE: runs memstat stats and CPython's pickle.load on FILE, RUNS
# times each, alternating (so that both meet the same machine: on a shared
# VM speed drifts by tens of percent over minutes); prints the medians
# "memstat_s memstat_rss_kb python_s python_rss_kb".
compare() {
	local i m p mw="" mr="" pw="" pr=""
	for ((i = 0; i < RUNS; i++)); do
		m=$(run1 "$BIN" stats "$1")
		p=$(run1 python3 -c "$PYLOAD" "$1")
		mw+="${m% *}"$'\n'
		mr+="${m#* }"$'\n'
		pw+="${p% *}"$'\n'
		pr+="${p#* }"$'\n'
	done
	echo "$(median <<<"$mw") $(median <<<"$mr") $(median <<<"$pw") $(median <<<"$pr")"
}

PYLOAD='import pickle, sys, time
f = open(sys.argv[1], "rb")
t = time.perf_counter()
pickle.load(f)
print("load", time.perf_counter() - t, file=sys.stderr)'

mb() { awk -v b="$1" 'BEGIN {printf "%.1f", b/1e6}'; }
rate() { awk -v b="$1" -v s="$2" 'BEGIN {printf "%.0f", b/1e6/s}'; }

rows=""
for s in "${SNAPSHOTS[@]}"; do
	read -r name mode entries segments <<<"$s"
	gen "$name" "$mode" "$entries" "$segments" 1
	f="$OUT/$name.pickle"
	bytes=$(stat -c %s "$f")
	cat "$f" >/dev/null # both read it from the page cache
	echo "bench: $f ($(mb "$bytes") MB): memstat stats and python3 pickle.load, $RUNS runs each" >&2
	res=$(compare "$f")
	read -r mwall mrss pwall prss <<<"$res"
	ratio=$(awk -v p="$pwall" -v m="$mwall" 'BEGIN {printf "%.1f", p/m}')
	rows+="| $name | $(mb "$bytes") | $mwall | $(rate "$bytes" "$mwall") | $(mb $((mrss * 1024))) | $(awk -v r="$mrss" -v b="$bytes" 'BEGIN {printf "%.2f", r*1024/b}') | $pwall | $(rate "$bytes" "$pwall") | $(mb $((prss * 1024))) | **${ratio}x** |"$'\n'
	echo "bench:   memstat ${mwall}s ${mrss} KB, python ${pwall}s ${prss} KB, ratio ${ratio}" >&2
done

# runmed N CMD...: run1 N times; prints the median "wall_s peak_rss_kb".
runmed() {
	local n=$1 i r w="" m=""
	shift
	for ((i = 0; i < n; i++)); do
		r=$(run1 "$@")
		w+="${r% *}"$'\n'
		m+="${r#* }"$'\n'
	done
	echo "$(median <<<"$w") $(median <<<"$m")"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a/b; else print "-"}'; }

# 2. Every command on one file, as users run them: stdout to /dev/null,
# files under bench/out/cmd. The first line of bench/commands.txt is stats.
# Each other command's runs alternate with runs of stats, and its ratios
# are to those stats runs: on a shared VM speed drifts by tens of percent
# over minutes, and one stats figure taken at the start decided whether a
# command met 1.5x (2026-11-25: stats 0.565 s in the table above, 0.65 s
# as this table's first row, in one run). The stats row is the median of
# all its runs.
cf="$OUT/$CMDFILE.pickle"
mkdir -p "$OUT/cmd"
echo "bench: every command on $cf, $RUNS runs each, alternating with stats" >&2
cmd_rows=""
stats_line="" stats_shown="" stats_all_w="" stats_all_m=""
while IFS= read -r line; do
	case "$line" in "" | "#"*) continue ;; esac
	shown=${line//FILE/$CMDFILE.pickle}
	shown=${shown//OUT\//}
	cmdline=${line//FILE/$cf}
	cmdline=${cmdline//OUT\//$OUT/cmd/}
	if [ -z "$stats_line" ]; then
		stats_line=$cmdline stats_shown=$shown
		continue
	fi
	w="" m="" sw="" sm=""
	for ((i = 0; i < RUNS; i++)); do
		# shellcheck disable=SC2086 # the lines are words
		r=$(run1 "$BIN" $stats_line)
		sw+="${r% *}"$'\n'
		sm+="${r#* }"$'\n'
		# shellcheck disable=SC2086
		r=$(run1 "$BIN" $cmdline)
		w+="${r% *}"$'\n'
		m+="${r#* }"$'\n'
	done
	stats_all_w+=$sw stats_all_m+=$sm
	w=$(median <<<"$w") m=$(median <<<"$m") sw=$(median <<<"$sw") sm=$(median <<<"$sm")
	cmd_rows+="| \`memstat $shown\` | $w | $(mb $((m * 1024))) | $sw | $(ratio "$w" "$sw") | $(ratio "$m" "$sm") |"$'\n'
	echo "bench:   memstat $shown: ${w}s ${m} KB; stats beside it ${sw}s ${sm} KB" >&2
done <bench/commands.txt
stats_w=$(median <<<"$stats_all_w") stats_m=$(median <<<"$stats_all_m")
cmd_rows="| \`memstat $stats_shown\` | $stats_w | $(mb $((stats_m * 1024))) | $stats_w | 1.00 | 1.00 |"$'\n'$cmd_rows

# 3. trace: the time to its first line, and the full listing of a
# recorded training run against _memory_viz.py trace.
first_rows=""
for s in "${SNAPSHOTS[@]}"; do
	read -r name mode _ <<<"$s"
	[ "$mode" = torch ] || continue
	f="$OUT/$name.pickle"
	fl="" fs="" fst=""
	for ((i = 0; i < RUNS; i++)); do
		fl+="$(python3 bench/firstline.py "$BIN" trace "$f" | awk '{print $2}')"$'\n'
		r=$(python3 bench/firstline.py "$BIN" trace --stream "$f")
		fs+="$(awk '{print $2}' <<<"$r")"$'\n'
		fst+="$(awk '{print $4}' <<<"$r")"$'\n'
	done
	fl=$(median <<<"$fl") fs=$(median <<<"$fs") fst=$(median <<<"$fst")
	first_rows+="| $name | $(mb "$(stat -c %s "$f")") | $fl | $fs | $fst |"$'\n'
	echo "bench:   trace $name: first line after ${fl}s; --stream: ${fs}s (all of it ${fst}s)" >&2
done
rec="$OUT/$RECORDED.pickle"
if [ ! -s "$rec" ]; then
	echo "bench: recording $rec (memstat record ${RECORD[*]})" >&2
	"$BIN" record "${RECORD[@]}" -o "$rec" >/dev/null 2>&1
fi
rec_entries=$("$BIN" trace --json --action snapshot "$rec" | python3 -c 'import json, sys
print(sum(r["trace_entries"] for r in map(json.loads, sys.stdin) if r["record"] == "summary"))')
mw="" mm="" pw="" pm=""
for ((i = 0; i < RUNS; i++)); do
	r=$(run1 "$BIN" trace "$rec")
	mw+="${r% *}"$'\n'
	mm+="${r#* }"$'\n'
	if [ -f "$MEMORY_VIZ" ]; then
		r=$(run1 python3 "$MEMORY_VIZ" trace "$rec")
		pw+="${r% *}"$'\n'
		pm+="${r#* }"$'\n'
	fi
done
mw=$(median <<<"$mw") mm=$(median <<<"$mm")
rec_first=$(python3 bench/firstline.py "$BIN" trace "$rec" | awk '{print $2}')
trace_rows="| \`memstat trace\` | $mw | $(mb $((mm * 1024))) | $rec_first |"$'\n'
if [ -n "$pw" ]; then
	pw=$(median <<<"$pw") pm=$(median <<<"$pm")
	trace_rows+="| \`python3 _memory_viz.py trace\` | $pw | $(mb $((pm * 1024))) | |"$'\n'
	viz_note="memstat trace is **$(ratio "$pw" "$mw")x** as fast as \`_memory_viz.py trace\`, with $(ratio "$mm" "$pm")x its peak RSS (targets: at least 5x, at most 1x)."
else
	viz_note="No \`_memory_viz.py\` at $MEMORY_VIZ in this run (set MEMORY_VIZ to PyTorch's torch/cuda/_memory_viz.py): no comparison."
fi
echo "bench:   trace $rec ($rec_entries entries): memstat ${mw}s ${mm} KB${pw:+, _memory_viz.py ${pw}s ${pm} KB}" >&2

ranks_row=""
if [ "${SKIP_RANKS:-}" != 1 ]; then
	# 64 ranks of 50 MB: 8 distinct snapshots (seeds 1-8), each copied to 8
	# rank files; every file is decoded and replayed on its own.
	mkdir -p "$OUT/ranks"
	for seed in 1 2 3 4 5 6 7 8; do
		gen "rank-seed$seed" torch 430000 4300 "$seed"
	done
	for r in $(seq 0 63); do
		dst="$OUT/ranks/rank$(printf %02d "$r").pickle"
		[ -s "$dst" ] || cp "$OUT/rank-seed$((r % 8 + 1)).pickle" "$dst"
	done
	total=$(cat "$OUT"/ranks/rank*.pickle | wc -c)
	cat "$OUT"/ranks/rank*.pickle >/dev/null
	echo "bench: 64 ranks ($(mb "$total") MB): memstat stats --summary" >&2
	res=$(run1 "$BIN" stats --summary "$OUT"/ranks/rank*.pickle)
	read -r rwall rrss <<<"$res"
	ranks_row="| 64 × torch 50 MB | $(mb "$total") | $rwall | $(rate "$total" "$rwall") | $(mb $((rrss * 1024))) |"
fi

echo "bench: go test -bench (allocator, pickle, snapshot)" >&2
gobench=$(go test -run '^$' -bench . -benchtime "$BENCHTIME" ./pkg/allocator ./pkg/pickle 2>&1 | grep -E '^(Benchmark|ok|FAIL)' || true)
readbench=$(MEMSTAT_BENCH_FILE="$PWD/$cf" go test -run '^$' -bench 'Read|Write' -benchtime "$BENCHTIME" ./pkg/snapshot 2>&1 | grep -E '^(Benchmark|ok|FAIL)' || true)
readbench2=$(MEMSTAT_BENCH_FILE="$PWD/$OUT/${SNAPSHOTS[1]%% *}.pickle" go test -run '^$' -bench 'Read/fresh' -benchtime "$BENCHTIME" ./pkg/snapshot 2>&1 | grep -E '^Benchmark' || true)

cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
mem=$(awk '/^MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)
now=$(date -u '+%Y-%m-%d %H:%M UTC')
section=$(
	cat <<EOF
## memstat stats on generated snapshots (bench/run.sh)

Machine: $cpu, $(nproc) CPUs, $mem memory. Date: $now. $(go version | cut -d' ' -f3-4), $(python3 --version), memstat $(git describe --tags --always --dirty 2>/dev/null || echo unknown).
Command: \`make bench\` (\`bench/run.sh\`, RUNS=$RUNS: median of $RUNS runs each, memstat and CPython alternating;
peak RSS from \`/usr/bin/time -f %M\`).

Snapshots: \`python3 gen_snapshot.py --mode MODE --entries N --segments M --seed 1 FILE\` (shared/tools; rows
below: torch-100MB 860000/8600, fresh-100MB 38000/380, torch-1GB 8600000/86000, fresh-1GB 380000/3800).
memstat: \`bin/memstat stats FILE >/dev/null\`, end to end (decode, replay of the trace, report).
CPython: \`python3 -c 'pickle.load(f)'\`, the time of \`pickle.load\` alone (timed inside Python), and the
process's peak RSS. Both read the file from the page cache. Ratio = CPython load time / memstat stats time.

| snapshot | MB | memstat s | memstat MB/s | memstat peak RSS MB | RSS / file | CPython load s | CPython MB/s | CPython peak RSS MB | ratio |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|
$rows
The generated traces are not self-consistent for the allocator (addresses outside segments), so the
replay forces most entries back to the recording; \`stats\` still finishes, as the rows show.

### Every command on $CMDFILE

Command: \`bin/memstat COMMAND bench/out/$CMDFILE.pickle\` for each line of \`bench/commands.txt\` (stdout to
/dev/null, files to bench/out/cmd), median of $RUNS runs, each run of a command alternating with a run of
\`stats\`; its ratios are to the median of those stats runs ("stats beside", so that both meet the same machine),
the stats row the median of all of them (target: every command within 1.5x of stats' time and memory; \`advise\`
within 1.5x per candidate it replays).

| command | s | peak RSS MB | stats beside s | time / stats | RSS / stats |
|---|---:|---:|---:|---:|---:|
$cmd_rows
### memstat trace: first line, and a recorded training run

Time to the first listed entry (\`python3 bench/firstline.py bin/memstat trace FILE\`: from start to the first
entry's line on a pipe, median of $RUNS). The default listing's comes after the whole file is decoded and the state
at the start of the trace rebuilt: the header's release and the first row's allocated memory and segment depend on
the whole file ("trace's first line" in the issue 16 section below). \`trace --stream\` prints each entry as it
decodes, so its first line comes once the segments, which PyTorch writes before the trace, are decoded (target:
0.2 s); its last column is the time to its last line:

| snapshot | MB | first line s | --stream: first line s | --stream: all lines s |
|---|---:|---:|---:|---:|
$first_rows
The full listing of a recorded training run (\`memstat record ${RECORD[*]}\`: $rec_entries trace entries,
$(mb "$(stat -c %s "$rec")") MB), stdout to /dev/null, median of $RUNS runs, memstat and
\`python3 _memory_viz.py trace\` (PyTorch's CLI, run standalone: MEMORY_VIZ) alternating:

| command | s | peak RSS MB | first line s |
|---|---:|---:|---:|
$trace_rows
$viz_note

EOF
	if [ -n "$ranks_row" ]; then
		cat <<EOF
### Many ranks at once

Command: \`bin/memstat stats --summary bench/out/ranks/rank*.pickle >/dev/null\` (one run; files decoded and
replayed in parallel within the memory budget; 8 distinct snapshots of
\`--mode torch --entries 430000 --segments 4300 --seed 1..8\`, each copied to 8 of the 64 rank files).

| files | MB | s | MB/s | peak RSS MB |
|---|---:|---:|---:|---:|
$ranks_row

EOF
	fi
	cat <<EOF
### Go benchmarks

Command: \`go test -run '^\$' -bench . -benchtime $BENCHTIME ./pkg/allocator ./pkg/pickle\` and
\`MEMSTAT_BENCH_FILE=$cf go test -run '^\$' -bench 'Read|Write' ./pkg/snapshot\`
(same machine and date). Allocator: ops/s is malloc and free calls per second (target: at least 5 M).
pickle BenchmarkDecode: generic value tree, no compactor. snapshot BenchmarkRead: the whole load path, MB/s of
input.

\`\`\`
$gobench
$readbench
$readbench2
\`\`\`
EOF
)

begin='<!-- bench/run.sh: begin (generated; edit bench/run.sh instead) -->'
end='<!-- bench/run.sh: end -->'
if [ ! -f "$DOC" ]; then
	printf '# Benchmarks\n\nEvery figure names its machine, date and command. Sections are independent: add yours below.\n\n%s\n%s\n' "$begin" "$end" >"$DOC"
fi
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

# 6. memstat view: first page, zoom/pan latency, server RSS (its own
# section of BENCHMARKS.md).
RUNS=$RUNS GEN=$GEN bench/view.sh
