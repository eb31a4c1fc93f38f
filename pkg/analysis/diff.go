package analysis

import (
	"maps"
	"slices"
	"strings"

	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Figure is one memory_stats value in two snapshots. Missing is set when
// one side lacks the key (files of different PyTorch versions).
type Figure struct {
	Key       string `json:"key"`
	Before    int64  `json:"before"`
	After     int64  `json:"after"`
	InBefore  bool   `json:"in_before"`
	InAfter   bool   `json:"in_after"`
	Delta     int64  `json:"delta"`
	IsBytes   bool   `json:"bytes"`
	KeyFigure bool   `json:"key_figure"`
	// BoundBefore/BoundAfter are set where a side does not determine the
	// figure (Before/After are then the bound's lower end, and Delta is
	// 0: no change can be claimed).
	BoundBefore *replay.Bound `json:"bound_before,omitempty"`
	BoundAfter  *replay.Bound `json:"bound_after,omitempty"`
}

// Bounded reports whether either side is a bound.
func (f *Figure) Bounded() bool { return f.BoundBefore != nil || f.BoundAfter != nil }

// Changed reports whether the figure differs (bounds: whether they are
// not the same bound).
func (f *Figure) Changed() bool {
	if f.InBefore != f.InAfter {
		return true
	}
	if f.Bounded() {
		return f.BoundBefore == nil || f.BoundAfter == nil || f.BoundBefore.String() != f.BoundAfter.String()
	}
	return f.Delta != 0
}

// KeyFigures are the memory_stats keys `memstat diff` lists first.
var KeyFigures = []string{
	"allocated_bytes.all.peak", "reserved_bytes.all.peak", "allocated_bytes.all.current",
	"reserved_bytes.all.current", "active_bytes.all.peak", "requested_bytes.all.peak",
	"num_ooms", "num_alloc_retries", "segment.all.current", "segment.all.peak",
	"allocation.all.current", "allocation.all.peak", "inactive_split_bytes.all.current",
	// Only where a side has private pools (CUDA graphs, MemPool).
	replay.PrivatePoolReserved, replay.PrivatePoolAllocated,
}

// StackDelta is live-at-peak memory of one stack in two snapshots.
type StackDelta struct {
	Key         string `json:"key"`
	BeforeBytes int64  `json:"before_bytes"`
	AfterBytes  int64  `json:"after_bytes"`
	BeforeCount int    `json:"before_count"`
	AfterCount  int    `json:"after_count"`
	// Sizes are the block sizes whose counts differ.
	Sizes        []SizeDelta      `json:"sizes"`
	Site         snapshot.Frame   `json:"-"`
	Stack        []snapshot.Frame `json:"-"`
	HiddenFrames int              `json:"hidden_frames"`
	// Label names the stack in a table (StackLabels over every changed
	// stack, so it does not depend on how many a table lists).
	Label string `json:"label"`
}

// Delta is AfterBytes - BeforeBytes.
func (d *StackDelta) Delta() int64 { return d.AfterBytes - d.BeforeBytes }

// SizeDelta counts blocks of one size in two snapshots.
type SizeDelta struct {
	Size   int64 `json:"size"`
	Before int   `json:"before"`
	After  int   `json:"after"`
}

// SegmentDelta counts segments of one kind and size in two snapshots.
type SegmentDelta struct {
	Pool       string `json:"pool"`
	Size       int64  `json:"size"`
	Expandable bool   `json:"expandable"`
	Before     int    `json:"before"`
	After      int    `json:"after"`
}

// DeviceDiff compares one device of two snapshots.
type DeviceDiff struct {
	Device   int  `json:"device"`
	InBefore bool `json:"in_before"`
	InAfter  bool `json:"in_after"`
	// Figures are memory_stats, key figures first, then the rest in
	// PyTorch's order.
	Figures []Figure `json:"memory_stats"`
	// Bounds are each side's figures its snapshot does not determine.
	Bounds DiffBounds `json:"bounds"`
	// UnusedBefore/After split the reserved memory at the peak of
	// allocated memory (their Fragmentation is the stranded share).
	UnusedBefore replay.Unused `json:"at_peak_allocated_before"`
	UnusedAfter  replay.Unused `json:"at_peak_allocated_after"`
	// Stacks compares the memory live at the peak of allocated memory by
	// allocation stack (matched by frame content, never by address),
	// largest change first; unchanged stacks are left out.
	Stacks    []StackDelta `json:"stacks"`
	Unchanged int          `json:"unchanged_stacks"`
	// Segments lists the segment kinds and sizes whose counts differ in
	// the final states.
	Segments []SegmentDelta `json:"segments"`
	// CoverageBefore/After say what each trace covers (complete, partial,
	// none): counters of a partial or missing history count only the
	// window, or nothing.
	CoverageBefore string `json:"coverage_before,omitempty"`
	CoverageAfter  string `json:"coverage_after,omitempty"`
	// PeakBefore/After are the peak moments.
	PeakBefore *Moment `json:"peak_before,omitempty"`
	PeakAfter  *Moment `json:"peak_after,omitempty"`
}

// DiffBounds are the bounded figures of the two sides of a diff.
type DiffBounds struct {
	Before map[string]replay.Bound `json:"before"`
	After  map[string]replay.Bound `json:"after"`
}

// Same reports whether nothing differs.
func (d *DeviceDiff) Same() bool {
	if !d.InBefore || !d.InAfter || len(d.Stacks) > 0 || len(d.Segments) > 0 {
		return false
	}
	for _, f := range d.Figures {
		if f.Changed() {
			return false
		}
	}
	return d.UnusedBefore == d.UnusedAfter
}

// DiffSide is one snapshot device's inputs to a diff: its replay, its
// frame classifier, and its peak.
type DiffSide struct {
	Replayed *Replayed
	Frames   *Frames
	Peak     *Peak
}

// DiffDevices compares one device of two snapshots; either side may be
// nil (the device has no data there).
func DiffDevices(device int, before, after *DiffSide) *DeviceDiff {
	d := &DeviceDiff{Device: device, InBefore: before != nil, InAfter: after != nil}
	stats := func(s *DiffSide) map[string]int64 {
		if s == nil {
			return nil
		}
		m := s.Replayed.Result.MemoryStatsMap()
		if p := &s.Replayed.Result.Pools; p.Any() {
			// The private pools' peaks, beside memory_stats (which
			// counts the pools in its figures); a bound replaces them
			// below where the trace leaves a segment's pool open.
			m[replay.PrivatePoolReserved], m[replay.PrivatePoolAllocated] = p.Reserved.Peak, p.Allocated.Peak
		}
		return m
	}
	mb, ma := stats(before), stats(after)
	bounds := func(s *DiffSide) map[string]replay.Bound {
		out := map[string]replay.Bound{}
		if s != nil {
			maps.Copy(out, s.Replayed.Result.Bounds)
		}
		return out
	}
	d.Bounds = DiffBounds{Before: bounds(before), After: bounds(after)}
	// A bounded figure is listed like the others, its lower end standing
	// in for the value.
	for k, b := range d.Bounds.Before {
		mb[k] = b.Min
	}
	for k, b := range d.Bounds.After {
		ma[k] = b.Min
	}
	var keys []string
	seen := map[string]bool{}
	for _, k := range KeyFigures {
		_, b := mb[k]
		_, a := ma[k]
		if a || b {
			keys = append(keys, k)
			seen[k] = true
		}
	}
	for _, s := range []*DiffSide{before, after} {
		if s == nil {
			continue
		}
		for _, kv := range s.Replayed.Result.MemoryStats {
			if !seen[kv.Key] {
				seen[kv.Key] = true
				keys = append(keys, kv.Key)
			}
		}
		for _, k := range replay.BoundKeys(s.Replayed.Result.Bounds) {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	for _, k := range keys {
		f := Figure{Key: k, IsBytes: strings.Contains(k, "bytes") || k == "max_split_size" || k == replay.PrivatePoolReserved || k == replay.PrivatePoolAllocated, KeyFigure: slices.Contains(KeyFigures, k)}
		f.Before, f.InBefore = mb[k]
		f.After, f.InAfter = ma[k]
		f.Delta = f.After - f.Before
		if b, ok := d.Bounds.Before[k]; ok {
			f.BoundBefore = &b
		}
		if b, ok := d.Bounds.After[k]; ok {
			f.BoundAfter = &b
		}
		if f.Bounded() {
			f.Delta = 0
		}
		d.Figures = append(d.Figures, f)
	}
	if before != nil {
		d.CoverageBefore = before.Replayed.Result.History.Coverage
		d.UnusedBefore = before.Replayed.Result.AtPeak
		d.PeakBefore = &before.Peak.Allocated
	}
	if after != nil {
		d.CoverageAfter = after.Replayed.Result.History.Coverage
		d.UnusedAfter = after.Replayed.Result.AtPeak
		d.PeakAfter = &after.Peak.Allocated
	}
	d.Stacks, d.Unchanged = diffStacks(before, after)
	d.Segments = diffSegments(before, after)
	return d
}

func diffStacks(before, after *DiffSide) ([]StackDelta, int) {
	idx := map[string]int{}
	var out []StackDelta
	var sizes []map[int64]*SizeDelta
	add := func(s *DiffSide, isAfter bool) {
		if s == nil {
			return
		}
		for _, g := range GroupBlocks(s.Peak.Live, ByStack, s.Frames, s.Replayed.Phases, 0) {
			i, ok := idx[g.Key]
			if !ok {
				i = len(out)
				idx[g.Key] = i
				out = append(out, StackDelta{Key: g.Key, Site: g.Site, Stack: g.Stack, HiddenFrames: g.HiddenFrames})
				sizes = append(sizes, map[int64]*SizeDelta{})
			}
			for size, n := range g.Sizes {
				sd := sizes[i][size]
				if sd == nil {
					sd = &SizeDelta{Size: size}
					sizes[i][size] = sd
				}
				if isAfter {
					sd.After += n
				} else {
					sd.Before += n
				}
			}
			if isAfter {
				out[i].AfterBytes, out[i].AfterCount = g.Bytes, g.Count
			} else {
				out[i].BeforeBytes, out[i].BeforeCount = g.Bytes, g.Count
			}
		}
	}
	add(before, false)
	add(after, true)
	for i := range out {
		for _, sd := range sizes[i] {
			if sd.Before != sd.After {
				out[i].Sizes = append(out[i].Sizes, *sd)
			}
		}
		slices.SortFunc(out[i].Sizes, func(x, y SizeDelta) int {
			switch {
			case x.Size > y.Size:
				return -1
			case x.Size < y.Size:
				return 1
			}
			return 0
		})
	}
	n := len(out)
	out = slices.DeleteFunc(out, func(sd StackDelta) bool { return len(sd.Sizes) == 0 })
	unchanged := n - len(out)
	abs := func(n int64) int64 {
		if n < 0 {
			return -n
		}
		return n
	}
	slices.SortStableFunc(out, func(x, y StackDelta) int {
		if dx, dy := abs(x.Delta()), abs(y.Delta()); dx != dy {
			if dx > dy {
				return -1
			}
			return 1
		}
		return strings.Compare(x.Key, y.Key)
	})
	sites := make([]snapshot.Frame, len(out))
	stacks := make([][]snapshot.Frame, len(out))
	freed := make([]bool, len(out))
	for i, s := range out {
		sites[i], stacks[i], freed[i] = s.Site, s.Stack, strings.HasPrefix(s.Key, FreedAtPrefix)
	}
	allFrames := (before != nil && before.Frames.AllFrames()) || (after != nil && after.Frames.AllFrames())
	for i, l := range StackLabels(sites, stacks, freed, allFrames) {
		out[i].Label = l
	}
	return out, unchanged
}

func diffSegments(before, after *DiffSide) []SegmentDelta {
	type kind struct {
		pool       string
		size       int64
		expandable bool
	}
	counts := map[kind]*SegmentDelta{}
	var order []kind
	add := func(s *DiffSide, isAfter bool) {
		if s == nil {
			return
		}
		for _, seg := range s.Replayed.Snap.DeviceSegments(s.Replayed.Device) {
			k := kind{seg.Pool.String(), seg.TotalSize, seg.Expandable}
			c := counts[k]
			if c == nil {
				c = &SegmentDelta{Pool: k.pool, Size: k.size, Expandable: k.expandable}
				counts[k] = c
				order = append(order, k)
			}
			if isAfter {
				c.After++
			} else {
				c.Before++
			}
		}
	}
	add(before, false)
	add(after, true)
	var out []SegmentDelta
	for _, k := range order {
		if c := counts[k]; c.Before != c.After {
			out = append(out, *c)
		}
	}
	slices.SortStableFunc(out, func(x, y SegmentDelta) int {
		switch {
		case x.Size > y.Size:
			return -1
		case x.Size < y.Size:
			return 1
		}
		return strings.Compare(x.Pool, y.Pool)
	})
	return out
}
