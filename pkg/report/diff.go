package report

import (
	"fmt"
	"strings"

	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/replay"
)

// figureLabels name the key figures of a diff.
var figureLabels = map[string]string{
	"allocated_bytes.all.peak":           "Peak allocated",
	"reserved_bytes.all.peak":            "Peak reserved",
	"allocated_bytes.all.current":        "Allocated at the end",
	"reserved_bytes.all.current":         "Reserved at the end",
	"active_bytes.all.peak":              "Peak active",
	"requested_bytes.all.peak":           "Peak requested",
	"num_ooms":                           "OOMs",
	"num_alloc_retries":                  "cudaMalloc retries",
	"segment.all.current":                "Segments at the end",
	"segment.all.peak":                   "Peak segments",
	"allocation.all.current":             "Live allocations at the end",
	"allocation.all.peak":                "Peak live allocations",
	"inactive_split_bytes.all.current":   "Non-releasable at the end",
	"inactive_split_bytes.all.peak":      "Peak non-releasable",
	"num_device_alloc":                   "cudaMalloc / map calls",
	"num_device_free":                    "cudaFree / unmap calls",
	"num_sync_all_streams":               "Synchronizations of all streams",
	"oversize_allocations.current":       "Oversize allocations at the end",
	"oversize_segments.current":          "Oversize segments at the end",
	"max_split_size":                     "max_split_size",
	"allocated_bytes.all.allocated":      "Allocated in total",
	"allocated_bytes.all.freed":          "Freed in total",
	"reserved_bytes.all.allocated":       "Reserved in total",
	"reserved_bytes.all.freed":           "Released in total",
	"allocation.all.allocated":           "Allocations",
	"segment.all.allocated":              "Segments created",
	"segment.all.freed":                  "Segments released",
	"active_bytes.all.current":           "Active at the end",
	"requested_bytes.all.current":        "Requested at the end",
	"inactive_split.all.current":         "Non-releasable blocks at the end",
	"active.all.current":                 "Active blocks at the end",
	"requested_bytes.all.allocated":      "Requested in total",
	"inactive_split_bytes.all.allocated": "Non-releasable in total",
	replay.PrivatePoolReserved:           "Peak reserved in private pools",
	replay.PrivatePoolAllocated:          "Peak allocated in private pools",
}

// FigureLabel names a memory_stats key for people ("" when it has no
// name of its own).
func FigureLabel(key string) string { return figureLabels[key] }

func figureCell(f analysis.Figure, present bool, v int64, b *replay.Bound) Cell {
	if !present {
		return Cell{Text: "-"}
	}
	if b != nil {
		return BoundCell(*b)
	}
	if f.IsBytes {
		return Bytes(v)
	}
	return Int(v)
}

// FigureTable puts memory_stats of two snapshots side by side with the
// change; only lists the figures given.
func FigureTable(figs []analysis.Figure, before, after string) *Table {
	t := &Table{Columns: []Column{
		{Name: "Figure", Key: "figure"},
		{Name: "Key", Key: "key"},
		{Name: before, Key: "before", Align: Right},
		{Name: after, Key: "after", Align: Right},
		{Name: "Change", Key: "change", Align: Right},
	}}
	for _, f := range figs {
		change := Cell{Text: "-"}
		switch {
		case f.Bounded():
			// No change can be claimed where a side is a bound.
			change = Cell{Text: "bound"}
		case f.InBefore && f.InAfter:
			if f.IsBytes {
				change = DeltaBytes(f.Delta)
			} else {
				change = Delta(f.Delta)
			}
			if f.Delta != 0 && f.Before != 0 {
				change.Text += fmt.Sprintf(" (%+.1f%%)", 100*float64(f.Delta)/float64(f.Before))
			}
		}
		t.Add(Str(FigureLabel(f.Key)), Str(f.Key), figureCell(f, f.InBefore, f.Before, f.BoundBefore), figureCell(f, f.InAfter, f.After, f.BoundAfter), change)
	}
	return t
}

// SizesText describes how the blocks of a stack changed: "+12 × 85.3 MiB,
// -1 × 8.0 MiB" (at most five sizes).
func SizesText(sizes []analysis.SizeDelta) string {
	var parts []string
	for i, s := range sizes {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("... (%d sizes)", len(sizes)))
			break
		}
		parts = append(parts, fmt.Sprintf("%+d × %s", s.After-s.Before, Size(s.Size)))
	}
	return strings.Join(parts, ", ")
}

// StackDeltaTable lists the live-at-peak memory of stacks in two
// snapshots, with the change.
func StackDeltaTable(stacks []analysis.StackDelta, numbered bool) *Table {
	t := &Table{}
	if numbered {
		t.Columns = append(t.Columns, Column{Name: "#", Key: "rank", Align: Right})
	}
	t.Columns = append(t.Columns,
		Column{Name: "Change", Key: "change", Align: Right},
		Column{Name: "Before", Key: "before", Align: Right},
		Column{Name: "After", Key: "after", Align: Right},
		Column{Name: "Blocks", Key: "blocks", Align: Right},
		Column{Name: "Allocated at", Key: "site"},
		Column{Name: "Blocks by size", Key: "sizes"},
	)
	groups := make([]analysis.Group, len(stacks))
	for i, s := range stacks {
		groups[i] = analysis.Group{Key: s.Key, Site: s.Site, Stack: s.Stack, FreedAt: strings.HasPrefix(s.Key, analysis.FreedAtPrefix), Label: s.Label}
	}
	labels := GroupLabels(groups, analysis.ByStack)
	for i, s := range stacks {
		cells := []Cell{DeltaBytes(s.Delta()), Bytes(s.BeforeBytes), Bytes(s.AfterBytes),
			Str(fmt.Sprintf("%d → %d", s.BeforeCount, s.AfterCount)), Str(labels[i]), Str(SizesText(s.Sizes))}
		if numbered {
			cells = append([]Cell{Int(int64(i + 1))}, cells...)
		}
		t.Add(cells...)
	}
	return t
}

// SegmentDeltaTable lists segment kinds and sizes whose counts differ.
func SegmentDeltaTable(segs []analysis.SegmentDelta) *Table {
	t := &Table{Columns: []Column{
		{Name: "Pool", Key: "pool"},
		{Name: "Size", Key: "size", Align: Right},
		{Name: "Expandable", Key: "expandable"},
		{Name: "Before", Key: "before", Align: Right},
		{Name: "After", Key: "after", Align: Right},
		{Name: "Change", Key: "change", Align: Right},
		{Name: "Reserved change", Key: "reserved_change", Align: Right},
	}}
	for _, s := range segs {
		exp := "-"
		if s.Expandable {
			exp = "yes"
		}
		t.Add(Str(s.Pool), Bytes(s.Size), Str(exp), Int(int64(s.Before)), Int(int64(s.After)),
			Delta(int64(s.After-s.Before)), DeltaBytes(int64(s.After-s.Before)*s.Size))
	}
	return t
}
