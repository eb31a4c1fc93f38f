package allocator

import (
	"slices"

	"github.com/memstat/memstat/pkg/snapshot"
)

// Segments the simulation cannot hold.
//
// A replay seeds the segments that existed before its first entry, and
// after its last entry adds those only the snapshot has. A segment the
// model cannot place there (it overlaps a reservation the rebuild had to
// guess, it belongs to a pool the model does not simulate, its blocks do
// not tile it, ...) still existed: it is kept as it is in the snapshot,
// outside the simulated regions, and its figures are added to every
// statistic, so that no memory is ever dropped from a figure. Nothing of
// the trace changes it (an entry that touches it is not applied), so its
// figures are constant: the peaks of a segment present since the start
// are the simulated peaks plus its current figures.

// unmodelled holds the segments kept outside the simulation.
type unmodelled struct {
	// segs in the order they were added (each one's own Blocks).
	segs []snapshot.Segment
	// all are the current figures of every kept segment; fromStart those
	// of the segments kept since the start of the window (AddUnmodelled
	// before MarkWindowStart), which count in the peaks too.
	all, fromStart Stats
	// window is set once the window began: later segments count in the
	// current figures only.
	window bool
	// cached is the memory of the kept segments without an active block.
	cached int64
}

// AddUnmodelled keeps seg, which the simulation cannot hold, as the
// snapshot has it: its memory counts in every statistic (and in the
// device's obtained memory) and Segments lists it, but no allocator call
// uses it.
func (a *Allocator) AddUnmodelled(seg snapshot.Segment) {
	seg.Blocks = slices.Clone(seg.Blocks)
	u := &a.outside
	u.segs = append(slices.Clip(u.segs), seg)
	st := segmentStats(&seg, a.cfg.MaxSplitSize)
	addCurrent(&u.all, &st)
	if !u.window {
		addCurrent(&u.fromStart, &st)
	}
	a.dev.obtained += seg.TotalSize
	u.cached += SegmentCached(&seg)
}

// SegmentCached is the memory of a snapshot segment that empty_cache()
// would return, as CachedBytes counts it in a simulated state: all of a
// cudaMalloc'd segment without an active block; in an expandable segment
// (a mapped range, which starts on a page of its reservation) the whole
// pages inside its free blocks (2 MiB pages in the small pool, 20 MiB in
// the large one).
func SegmentCached(seg *snapshot.Segment) int64 {
	if !seg.Expandable {
		for _, b := range seg.Blocks {
			if b.State.Active() {
				return 0
			}
		}
		return seg.TotalSize
	}
	page := int64(LargeBuffer)
	if seg.Pool == snapshot.SmallPool {
		page = SmallBuffer
	}
	if len(seg.Blocks) == 0 {
		return seg.TotalSize / page * page
	}
	var n int64
	for _, b := range seg.Blocks {
		if b.State.Active() {
			continue
		}
		off := int64(b.Address - seg.Address)
		first := (off + page - 1) / page
		end := (off + b.Size) / page
		n += max(end-first, 0) * page
	}
	return n
}

// CachedBytes is the reserved memory that holds no active block and that
// empty_cache() would hand back to the device: every free block that is a
// whole cudaMalloc'd segment, and the whole pages of free blocks in
// expandable segments (unmap_block), in every pool; plus the segments
// kept outside the simulation that hold no active block.
func (a *Allocator) CachedBytes() int64 {
	n := a.small.cached + a.large.cached + a.outside.cached
	for _, pp := range a.pools {
		n += pp.small.cached + pp.large.cached
	}
	return n
}

// MarkWindowStart notes that the segments kept from now on appeared after
// the start of the window (a replay's reconciliation): they count in the
// current figures, and in a peak only where the current figure exceeds it.
func (a *Allocator) MarkWindowStart() { a.outside.window = true }

// Unmodelled returns the segments kept outside the simulation (shared; do
// not modify).
func (a *Allocator) Unmodelled() []snapshot.Segment { return a.outside.segs }

// UnmodelledBytes is the memory of the segments kept outside the
// simulation.
func (a *Allocator) UnmodelledBytes() int64 {
	return a.outside.all.ReservedBytes[PoolAll].Current
}

// withUnmodelled returns s with the kept segments' figures added: their
// current values to the current values, those present since the start to
// the peaks, and every peak at least its current value.
func (u *unmodelled) withUnmodelled(s Stats) Stats {
	if len(u.segs) == 0 {
		return s
	}
	arrays, all, start := s.arrays(), u.all.arrays(), u.fromStart.arrays()
	for i := range arrays {
		for p := range arrays[i] {
			addKept(&arrays[i][p], &all[i][p], &start[i][p])
		}
	}
	addKept(&s.OversizeAllocations, &u.all.OversizeAllocations, &u.fromStart.OversizeAllocations)
	addKept(&s.OversizeSegments, &u.all.OversizeSegments, &u.fromStart.OversizeSegments)
	return s
}

// addKept adds a kept segments' figure (all: every kept segment; start: those
// kept since the start, which count in the peak before they were kept).
func addKept(dst *Stat, all, start *Stat) {
	dst.Current += all.Current
	dst.Peak = max(dst.Peak+start.Current, dst.Current)
}

func addCurrent(dst, src *Stats) {
	d, s := dst.arrays(), src.arrays()
	for i := range d {
		for p := range d[i] {
			d[i][p].Current += s[i][p].Current
		}
	}
	dst.OversizeAllocations.Current += src.OversizeAllocations.Current
	dst.OversizeSegments.Current += src.OversizeSegments.Current
}

// segmentStats counts a snapshot segment's current figures as PyTorch
// counts its own: reserved is the segment's size; the segment count
// leaves expandable segments out; allocation and allocated_bytes count
// active_allocated blocks, active also the pending ones, requested their
// requested sizes; an inactive_split block is a free block of a
// cudaMalloc'd segment that also holds other blocks.
func segmentStats(seg *snapshot.Segment, maxSplit uint64) Stats {
	var st Stats
	pi := PoolLarge
	if seg.Pool == snapshot.SmallPool {
		pi = PoolSmall
	}
	st.ReservedBytes.increase(pi, seg.TotalSize)
	if !seg.Expandable {
		st.Segment.increase(pi, 1)
		if uint64(seg.TotalSize) >= maxSplit {
			st.OversizeSegments.increase(1)
		}
	}
	split := len(seg.Blocks) > 1
	for _, b := range seg.Blocks {
		switch b.State {
		case snapshot.ActiveAllocated:
			st.Allocation.increase(pi, 1)
			st.AllocatedBytes.increase(pi, b.Size)
			if uint64(b.Size) >= maxSplit {
				st.OversizeAllocations.increase(1)
			}
			fallthrough
		case snapshot.ActivePendingFree:
			st.Active.increase(pi, 1)
			st.ActiveBytes.increase(pi, b.Size)
			st.RequestedBytes.increase(pi, b.RequestedSize)
		default:
			if split && !seg.Expandable {
				st.InactiveSplit.increase(pi, 1)
				st.InactiveSplitBytes.increase(pi, b.Size)
			}
		}
	}
	return st
}

// SegmentsCurrent counts the current figures of a device's segments
// without a simulator: what a replay with no trace reads after seeding
// them (SeedSegment, or AddUnmodelled for one the simulation cannot
// hold), in one pass over the segments and their blocks. Only the
// current values are set. A cudaMalloc'd segment whose blocks tile it
// is seeded block by block, and the simulator merges neighbouring free
// blocks there: each run of free blocks beside an active one is one
// inactive_split block. Other segments count as segmentStats does.
func SegmentsCurrent(segs []*snapshot.Segment, maxSplit uint64) Stats {
	var st Stats
	for _, seg := range segs {
		s := segmentStats(seg, maxSplit)
		if !seg.Expandable && len(seg.Blocks) > 1 && validateSeedBlocks(seg) == nil {
			s.InactiveSplit, s.InactiveSplitBytes = mergedInactiveSplit(seg)
		}
		addCurrent(&st, &s)
	}
	return st
}

// mergedInactiveSplit counts the inactive_split figures of a tiled
// cudaMalloc'd segment as the simulator lays it out: the free gaps
// between its active blocks, each one block.
func mergedInactiveSplit(seg *snapshot.Segment) (n, bytes StatArray) {
	pi := PoolLarge
	if seg.Pool == snapshot.SmallPool {
		pi = PoolSmall
	}
	active := false
	var gaps, gapBytes int64
	inGap := false
	for _, b := range seg.Blocks {
		if b.State.Active() {
			active, inGap = true, false
			continue
		}
		if !inGap {
			gaps++
			inGap = true
		}
		gapBytes += b.Size
	}
	if active && gaps > 0 {
		n.increase(pi, gaps)
		bytes.increase(pi, gapBytes)
	}
	return n, bytes
}
