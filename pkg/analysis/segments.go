package analysis

import (
	"fmt"
	"slices"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// SegmentInfo is one segment of a state with its blocks summed by state.
type SegmentInfo struct {
	Address    uint64           `json:"address"`
	Size       int64            `json:"size"`
	Pool       string           `json:"pool"`
	PoolID     snapshot.PoolID  `json:"pool_id"`
	Stream     int64            `json:"stream"`
	Expandable bool             `json:"expandable"`
	Blocks     []snapshot.Block `json:"-"`
	// Allocated, Pending and Free sum the blocks by state.
	Allocated int64 `json:"allocated_bytes"`
	Pending   int64 `json:"pending_free_bytes"`
	Free      int64 `json:"free_bytes"`
	// Rounding is size - requested of the active blocks (internal
	// fragmentation); LargestFree the largest free block (what the
	// segment can hand out at once).
	Rounding    int64 `json:"rounding_bytes"`
	LargestFree int64 `json:"largest_free_block"`
	// Cached is what of the segment empty_cache() would return: all of
	// it when no block is active, the whole pages of free blocks of an
	// expandable segment (allocator.SegmentCached). The rest of its free
	// and pending memory is stranded.
	Cached int64 `json:"cached_bytes"`
	// Live counts the active blocks.
	Live int `json:"live_blocks"`
	// Site is where the segment was cudaMalloc'd (NoStackFrame when the
	// snapshot does not say: split segments keep no frames).
	Site snapshot.Frame `json:"-"`
}

// Fragmentation is the share of the segment no tensor uses: free blocks
// (external) and rounding of live ones (internal).
func (s *SegmentInfo) Fragmentation() float64 {
	if s.Size == 0 {
		return 0
	}
	return float64(s.Free+s.Rounding) / float64(s.Size)
}

// SegmentSort orders a segment list.
type SegmentSort string

// Orders of `memstat segments --sort`.
const (
	SortBySize          SegmentSort = "size"
	SortByAddress       SegmentSort = "address"
	SortByFree          SegmentSort = "free"
	SortByFragmentation SegmentSort = "fragmentation"
)

// ParseSegmentSort reads a --sort value.
func ParseSegmentSort(s string) (SegmentSort, error) {
	switch o := SegmentSort(s); o {
	case SortBySize, SortByAddress, SortByFree, SortByFragmentation:
		return o, nil
	}
	return "", fmt.Errorf("invalid sort %q: choose one of size, address, free, fragmentation", s)
}

// SegmentFilter selects segments; zero values select everything.
type SegmentFilter struct {
	Pool    string // "small", "large" or ""
	MinSize int64
	Stream  *int64
	// PoolID selects one private pool ((0, 0): the default pools).
	PoolID *snapshot.PoolID
}

// SegmentMap is the segments of one device at one moment.
type SegmentMap struct {
	Device int    `json:"device"`
	Moment Moment `json:"moment"`
	// Final is true for the snapshot's own final state.
	Final    bool          `json:"final"`
	Segments []SegmentInfo `json:"segments"`
	// Total sums every listed segment (Address 0); Omitted counts the
	// segments the filter dropped.
	Total   SegmentInfo `json:"total"`
	Omitted int         `json:"omitted"`
}

// MapSegments summarizes a state's segments, filtered and sorted.
func MapSegments(st *State, fr *Frames, f SegmentFilter, order SegmentSort) []SegmentInfo {
	out := make([]SegmentInfo, 0, len(st.Segments))
	for _, seg := range st.Segments {
		if f.Pool != "" && seg.Pool.String() != f.Pool || seg.TotalSize < f.MinSize || f.Stream != nil && seg.Stream != *f.Stream ||
			f.PoolID != nil && seg.PoolID != *f.PoolID {
			continue
		}
		si := SegmentInfo{
			Address: seg.Address, Size: seg.TotalSize, Pool: seg.Pool.String(), PoolID: seg.PoolID,
			Stream: seg.Stream, Expandable: seg.Expandable, Blocks: seg.Blocks, Site: fr.Site(seg.Stack),
		}
		for _, b := range seg.Blocks {
			switch b.State {
			case snapshot.ActiveAllocated:
				si.Allocated += b.Size
			case snapshot.ActivePendingFree:
				si.Pending += b.Size
			default:
				si.Free += b.Size
				si.LargestFree = max(si.LargestFree, b.Size)
				continue
			}
			si.Live++
			si.Rounding += b.Size - b.RequestedSize
		}
		si.Cached = allocator.SegmentCached(&seg)
		out = append(out, si)
	}
	if len(out) == 0 {
		out = nil // as before the pre-sizing: --json prints null, not []
	}
	cmpInt := func(x, y int64) int {
		switch {
		case x > y:
			return -1
		case x < y:
			return 1
		}
		return 0
	}
	slices.SortStableFunc(out, func(x, y SegmentInfo) int {
		var c int
		switch order {
		case SortByAddress:
			c = 0
		case SortByFree:
			c = cmpInt(x.Free, y.Free)
		case SortByFragmentation:
			switch fx, fy := x.Fragmentation(), y.Fragmentation(); {
			case fx > fy:
				c = -1
			case fx < fy:
				c = 1
			}
			if c == 0 {
				c = cmpInt(x.Free+x.Rounding, y.Free+y.Rounding)
			}
		default:
			c = cmpInt(x.Size, y.Size)
		}
		if c != 0 {
			return c
		}
		switch {
		case x.Address < y.Address:
			return -1
		case x.Address > y.Address:
			return 1
		}
		return 0
	})
	return out
}

// SumSegments adds segments up (Address 0, LargestFree the largest of
// all).
func SumSegments(segs []SegmentInfo) SegmentInfo {
	var t SegmentInfo
	for _, s := range segs {
		t.Size += s.Size
		t.Allocated += s.Allocated
		t.Pending += s.Pending
		t.Free += s.Free
		t.Rounding += s.Rounding
		t.Cached += s.Cached
		t.Live += s.Live
		t.LargestFree = max(t.LargestFree, s.LargestFree)
	}
	return t
}

// Moments Segments can be asked for besides a trace entry index (-1 is
// before the first entry).
const (
	AtFinal = -2 // the snapshot's own final state
	AtPeak  = -3 // the peak of reserved memory
)

// Segments builds the segment map of a device at a moment: AtFinal,
// AtPeak, or after a trace entry.
func Segments(rp *Replayed, fr *Frames, at int, f SegmentFilter, order SegmentSort) (*SegmentMap, error) {
	m := &SegmentMap{Device: rp.Device}
	n := rp.Trace().Len()
	if at == AtPeak {
		at = AtFinal
		if n > 0 {
			at = rp.Result.PeakReserved.Index
		}
	}
	var st *State
	switch {
	case at >= n || at < AtFinal:
		return nil, fmt.Errorf("device %d: no trace entry %d (the trace has %d)", rp.Device, at, n)
	case at == AtFinal:
		st = rp.FinalState()
		m.Final = true
		m.Moment = rp.MomentAt(st.Index)
	default:
		sts, err := rp.States(at)
		if err != nil {
			return nil, err
		}
		st = sts[0]
		m.Moment = rp.MomentAt(at)
	}
	all := MapSegments(st, fr, SegmentFilter{}, order)
	sum := SumSegments(all)
	m.Moment.Allocated, m.Moment.Reserved = sum.Allocated, sum.Size
	m.Segments = all
	if f != (SegmentFilter{}) {
		// Only a filter makes the shown segments differ from all of
		// them: without one, the map is not built twice.
		m.Segments = MapSegments(st, fr, f, order)
	}
	m.Omitted = len(all) - len(m.Segments)
	m.Total = SumSegments(m.Segments)
	return m, nil
}
