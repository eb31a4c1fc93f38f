package view

import (
	"cmp"
	"slices"

	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/snapshot"
	"github.com/memstat/memstat/pkg/timeline"
)

// Phase is an annotated range on the entry axis: entries From..To, and
// Lane, the row it is drawn in (0 outermost) so that nested and
// overlapping ranges never share a row.
type Phase struct {
	Name string `json:"name"`
	From int    `json:"from"`
	To   int    `json:"to"`
	Lane int    `json:"lane"`
}

// Phases places the device's annotated ranges on the entry axis: a range
// covers the entries recorded between its start and its end. Lanes are
// timeline.Lanes' (the plot's), one entry apart.
func (m *Model) Phases() []Phase {
	rp := m.Replayed
	trace, n := m.reader(), m.Entries()
	if n == 0 || m.firstTimeUS() == 0 || len(rp.Phases) == 0 {
		return nil
	}
	// The first entry at or after a time; entries of different threads
	// may be a little out of order, so search a running maximum. The
	// times asked for are sorted and the trace swept once, rather than a
	// running maximum kept per entry (8 bytes each, millions of them).
	type query struct {
		us  int64
		out *int
	}
	from := make([]int, len(rp.Phases))
	to := make([]int, len(rp.Phases))
	var qs []query
	for k, p := range rp.Phases {
		to[k] = n - 1
		if p.StartUS != 0 {
			qs = append(qs, query{p.StartUS, &from[k]})
		}
		if p.EndUS != 0 {
			qs = append(qs, query{p.EndUS + 1, &to[k]})
		}
	}
	slices.SortFunc(qs, func(a, b query) int { return cmp.Compare(a.us, b.us) })
	i := 0
	hi := trace.At(0).TimeUS
	for _, q := range qs {
		for i < n && hi < q.us {
			i++
			if i < n {
				hi = max(hi, trace.At(i).TimeUS)
			}
		}
		*q.out = i
	}
	var out []Phase
	var boxes []timeline.Box
	for k, p := range rp.Phases {
		f, t := from[k], to[k]
		if p.EndUS != 0 {
			t-- // the last entry before the first one after the end
		}
		if t < f {
			continue // no entry inside
		}
		out = append(out, Phase{Name: p.Name, From: f, To: t})
		boxes = append(boxes, timeline.Box{Start: float64(f), End: float64(t)})
	}
	lanes, _ := timeline.Lanes(boxes, 1)
	for k := range out {
		out[k].Lane = lanes[k]
	}
	return out
}

// Marks are the moments worth pointing at.
type Marks struct {
	PeakAllocated analysis.Moment `json:"peak_allocated"`
	PeakReserved  analysis.Moment `json:"peak_reserved"`
	// PeakAllocation is the largest allocation live at the peak of
	// allocated memory (-1 when none).
	PeakAllocation int   `json:"peak_allocation"`
	OOMs           []OOM `json:"ooms"`
}

// OOM is one recorded out-of-memory error.
type OOM struct {
	Moment     analysis.Moment `json:"moment"`
	Requested  int64           `json:"requested_bytes"`
	DeviceFree int64           `json:"device_free_bytes"`
}

// Marks returns the peaks and OOMs of the device.
func (m *Model) Marks() Marks {
	rp := m.Replayed
	res := rp.Result
	mk := Marks{
		PeakAllocated:  m.MomentAt(res.PeakAllocated.Index),
		PeakReserved:   m.MomentAt(res.PeakReserved.Index),
		PeakAllocation: -1,
		OOMs:           []OOM{},
	}
	// The largest live at the peak (ties: the earliest allocated), as
	// Largest(peak, 1) without listing every live interval.
	for k := range m.Start {
		if m.LiveAt(k, res.PeakAllocated.Index) && (mk.PeakAllocation < 0 || m.Size[k] > m.Size[mk.PeakAllocation]) {
			mk.PeakAllocation = k
		}
	}
	trace := m.reader()
	for i := range m.Entries() {
		if e := trace.At(i); e.Action == snapshot.ActionOOM {
			mk.OOMs = append(mk.OOMs, OOM{Moment: m.MomentAt(i), Requested: e.Size, DeviceFree: e.DeviceFree()})
		}
	}
	return mk
}

// Event is one trace entry for the event list.
type Event struct {
	Index   int     `json:"index"`
	Action  string  `json:"action"`
	Address uint64  `json:"address"`
	Size    int64   `json:"size"`
	Stream  int64   `json:"stream"`
	Seconds float64 `json:"seconds"`
	// Site is the entry's allocation site (the user's frame first).
	Site string `json:"site,omitempty"`
	// Allocation is the interval an alloc entry started (-1: none).
	Allocation int   `json:"allocation"`
	Allocated  int64 `json:"allocated_bytes"`
	Reserved   int64 `json:"reserved_bytes"`
}

// Events lists up to n entries from entry from.
func (m *Model) Events(from, n int) []Event {
	rp := m.Replayed
	trace := m.reader()
	from = max(from, 0)
	to := min(from+max(n, 0), m.Entries())
	out := make([]Event, 0, max(to-from, 0))
	first := m.firstTimeUS()
	for i := from; i < to; i++ {
		e := trace.At(i)
		ev := Event{Index: i, Action: e.Action.String(), Address: e.Addr, Size: e.Size, Stream: rp.Snap.Stream(&e),
			Allocation: -1, Allocated: m.alloc.At(i), Reserved: m.resv.At(i)}
		if e.TimeUS != 0 && first != 0 {
			ev.Seconds = float64(e.TimeUS-first) / 1e6
		}
		if e.Stack != snapshot.NoStack {
			ev.Site = analysis.FrameString(m.Frames.Site(e.Stack))
		}
		if k, ok := m.IntervalOf(i); ok {
			ev.Allocation = k
		}
		out = append(out, ev)
	}
	return out
}

// StateBlock is one block of a segment at a moment.
type StateBlock struct {
	Address   uint64 `json:"address"`
	Size      int64  `json:"size"`
	Requested int64  `json:"requested_size"`
	State     string `json:"state"`
	// Allocation is the interval of an allocated or pending block (-1:
	// none known).
	Allocation int `json:"allocation"`
}

// StateSegment is one segment at a moment, its blocks in address order.
type StateSegment struct {
	analysis.SegmentInfo
	Blocks []StateBlock `json:"blocks"`
}

// State is the allocator state after one entry, as `segments --at N`
// computes it (segments in address order).
type State struct {
	Moment   analysis.Moment      `json:"moment"`
	Total    analysis.SegmentInfo `json:"total"`
	Segments []StateSegment       `json:"segments"`
}

// StateOf shapes a captured state for the view.
func (m *Model) StateOf(st *analysis.State) *State {
	ss := m.StateStream(st)
	out := &State{Moment: ss.Moment, Total: ss.Total}
	for k := range ss.Len() {
		out.Segments = append(out.Segments, ss.Segment(k))
	}
	return out
}

// StateStream is a state as StateOf shapes it, its segments shaped one
// at a time: a server writes them out as it goes rather than holding
// every block of a large state twice (shaped and encoded).
type StateStream struct {
	Moment analysis.Moment
	Total  analysis.SegmentInfo
	m      *Model
	st     *analysis.State
	infos  []analysis.SegmentInfo
}

// StateStream starts shaping a captured state.
func (m *Model) StateStream(st *analysis.State) *StateStream {
	infos := analysis.MapSegments(st, m.Frames, analysis.SegmentFilter{}, analysis.SortByAddress)
	ss := &StateStream{Moment: m.MomentAt(st.Index), Total: analysis.SumSegments(infos), m: m, st: st, infos: infos}
	ss.Moment.Allocated, ss.Moment.Reserved = ss.Total.Allocated, ss.Total.Size
	return ss
}

// Len is the number of segments.
func (ss *StateStream) Len() int { return len(ss.infos) }

// Info is segment k's figures (in address order) without its blocks
// shaped: what a page draws for a segment it shows no blocks of.
func (ss *StateStream) Info(k int) *analysis.SegmentInfo { return &ss.infos[k] }

// Segment shapes segment k (in address order).
func (ss *StateStream) Segment(k int) StateSegment {
	m, st, si := ss.m, ss.st, ss.infos[k]
	seg := StateSegment{SegmentInfo: si}
	if len(si.Blocks) > 0 {
		seg.Blocks = make([]StateBlock, 0, len(si.Blocks))
	}
	for _, b := range si.Blocks {
		sb := StateBlock{Address: b.Address, Size: b.Size, Requested: b.RequestedSize, State: b.State.String(), Allocation: -1}
		if b.State.Active() {
			if e, ok := st.AllocIndex[b.Address]; ok {
				if k, ok := m.IntervalOf(e); ok {
					sb.Allocation = k
				}
			} else if k, ok := m.beforeAt(b.Address); ok {
				sb.Allocation = k
			}
		}
		seg.Blocks = append(seg.Blocks, sb)
	}
	return seg
}

// beforeAt returns the interval of the block allocated before the trace
// at addr (those intervals come first, in Before's order). Before is in
// address order (allocator.Blocks walks the blocks so), so a binary
// search finds it: no index of a million entries held for the server's
// life. A map is made only were it not in order.
func (m *Model) beforeAt(addr uint64) (int, bool) {
	if !m.beforeChecked {
		m.beforeChecked = true
		for k := 1; k < len(m.Before); k++ {
			if m.Before[k-1].Address >= m.Before[k].Address {
				m.beforeIdx = make(map[uint64]int, len(m.Before))
				for k, b := range m.Before {
					m.beforeIdx[b.Address] = k
				}
				break
			}
		}
	}
	if m.beforeIdx != nil {
		k, ok := m.beforeIdx[addr]
		return k, ok
	}
	return slices.BinarySearchFunc(m.Before, addr, func(b BeforeBlock, a uint64) int { return cmp.Compare(b.Address, a) })
}
