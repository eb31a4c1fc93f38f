#!/bin/sh
# Prints README.md's FIDELITY table: for every published snapshot with a
# trace, what `memstat replay` reproduces with the recorded settings.
#
#   scripts/fidelity.sh [MEMSTAT] [DIR]
#
# MEMSTAT defaults to bin/memstat (make build), DIR to ../shared/testdata/real.
# Needs jq.
set -eu
memstat=${1:-bin/memstat}
dir=${2:-../shared/testdata/real}
echo "| snapshot | trace starts | entries | segment events reproduced | placements reproduced | forced |"
echo "|---|---|---:|---:|---:|---:|"
for f in "$dir"/*; do
	case $f in *.tsv) continue ;; esac
	"$memstat" replay --json --device 0 "$f" 2>/dev/null | jq -r --arg name "$(basename "$f")" '
		.results[0].devices[0] | select(.coverage != "none") |
		"| `\($name)` | \(if .coverage == "complete" then "empty" else "mid-run" end) | \(.entries) | " +
		"\(.fidelity.segment_events.reproduced)/\(.fidelity.segment_events.recorded) | " +
		"\(.fidelity.placements.reproduced)/\(.fidelity.placements.recorded) | \(.fidelity.forced_operations) |"' || true
done
