package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Characters of a segment bar.
const (
	BarAllocated = '#'
	BarPending   = '='
	BarFree      = '.'
)

// BarLegend explains SegmentBar.
const BarLegend = "map: # allocated, = freed but waiting for another stream (record_stream), . cached free; each bar spans its own segment"

// SegmentBar draws a segment's blocks as a bar of width cells, each cell
// showing the state that covers most of its bytes (ties: allocated, then
// pending).
func SegmentBar(blocks []snapshot.Block, width int) string {
	var total int64
	for _, b := range blocks {
		total += b.Size
	}
	if total == 0 || width <= 0 {
		return "[]"
	}
	cells := make([][3]int64, width) // allocated, pending, free bytes per cell
	var pos int64
	for _, b := range blocks {
		k := 2
		switch b.State {
		case snapshot.ActiveAllocated:
			k = 0
		case snapshot.ActivePendingFree:
			k = 1
		}
		start, end := pos, pos+b.Size
		pos = end
		for c := start * int64(width) / total; c < int64(width); c++ {
			lo := c * total / int64(width)
			hi := (c + 1) * total / int64(width)
			if lo >= end {
				break
			}
			if ov := min(hi, end) - max(lo, start); ov > 0 {
				cells[c][k] += ov
			}
		}
	}
	var sb strings.Builder
	sb.WriteByte('[')
	for _, c := range cells {
		switch {
		case c[0] > 0 && c[0] >= c[1] && c[0] >= c[2]:
			sb.WriteByte(BarAllocated)
		case c[1] > 0 && c[1] >= c[2]:
			sb.WriteByte(BarPending)
		default:
			sb.WriteByte(BarFree)
		}
	}
	sb.WriteByte(']')
	return sb.String()
}

// SegmentTable lists segments with their blocks summed by state, their
// fragmentation and their map, then a row summing the cut segments
// (cut, when there are any) and a total row.
func SegmentTable(segs, cut []analysis.SegmentInfo, total analysis.SegmentInfo, barWidth int) *Table {
	t := &Table{Columns: []Column{
		{Name: "Address", Key: "address"},
		{Name: "Size", Key: "size", Align: Right},
		{Name: "Pool", Key: "pool"},
		{Name: "Stream", Key: "stream"},
		{Name: "Exp", Key: "expandable"},
		{Name: "Blocks", Key: "blocks", Align: Right},
		{Name: "Allocated", Key: "allocated", Align: Right},
		{Name: "Pending", Key: "pending_free", Align: Right},
		{Name: "Free", Key: "free", Align: Right},
		{Name: "Largest free", Key: "largest_free", Align: Right},
		{Name: "Rounding", Key: "rounding", Align: Right},
		{Name: "Frag", Key: "fragmentation", Align: Right},
		{Name: "Map", Key: "map"},
	}}
	yes := func(b bool) Cell {
		if b {
			return Cell{Raw: true, Text: "yes"}
		}
		return Cell{Raw: false, Text: "-"}
	}
	// A column of segment_pool_id when some segment is in a private pool
	// (CUDA graph, MemPool); without one it would only repeat (0, 0).
	private := false
	for _, s := range append(slices.Clone(segs), cut...) {
		private = private || s.PoolID != [2]int64{}
	}
	if private {
		t.Columns = slices.Insert(t.Columns, 3, Column{Name: "Pool id", Key: "pool_id"})
	}
	for _, s := range segs {
		row := []Cell{Hex(s.Address), Bytes(s.Size), Str(s.Pool), Stream(s.Stream), yes(s.Expandable), Int(int64(len(s.Blocks))),
			Bytes(s.Allocated), Bytes(s.Pending), Bytes(s.Free), Bytes(s.LargestFree), Bytes(s.Rounding),
			Pct(s.Fragmentation()), Str(SegmentBar(s.Blocks, barWidth))}
		if private {
			row = slices.Insert(row, 3, Str(PoolID(s.PoolID)))
		}
		t.Add(row...)
	}
	blocks := 0
	for _, s := range segs {
		blocks += len(s.Blocks)
	}
	if len(cut) > 0 {
		r := analysis.SumSegments(cut)
		n := 0
		for _, s := range cut {
			n += len(s.Blocks)
		}
		blocks += n
		row := []Cell{Str(fmt.Sprintf("(%d more)", len(cut))), Bytes(r.Size), Blank(), Blank(), Blank(), Int(int64(n)), Bytes(r.Allocated),
			Bytes(r.Pending), Bytes(r.Free), Bytes(r.LargestFree), Bytes(r.Rounding), Pct(r.Fragmentation()), Blank()}
		if private {
			row = slices.Insert(row, 3, Blank())
		}
		t.Add(row...)
	}
	row := []Cell{Str("total"), Bytes(total.Size), Blank(), Blank(), Blank(), Int(int64(blocks)), Bytes(total.Allocated),
		Bytes(total.Pending), Bytes(total.Free), Bytes(total.LargestFree), Bytes(total.Rounding), Pct(total.Fragmentation()), Blank()}
	if private {
		row = slices.Insert(row, 3, Blank())
	}
	t.Add(row...)
	return t
}

// SegmentsUnusedText splits what the summed segments t hold beyond their
// allocated blocks as the headline does at the allocated peak: stranded in
// segments with live blocks, cached in segments without one.
func SegmentsUnusedText(t analysis.SegmentInfo) string {
	u := replay.NewUnused(t.Size, t.Allocated, t.Cached)
	return fmt.Sprintf("unused (reserved - allocated) %s, %s of their size: stranded %s, %s (free or pending in segments with live blocks: memstat's fragmentation); cached %s, %s (segments with no live block, which empty_cache() returns)",
		Size(u.Unused), Percent(u.UnusedShare), Size(u.Stranded), Percent(u.Fragmentation), Size(u.Cached), Percent(u.CachedShare))
}
