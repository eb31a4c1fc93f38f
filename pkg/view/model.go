// Package view is the level-of-detail model behind `memstat view` and the
// report's interactive timeline: the allocation intervals of one device's
// trace (when each block was allocated and freed, from a follow-mode
// replay), and, for a window of trace entries and a width in pixels, what
// the screen can show: per pixel column the allocated (min, max) and
// reserved memory, and the allocations (or groups of them) large enough to
// be seen as bands, the rest summed into one.
//
// The model keeps compact arrays, a few bytes per trace entry and per
// allocation, and no object per event, so that traces of millions of
// events stay within the memory of the snapshot itself; each window is
// computed from those arrays when it is asked for.
package view

import (
	"cmp"
	"fmt"
	"slices"
	"sort"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/series"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Live is the end of an interval still allocated when the trace ends.
const Live = int32(-1)

// PoolKey is the pool of an allocation: the kind of block pool and the
// private pool's id (zero for the default pools).
type PoolKey struct {
	Kind snapshot.Pool
	ID   snapshot.PoolID
}

// String names the pool as reports do ("large", "small", "large, private
// pool (1, 2)").
func (p PoolKey) String() string {
	if p.ID.IsDefault() {
		return p.Kind.String()
	}
	return fmt.Sprintf("%s, private pool (%d, %d)", p.Kind, p.ID[0], p.ID[1])
}

// Model is one device's trace as allocation intervals.
type Model struct {
	Replayed *analysis.Replayed
	Frames   *analysis.Frames

	// Interval k is allocated after entry Start[k] (-1: before the trace
	// began) up to, not including, entry End[k] (Live: to the end); Size
	// is the block's size (what allocated_bytes counts). An interval that
	// starts during the trace is the alloc entry Entry[k] (its address,
	// request, stack and stream); Start is earlier than Entry when the
	// segment events of the same allocator call lead it (they see the
	// state after it). One allocated before the trace is Before[-Entry-1].
	Start, End, Entry []int32
	Size              []int64
	Pool              []uint16
	Before            []BeforeBlock
	Pools             []PoolKey
	// PrivateReserved is the memory private pools (CUDA graphs,
	// torch.cuda.MemPool) reserved after each entry; nil when they never
	// reserved any.
	PrivateReserved []int64

	// alloc and resv are allocated and reserved memory after each entry
	// (the replay's Allocated and Reserved, compact; see Trim): resv as
	// its changes, which only segment events make.
	alloc series.Bytes
	resv  series.Steps
	// trace is the device's trace once Compact has let go of the
	// snapshot (nil before: the Replayed's is read). It is the
	// snapshot's own compact trace, shared, not a second encoding.
	trace *snapshot.Trace

	groups map[analysis.GroupBy]*grouping
	// beforeIdx maps addresses to Before's intervals only if Before is
	// not in address order (beforeAt).
	beforeIdx     map[uint64]int
	beforeChecked bool
}

// BeforeBlock is what the model keeps of a block allocated before the
// trace began (a fraction of allocator.BlockInfo: its size and pool are the
// interval's).
type BeforeBlock struct {
	Address   uint64
	Requested int64
	Stream    int64
	Stack     snapshot.StackID
}

// Len is the number of intervals.
func (m *Model) Len() int { return len(m.Start) }

// Build replays one device in follow mode and collects its intervals.
func Build(s *snapshot.Snapshot, device int, fr *analysis.Frames) (*Model, error) {
	return BuildObserved(s, device, fr, analysis.Want{}, nil)
}

// BuildObserved is Build with another observer of the same replay (called
// after every entry, as replay.Options.OnEvent is), for callers
// that sample it too (the report's timeline), capturing the states want
// names during that replay (analysis.ReplayFor): the report's peak and
// ooms without a second replay up to them.
func BuildObserved(s *snapshot.Snapshot, device int, fr *analysis.Frames, want analysis.Want, also func(i int, e snapshot.TraceEntry, a *allocator.Allocator)) (*Model, error) {
	trace := s.Trace(device)
	if trace.Len() == 0 {
		return nil, fmt.Errorf("device %d has no trace: there is no history to show", device)
	}
	if trace.Len() >= 1<<31-1 {
		return nil, fmt.Errorf("device %d: %d trace entries are more than the view handles", device, trace.Len())
	}
	m := &Model{Frames: fr, groups: map[analysis.GroupBy]*grouping{}}
	// Without the Replayed's figures (want.NoFigures), the model takes its
	// own as the replay goes; the compact ones (want.CompactFigures) it
	// shares once the replay is done, the arrays (neither) it compacts.
	ownFigures := want.NoFigures
	pools := map[PoolKey]uint16{}
	poolOf := func(b allocator.BlockInfo) uint16 {
		k := PoolKey{Kind: b.Pool, ID: b.PoolID}
		p, ok := pools[k]
		if !ok {
			p = uint16(len(m.Pools))
			pools[k] = p
			m.Pools = append(m.Pools, k)
		}
		return p
	}
	var open openTable
	add := func(start, entry int32, b allocator.BlockInfo) {
		k := int32(len(m.Start))
		if len(m.Start) == cap(m.Start) {
			m.growIntervals()
		}
		m.Start = append(m.Start, start)
		m.End = append(m.End, Live)
		m.Entry = append(m.Entry, entry)
		m.Size = append(m.Size, b.Size)
		m.Pool = append(m.Pool, poolOf(b))
		open.put(b.Address, k)
	}
	start := func(a *allocator.Allocator) {
		// The arrays are sized for the blocks live before the trace and a
		// quarter of its alloc entries, then doubled as needed (growIntervals):
		// Go's append grows a large slice by a quarter at a time, whose
		// copies cost more than the appends, but doubling copies each
		// interval about once. Not sized for every alloc entry: those
		// the replay cannot apply make no interval (a generated trace's
		// addresses outside its segments: none of torch-100MB's 400,197
		// did), and the unused room, 22 bytes an entry, was live through
		// the whole replay (8.8 MB there). They are made here, once
		// the replay has rebuilt the state before the trace, not before:
		// its scans' address tables (16 MB on a recorded trace of 1.75 M
		// entries) are garbage by then, so the two are never live together.
		n := 0
		a.Blocks(func(b allocator.BlockInfo) bool {
			if b.State == snapshot.ActiveAllocated {
				n++
			}
			return true
		})
		m.Before = make([]BeforeBlock, 0, n) // grown by append: 30% of start's time
		n += trace.Count(snapshot.ActionAlloc)/4 + 1
		m.Start = make([]int32, 0, n)
		m.End = make([]int32, 0, n)
		m.Entry = make([]int32, 0, n)
		m.Size = make([]int64, 0, n)
		m.Pool = make([]uint16, 0, n)
		if ownFigures {
			m.alloc = series.NewBytesCap(trace.Len())
		}
		a.Blocks(func(b allocator.BlockInfo) bool {
			if b.State == snapshot.ActiveAllocated {
				m.Before = append(m.Before, BeforeBlock{Address: b.Address, Requested: b.RequestedSize, Stream: b.Stream, Stack: b.Stack})
				add(-1, -int32(len(m.Before)), b)
			}
			return true
		})
	}
	each := func(i int, e snapshot.TraceEntry, a *allocator.Allocator) {
		if also != nil {
			also(i, e, a)
		}
		if ownFigures {
			m.padFigures(i) // as the Replayed's zeros, were an entry passed over
			al, re := a.AllocatedReserved()
			m.alloc.Add(al.Current)
			m.resv.Add(re.Current)
		}
		if r, _ := a.PrivatePoolStats(); r.Current != 0 || m.PrivateReserved != nil {
			if m.PrivateReserved == nil {
				m.PrivateReserved = make([]int64, i, trace.Len())
			}
			m.PrivateReserved = append(m.PrivateReserved, r.Current)
		}
		switch e.Action {
		case snapshot.ActionAlloc:
			if b, ok := a.AllocatedAt(e.Addr); ok {
				add(int32(i), int32(i), b)
			}
		case snapshot.ActionFreeRequested, snapshot.ActionFree, snapshot.ActionFreeCompleted:
			// allocated_bytes drops when the program frees the block
			// (free_requested), not when its stream events complete.
			if k, ok := open.take(e.Addr); ok {
				m.End[k] = int32(i)
			}
		}
	}
	rp, err := analysis.ReplayObservedFor(s, device, want, start, each)
	if err != nil {
		return nil, err
	}
	m.Replayed = rp
	m.clipIntervals()
	if ownFigures {
		m.padFigures(trace.Len())
		m.resv.Clip()
	} else if al, re, ok := rp.Figures(); ok {
		m.alloc, m.resv = al, re
	} else {
		m.alloc, m.resv = series.NewBytes(rp.Allocated), series.NewSteps(rp.Reserved)
	}
	// The segment events an allocator call records before its alloc (or
	// free) see the state after the call, so the interval starts (or
	// ends) with them. The state before the call differs by the block's
	// size, so the run of equal figures is exactly the call's.
	// Which entries are segment events, a bit each, from one pass: the
	// loop below asks at every allocation's start and end, which jump
	// about the trace (reading the compact trace there would decode a
	// block at every jump).
	segEvent := make([]uint64, (trace.Len()+63)/64)
	for i, e := range trace.All() {
		if isSegmentEvent(e.Action) {
			segEvent[i/64] |= 1 << (i % 64)
		}
	}
	isSeg := func(i int32) bool { return segEvent[i/64]&(1<<(i%64)) != 0 }
	for k, st := range m.Start {
		if st < 0 {
			continue
		}
		for st > 0 && isSeg(st-1) && m.alloc.At(int(st-1)) == m.alloc.At(int(st)) {
			st--
		}
		m.Start[k] = st
		if e := m.End[k]; e > 0 {
			for e > st && isSeg(e-1) && m.alloc.At(int(e-1)) == m.alloc.At(int(e)) {
				e--
			}
			m.End[k] = e
		}
	}
	return m, nil
}

// growIntervals doubles the room of the interval arrays.
func (m *Model) growIntervals() {
	n := max(len(m.Start), 16)
	m.Start, m.End, m.Entry = slices.Grow(m.Start, n), slices.Grow(m.End, n), slices.Grow(m.Entry, n)
	m.Size, m.Pool = slices.Grow(m.Size, n), slices.Grow(m.Pool, n)
}

// clipIntervals copies the interval arrays to their length when much of
// what they were sized for went unused: they are sized for every alloc
// entry, and an alloc the replay could not apply (a trace that is not the
// allocator's, such as a generated one: 86,395 of 486,592 on
// torch-100MB) makes no interval, while the arrays are held as long as
// the model (the report's page, a view server's hours).
func (m *Model) clipIntervals() {
	if n := len(m.Start); cap(m.Start)-n <= n/4 {
		return
	}
	m.Start, m.End, m.Entry = slices.Clone(m.Start), slices.Clone(m.End), slices.Clone(m.Entry)
	m.Size, m.Pool = slices.Clone(m.Size), slices.Clone(m.Pool)
}

// Trim lets go of the replay's own per-entry figures (Replayed.Allocated
// and Reserved, 16 bytes an entry), which the model keeps in its compact
// form: for a server that holds the model for hours. After Trim, use the
// model's MomentAt, not the Replayed's, and no analysis that reads the
// figures (FindPeak); StateCursor is fine.
func (m *Model) Trim() {
	m.Replayed.Allocated, m.Replayed.Reserved = nil, nil
}

// Compact lets go of the trace the model was built from, for a server
// that holds the model for hours: the model reads t (the snapshot's own
// compact trace of the device, shared) and its Replayed refers to bare,
// the snapshot without its traces, so that the other devices' traces can
// be collected. It trims the figures too (Trim). After
// Compact, use the model's MomentAt and NewStateCursor, not the
// Replayed's.
func (m *Model) Compact(t *snapshot.Trace, bare *snapshot.Snapshot) error {
	if t.Len() != m.Entries() {
		return fmt.Errorf("the compact trace has %d entries, the model %d", t.Len(), m.Entries())
	}
	m.Trim()
	m.trace = t
	m.Replayed.Snap = bare
	return nil
}

// Bare is s without its traces (the other fields shared): what a
// compacted model's Replayed refers to.
func Bare(s *snapshot.Snapshot) *snapshot.Snapshot {
	b := *s
	b.Traces = make([]*snapshot.Trace, len(s.Traces))
	return &b
}

// WithTrace is bare with one device's trace back (shared, not copied):
// what a build or a replay of that device reads.
func WithTrace(bare *snapshot.Snapshot, device int, t *snapshot.Trace) *snapshot.Snapshot {
	s := *bare
	s.Traces = make([]*snapshot.Trace, max(len(bare.Traces), device+1))
	s.Traces[device] = t
	return &s
}

// NewStateCursor returns a cursor over the device's allocator states
// (analysis.StateCursor). It replays straight from the compact trace:
// nothing of it is decoded ahead.
func (m *Model) NewStateCursor() *analysis.StateCursor {
	if m.trace == nil {
		return m.Replayed.NewStateCursor()
	}
	rp := *m.Replayed
	rp.Snap = WithTrace(rp.Snap, rp.Device, m.trace)
	return rp.NewStateCursor()
}

// reader reads the device's trace, compact or not.
func (m *Model) reader() *snapshot.Reader {
	if m.trace != nil {
		return m.trace.Reader()
	}
	return m.Replayed.Trace().Reader()
}

// compactTrace is the device's trace, compact (the model's own after
// Compact, the Replayed's before): for an entry here and there, read
// without a Reader's block buffer.
func (m *Model) compactTrace() *snapshot.Trace {
	if m.trace != nil {
		return m.trace
	}
	return m.Replayed.Trace()
}

// firstTimeUS is the first entry's time_us.
func (m *Model) firstTimeUS() int64 {
	if m.trace != nil {
		return m.trace.First().TimeUS
	}
	return m.Replayed.FirstTimeUS()
}

// MomentAt describes the moment after entry i (-1: before the first), as
// Replayed.MomentAt does, also after Trim and Compact.
func (m *Model) MomentAt(i int) analysis.Moment {
	rp := m.Replayed
	mo := analysis.Moment{Index: i, Allocated: rp.StartAllocated, Reserved: rp.StartReserved}
	if i >= 0 && i < m.Entries() {
		mo.Allocated, mo.Reserved = m.alloc.At(i), m.resv.At(i)
		mo.TimeUS = m.compactTrace().At(i).TimeUS
		if first := m.firstTimeUS(); mo.TimeUS != 0 && first != 0 {
			mo.Seconds = float64(mo.TimeUS-first) / 1e6
		}
		mo.Phase = rp.Phases.At(mo.TimeUS)
	}
	return mo
}

// AllocatedAfter and ReservedAfter are allocated and reserved memory
// after entry i.
func (m *Model) AllocatedAfter(i int) int64 { return m.alloc.At(i) }

// ReservedAfter: see AllocatedAfter.
func (m *Model) ReservedAfter(i int) int64 { return m.resv.At(i) }

// padFigures extends the figures with zeros up to n entries.
func (m *Model) padFigures(n int) {
	for m.alloc.Len() < n {
		m.alloc.Add(0)
		m.resv.Add(0)
	}
}

func isSegmentEvent(a snapshot.Action) bool {
	switch a {
	case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentMap, snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
		return true
	}
	return false
}

// Entries is the length of the trace.
func (m *Model) Entries() int { return m.alloc.Len() }

// LiveAt reports whether interval k is allocated after entry i.
func (m *Model) LiveAt(k int, i int) bool {
	return int(m.Start[k]) <= i && (m.End[k] == Live || i < int(m.End[k]))
}

// IntervalOf returns the interval an alloc entry started (false when the
// entry is no allocation the replay applied).
func (m *Model) IntervalOf(entry int) (int, bool) {
	// Entry is increasing after the intervals of blocks allocated before
	// the trace (no map: a trace of millions of allocations would pay
	// tens of bytes each).
	lo := len(m.Before)
	k := lo + sort.Search(len(m.Entry)-lo, func(i int) bool { return int(m.Entry[lo+i]) >= entry })
	if k < len(m.Entry) && int(m.Entry[k]) == entry {
		return k, true
	}
	return 0, false
}

// Allocation describes one interval for people: hover and click details.
type Allocation struct {
	ID        int    `json:"id"`
	Address   uint64 `json:"address"`
	Size      int64  `json:"size"`
	Requested int64  `json:"requested_size"`
	Stream    int64  `json:"stream"`
	Pool      string `json:"pool"`
	// AllocIndex is the alloc entry (-1: before the trace); FreeIndex the
	// entry that freed it (-1: still allocated at the end).
	AllocIndex int `json:"alloc_index"`
	FreeIndex  int `json:"free_index"`
	// AllocSeconds and FreeSeconds are times since the first entry (when
	// the trace records time_us).
	AllocSeconds *float64 `json:"alloc_seconds,omitempty"`
	FreeSeconds  *float64 `json:"free_seconds,omitempty"`
	// Annotation is the innermost annotated range open when it was
	// allocated.
	Annotation string `json:"annotation,omitempty"`
	// Site is the allocation site (the user's own frame first), Stack
	// the shown frames, innermost first, Hidden how many were hidden.
	Site  string   `json:"site"`
	Stack []string `json:"stack"`
	// User marks the frames of Stack that are the user's own code (the
	// classification of analysis.ClassifyFrame, as peak uses it).
	User   []bool `json:"user"`
	Hidden int    `json:"hidden_frames"`
}

// Describe returns the details of interval k.
func (m *Model) Describe(k int) Allocation {
	rp := m.Replayed
	trace := m.compactTrace()
	a := Allocation{ID: k, Size: m.Size[k], Pool: m.Pools[m.Pool[k]].String(), AllocIndex: -1, FreeIndex: int(m.End[k])}
	var stack snapshot.StackID
	first := m.firstTimeUS()
	secs := func(us int64) *float64 {
		if us == 0 || first == 0 {
			return nil
		}
		v := float64(us-first) / 1e6
		return &v
	}
	if e := m.Entry[k]; e >= 0 {
		te := trace.At(int(e))
		a.Address, a.Requested, a.Stream, stack = te.Addr, te.Size, rp.Snap.Stream(&te), te.Stack
		a.AllocIndex = int(e)
		a.AllocSeconds = secs(te.TimeUS)
		a.Annotation = rp.Phases.At(te.TimeUS)
	} else {
		b := m.Before[-e-1]
		a.Address, a.Requested, a.Stream, stack = b.Address, b.Requested, b.Stream, b.Stack
	}
	if a.FreeIndex >= 0 {
		a.FreeSeconds = secs(trace.At(a.FreeIndex).TimeUS)
	}
	site := m.Frames.Site(stack)
	a.Site = analysis.FrameString(site)
	shown, hidden := m.Frames.Shown(stack)
	for _, f := range shown {
		a.Stack = append(a.Stack, analysis.FrameString(f))
		a.User = append(a.User, analysis.ClassifyFrame(f) == analysis.UserFrame)
	}
	a.Hidden = hidden
	return a
}

// AllocatedAt sums the intervals live after entry i: the test of the
// model against the replay's allocated_bytes (O(intervals)).
func (m *Model) AllocatedAt(i int) int64 {
	var sum int64
	for k := range m.Start {
		if m.LiveAt(k, i) {
			sum += m.Size[k]
		}
	}
	return sum
}

// Largest returns the n largest intervals live after entry i, largest
// first (ties: earliest allocated first).
func (m *Model) Largest(i, n int) []int {
	var out []int
	for k := range m.Start {
		if m.LiveAt(k, i) {
			out = append(out, k)
		}
	}
	slices.SortStableFunc(out, func(x, y int) int { return cmp.Compare(m.Size[y], m.Size[x]) })
	return out[:min(n, len(out))]
}
