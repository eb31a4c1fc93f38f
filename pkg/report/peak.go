package report

import (
	"fmt"
	"strings"

	"github.com/memstat/memstat/pkg/analysis"
)

// MomentText says when a moment was: "after entry 4321 of 6486 (+1.234567s,
// in forward)", "before the first of 6486 trace entries", or "in the final
// state (no trace)".
func MomentText(m analysis.Moment, entries int) string {
	if entries == 0 {
		return "in the final state (no trace)"
	}
	if m.Index < 0 {
		return fmt.Sprintf("before the first of %d trace entries (the trace starts there)", entries)
	}
	var extra []string
	if m.TimeUS != 0 {
		extra = append(extra, Seconds(m.Seconds))
	}
	if m.Phase != "" {
		extra = append(extra, "in "+m.Phase)
	}
	s := fmt.Sprintf("after entry %d of %d", m.Index, entries)
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, ", ") + ")"
	}
	return s
}

// groupColumn is the heading of the key column for a grouping.
func groupColumn(by analysis.GroupBy) string {
	switch by {
	case analysis.ByFile:
		return "File"
	case analysis.ByAnnotation:
		return "Annotation when allocated"
	}
	return "Allocated at"
}

// GroupLabel is the text of a group's key column.
func GroupLabel(g analysis.Group, by analysis.GroupBy) string {
	if by != analysis.ByStack {
		return g.Key
	}
	s := SiteLabel(g.Site, g.Stack)
	if g.FreedAt {
		s = analysis.FreedAtPrefix + s
	}
	return s
}

// GroupTable lists live memory grouped like pprof's top: bytes, share of
// the total, running share, blocks and the group, with a row for the
// groups cut (rest, when rest.Count > 0) and a total row. numbered adds a
// "#" column that StackLines blocks refer to.
func GroupTable(groups []analysis.Group, rest analysis.Group, by analysis.GroupBy, total int64, numbered bool) *Table {
	t := &Table{}
	if numbered {
		t.Columns = append(t.Columns, Column{Name: "#", Key: "rank", Align: Right})
	}
	t.Columns = append(t.Columns,
		Column{Name: "Bytes", Key: "bytes", Align: Right},
		Column{Name: "% of peak", Key: "fraction", Align: Right},
		Column{Name: "Sum %", Key: "cumulative_fraction", Align: Right},
		Column{Name: "Blocks", Key: "blocks", Align: Right},
		Column{Name: groupColumn(by), Key: "group"},
	)
	var cum float64
	var sumBytes int64
	var sumCount int
	row := func(rank Cell, g analysis.Group, label string) {
		cum += g.Fraction
		sumBytes += g.Bytes
		sumCount += g.Count
		cells := []Cell{Bytes(g.Bytes), Pct(g.Fraction), Pct(cum), Int(int64(g.Count)), Str(label)}
		if numbered {
			cells = append([]Cell{rank}, cells...)
		}
		t.Add(cells...)
	}
	for i, g := range groups {
		row(Int(int64(i+1)), g, GroupLabel(g, by))
	}
	if rest.Count > 0 {
		row(Blank(), rest, rest.Key)
	}
	cells := []Cell{Bytes(sumBytes), Pct(Ratio(sumBytes, total)), Blank(), Int(int64(sumCount)), Str("total")}
	if numbered {
		cells = append([]Cell{Blank()}, cells...)
	}
	t.Add(cells...)
	return t
}

// PhaseTable lists the peaks inside each annotated range name.
func PhaseTable(phases []analysis.PhasePeak, entries int) *Table {
	t := &Table{Columns: []Column{
		{Name: "Annotation", Key: "name"},
		{Name: "Ranges", Key: "ranges", Align: Right},
		{Name: "Entries", Key: "entries", Align: Right},
		{Name: "Peak allocated", Key: "peak_allocated", Align: Right},
		{Name: "Peak reserved", Key: "peak_reserved", Align: Right},
		{Name: "Allocated peak at", Key: "at"},
	}}
	for _, p := range phases {
		ranges := Int(int64(p.Ranges))
		if p.Name == analysis.NoAnnotationLabel {
			ranges = Str("-")
		}
		at := "-"
		if p.Entries > 0 {
			at = fmt.Sprintf("entry %d", p.At.Index)
			if p.At.TimeUS != 0 {
				at += " (" + Seconds(p.At.Seconds) + ")"
			}
		}
		t.Add(Str(p.Name), ranges, Int(int64(p.Entries)), Bytes(p.PeakAllocated), Bytes(p.PeakReserved), Str(at))
	}
	return t
}
