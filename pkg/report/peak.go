package report

import (
	"fmt"
	"strings"

	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/snapshot"
)

// AtEntryText says at which entry something happened: "at entry 1117 of
// 1299 (+1.038934s, in forward)".
func AtEntryText(m analysis.Moment, entries int) string {
	s := MomentText(m, entries)
	if m.Index >= 0 && entries > 0 {
		s = "at" + strings.TrimPrefix(s, "after")
	}
	return s
}

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

// GroupLabels names the groups of a table. Other groupings are their key;
// stacks have the Label analysis.GroupBlocks gave them over every group
// (analysis.StackLabels: the site, and the first frame that tells it from
// groups of the same site), so a label does not change with --top.
func GroupLabels(groups []analysis.Group, by analysis.GroupBy) []string {
	out := make([]string, len(groups))
	if by != analysis.ByStack {
		for i, g := range groups {
			out[i] = g.Key
		}
		return out
	}
	missing := false
	for i, g := range groups {
		out[i] = g.Label
		missing = missing || g.Label == ""
	}
	if !missing {
		return out
	}
	// Groups made elsewhere than analysis.GroupBlocks: labelled among
	// themselves.
	sites := make([]snapshot.Frame, len(groups))
	stacks := make([][]snapshot.Frame, len(groups))
	freed := make([]bool, len(groups))
	for i, g := range groups {
		sites[i], stacks[i], freed[i] = g.Site, g.Stack, g.FreedAt
	}
	return analysis.StackLabels(sites, stacks, freed, false)
}

// GroupTable lists live memory grouped like pprof's top: bytes, share of
// the total, running share, blocks and the group, with a row for the
// groups cut (rest, when rest.Count > 0) and a total row. numbered adds a
// "#" column that StackLines blocks refer to.
// of names the total in the share's heading ("peak", "allocated").
func GroupTable(groups []analysis.Group, rest analysis.Group, by analysis.GroupBy, total int64, numbered bool, of string) *Table {
	t := &Table{}
	if numbered {
		t.Columns = append(t.Columns, Column{Name: "#", Key: "rank", Align: Right})
	}
	t.Columns = append(t.Columns,
		Column{Name: "Bytes", Key: "bytes", Align: Right},
		Column{Name: "% of " + of, Key: "fraction", Align: Right},
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
	labels := GroupLabels(groups, by)
	for i, g := range groups {
		row(Int(int64(i+1)), g, labels[i])
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

// GroupJSON is a group of live memory in JSON output.
type GroupJSON struct {
	Rank        int         `json:"rank,omitempty"`
	Key         string      `json:"key"`
	Label       string      `json:"label"`
	Bytes       int64       `json:"bytes"`
	Fraction    float64     `json:"fraction"`
	Blocks      int         `json:"blocks"`
	Requested   int64       `json:"requested_bytes"`
	BeforeTrace int64       `json:"before_trace_bytes"`
	Site        *FrameJSON  `json:"site,omitempty"`
	Stack       []FrameJSON `json:"stack,omitempty"`
	Hidden      int         `json:"hidden_frames,omitempty"`
}

// GroupRecords turns groups into their JSON form, labelled as
// GroupLabels does; stacks adds their stacks.
func GroupRecords(groups []analysis.Group, by analysis.GroupBy, stacks bool) []GroupJSON {
	out := make([]GroupJSON, 0, len(groups))
	for i, l := range GroupLabels(groups, by) {
		out = append(out, GroupRecord(groups[i], i+1, l, stacks))
	}
	return out
}

// GroupRecord turns a group into its JSON form; rank 0 is the row of the
// groups cut (no site), and stacks adds the stack.
func GroupRecord(g analysis.Group, rank int, label string, stacks bool) GroupJSON {
	j := GroupJSON{Rank: rank, Key: g.Key, Label: label, Bytes: g.Bytes, Fraction: g.Fraction, Blocks: g.Count,
		Requested: g.Requested, BeforeTrace: g.BeforeTrace}
	if rank > 0 {
		site := FrameRecord(g.Site)
		j.Site = &site
		if stacks {
			j.Stack, j.Hidden = FrameRecords(g.Stack), g.HiddenFrames
		}
	}
	return j
}
