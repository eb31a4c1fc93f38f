package report

import (
	"fmt"
	"strings"

	"github.com/memstat/memstat/pkg/replay"
)

// CounterCell is a memory_stats counter as a cell: its value when the
// replay determines it, its bound (">= 3", "3-5") when it does not.
func CounterCell(res *replay.Result, key string) Cell {
	if b, ok := res.Bounds[key]; ok {
		return BoundCell(b)
	}
	return Int(res.Stat(key))
}

// BoundCell renders a bound; its raw value (CSV, JSON tables) is the
// same text.
func BoundCell(b replay.Bound) Cell {
	return Str(b.Format(Size))
}

// BoundNotes are the notes under a replay's figures: one line per
// bounded figure, saying why it is a bound, then one per assumption the
// exact figures make (replay.Result.Assumptions).
//
// The bounds of a replay that could not apply some entries (every peak
// and total, for one reason) share one note.
func BoundNotes(res *replay.Result) []string {
	var out, shared []string
	reason := ""
	if res.Fidelity != nil && res.Fidelity.Unapplied > 0 {
		if b, ok := res.Bounds["reserved_bytes.all.peak"]; ok && b.Max == nil {
			reason = b.Reason
		}
	}
	for _, k := range replay.BoundKeys(res.Bounds) {
		b := res.Bounds[k]
		if reason != "" && b.Reason == reason {
			shared = append(shared, k+" "+b.Format(Size))
			continue
		}
		out = append(out, fmt.Sprintf("%s is a bound (%s), not an exact figure: %s.", k, b.Format(Size), b.Reason))
	}
	if len(shared) > 0 {
		out = append([]string{fmt.Sprintf("%d figures are bounds, not exact figures: %s: %s.", len(shared), reason, strings.Join(shared, ", "))}, out...)
	}
	for _, a := range res.Assumptions {
		out = append(out, a+".")
	}
	return out
}
