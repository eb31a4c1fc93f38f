package analysis

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"

	"github.com/memstat/memstat/internal/parallel"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/series"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Replayed is one device of a snapshot replayed through the allocator
// model in follow mode (the recorded run, decision for decision): the
// result memstat stats prints, and the allocated and reserved bytes after
// every trace entry. States rebuilds the full allocator state at chosen
// entries with a second replay.
type Replayed struct {
	Snap   *snapshot.Snapshot
	Device int
	Result *replay.Result
	// Config is the allocator configuration the replay simulated (the
	// recorded settings).
	Config allocator.Config
	// Allocated and Reserved are allocated_bytes.all.current and
	// reserved_bytes.all.current after each trace entry; Start* before the
	// first one.
	// With Want.CompactFigures they are nil and the figures are kept in
	// alloc and resv instead; AllocatedAt and ReservedAt read either.
	Allocated, Reserved           []int64
	StartAllocated, StartReserved int64
	alloc                         *series.Bytes
	resv                          *series.Steps
	Phases                        Phases

	// final is the final snapshot's active blocks in address order, each
	// with the last alloc entry at its address: all that fixStacks and
	// FinalState read of the trace's last allocations. A sorted array of
	// 32 bytes a block, not maps of every address the trace touched
	// (report, torch-100MB: 129,110 blocks against 314,592 addresses,
	// 4 MB against about 14 MB held from the replay to the page).
	final []finalBlock
	// firstFree is the stack of the first event at an address when that
	// event is a free: the block was allocated before the trace began,
	// and where it was freed is all the trace says about it.
	firstFree map[uint64]snapshot.StackID
	// prefetched holds the states Prefetch captured, by entry index.
	prefetched map[int]*State
	// runtimeSettings: replayed with replay.Options.RuntimeSettings
	// (Want), as a replay again must be.
	runtimeSettings bool
}

// Replay replays one device of a snapshot.
func Replay(s *snapshot.Snapshot, device int) (*Replayed, error) {
	return ReplayObservedFor(s, device, Want{}, nil, nil)
}

// ReplayFor is Replay that also captures, in the same single replay, the
// states want names, so that the analyses asking for them (FindPeak,
// ExplainOOMs, Segments) do not replay the trace a second time.
func ReplayFor(s *snapshot.Snapshot, device int, want Want) (*Replayed, error) {
	return ReplayObservedFor(s, device, want, nil, nil)
}

// ReplayObserved is Replay with two observers of the same single replay,
// for callers that build more from it (the view's allocation intervals):
// start, if set, sees the allocator once its state before the first entry
// is rebuilt; each, if set, is called after every trace entry as
// replay.Options.OnEvent is.
func ReplayObserved(s *snapshot.Snapshot, device int, start func(a *allocator.Allocator), each func(i int, e snapshot.TraceEntry, a *allocator.Allocator)) (*Replayed, error) {
	return ReplayObservedFor(s, device, Want{}, start, each)
}

// ReplayObservedFor is ReplayObserved capturing the states want names
// (see ReplayFor).
func ReplayObservedFor(s *snapshot.Snapshot, device int, want Want, start func(a *allocator.Allocator), each func(i int, e snapshot.TraceEntry, a *allocator.Allocator)) (*Replayed, error) {
	trace := s.Trace(device)
	rp := &Replayed{
		Snap: s, Device: device,
		Phases:    PhasesOf(s, device),
		firstFree: make(map[uint64]snapshot.StackID),
	}
	switch {
	case want.NoFigures:
	case want.CompactFigures:
		al := series.NewBytesCap(trace.Len())
		rp.alloc, rp.resv = &al, &series.Steps{}
	default:
		rp.Allocated, rp.Reserved = make([]int64, trace.Len()), make([]int64, trace.Len())
	}
	// The capturer's passes over the trace (the peaks' guesses, the oom
	// entries) read only the immutable trace: they run beside replay.New's
	// rebuild of the starting state, on another core.
	capt := make(chan *capturer, 1)
	var captPanic *parallel.PanicError
	go func() {
		var c *capturer
		defer func() {
			captPanic = parallel.Recovered(recover())
			capt <- c
		}()
		c = newCapturer(rp, trace, want)
	}()
	rp.runtimeSettings = want.RuntimeSettings
	r, err := replay.New(s, replay.Options{Device: device, RuntimeSettings: want.RuntimeSettings, Captures: want.Captures, StartScan: want.StartScan, OnEvent: func(i int, e snapshot.TraceEntry, a *allocator.Allocator) {
		switch {
		case rp.Allocated != nil:
			al, re := a.AllocatedReserved()
			rp.Allocated[i], rp.Reserved[i] = al.Current, re.Current
		case rp.alloc != nil:
			rp.padFigures(i)
			al, re := a.AllocatedReserved()
			rp.alloc.Add(al.Current)
			rp.resv.Add(re.Current)
		}
		if each != nil {
			each(i, e, a)
		}
	}})
	c := <-capt
	if err == nil && captPanic != nil {
		err = captPanic
	}
	if err != nil {
		return nil, fmt.Errorf("device %d: %w", device, err)
	}
	// What the analyses need of the whole trace (the alloc entries'
	// history: the last at each address, and each one's predecessor
	// there; the first free at addresses whose first event is a free) is
	// gathered from the trace alone, beside the steps, on the core they
	// leave idle but for the tally (torch-100MB: a pass of 50 ms that ran
	// beside Result, which then slowed by as much, contending for the
	// cores its reconcile uses).
	type scanned struct {
		h     *allocHistory
		panic *parallel.PanicError
	}
	scan := make(chan scanned, 1)
	var stopScan atomic.Bool
	withPrev := c.mayTake()
	go func() {
		var sc scanned
		defer func() {
			sc.panic = parallel.Recovered(recover())
			scan <- sc
		}()
		sc.h = c.scan(withPrev, &stopScan)
	}()
	fail := func(err error) (*Replayed, error) {
		stopScan.Store(true)
		<-scan
		return nil, fmt.Errorf("device %d: %w", device, err)
	}
	if start != nil {
		start(r.Allocator())
	}
	rp.Config = r.Config()
	st := r.Allocator().Stats()
	rp.StartAllocated = st.AllocatedBytes[allocator.PoolAll].Current
	rp.StartReserved = st.ReservedBytes[allocator.PoolAll].Current
	c.step(-1, -1, r.Allocator())
	// The replay is stepped to the end and finished with Result: the
	// trace's tally that Result's bounds read is counted beside the
	// steps, on the core they leave idle, as Run counts it for stats
	// (torch-100MB: some 30 ms of Result off the replay's core).
	r.TallyAhead()
	for r.Pos() < r.Len() {
		lo := r.Pos()
		if err := r.Step(); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			r.WaitTally()
			return fail(err)
		}
		c.step(lo, r.Pos()-1, r.Allocator())
	}
	// The captured states' allocation entries and the final blocks' are
	// read off the history while Result runs: they read the trace, the
	// history and the captured states, which Result does not touch.
	type filled struct {
		final []finalBlock
		panic *parallel.PanicError
	}
	fills := make(chan filled, 1)
	go func() {
		var f filled
		defer func() {
			if p := parallel.Recovered(recover()); p != nil {
				f.panic = p
			}
			fills <- f
		}()
		sc := <-scan
		if sc.panic != nil {
			f.panic = sc.panic
			return
		}
		if withPrev {
			c.fill(sc.h)
		}
		f.final = finalBlocks(s.DeviceSegments(device), sc.h)
	}()
	rp.Result = r.Result()
	if rp.alloc != nil {
		rp.padFigures(trace.Len())
		rp.resv.Clip()
	}
	r = nil
	f := <-fills
	if f.panic != nil {
		return nil, fmt.Errorf("device %d: %w", device, f.panic)
	}
	rp.final = f.final
	c.finish()
	return rp, nil
}

// finalBlock is an active block of the final snapshot and the last alloc
// entry at its address (-1: the trace allocated none there).
type finalBlock struct {
	addr  uint64
	size  int64
	stack snapshot.StackID
	last  int
}

// finalBlocks lists the active blocks of segs in address order, with the
// last alloc entry at each address (h). Of blocks at one address
// (segments that overlap, in a malformed snapshot) the last listed is
// kept, as a map by address would keep it.
func finalBlocks(segs []*snapshot.Segment, h *allocHistory) []finalBlock {
	n := 0
	for _, seg := range segs {
		for bi := range seg.Blocks {
			if seg.Blocks[bi].State.Active() {
				n++
			}
		}
	}
	out := make([]finalBlock, 0, n)
	for _, seg := range segs {
		for bi := range seg.Blocks {
			if b := &seg.Blocks[bi]; b.State.Active() {
				last, ok := h.lastAlloc(b.Address)
				if !ok {
					last = -1
				}
				out = append(out, finalBlock{addr: b.Address, size: b.Size, stack: b.Stack, last: last})
			}
		}
	}
	// Stable, then the last of each run of one address kept.
	slices.SortStableFunc(out, func(x, y finalBlock) int { return cmp.Compare(x.addr, y.addr) })
	w := 0
	for i := range out {
		if i+1 < len(out) && out[i+1].addr == out[i].addr {
			continue
		}
		out[w] = out[i]
		w++
	}
	return slices.Clip(out[:w])
}

// finalAt is the final snapshot's active block at addr.
func (rp *Replayed) finalAt(addr uint64) (finalBlock, bool) {
	i, ok := slices.BinarySearchFunc(rp.final, addr, func(b finalBlock, a uint64) int { return cmp.Compare(b.addr, a) })
	if !ok {
		return finalBlock{}, false
	}
	return rp.final[i], true
}

// Trace is the device's trace.
func (rp *Replayed) Trace() *snapshot.Trace { return rp.Snap.Trace(rp.Device) }

// FirstTimeUS is the time of the first trace entry (0 without a trace or
// without time_us).
func (rp *Replayed) FirstTimeUS() int64 {
	if t := rp.Trace(); t.Len() > 0 {
		return t.First().TimeUS
	}
	return 0
}

// AllocatedAt and ReservedAt return the figures after entry i (-1: before
// the first entry).
func (rp *Replayed) AllocatedAt(i int) int64 {
	if rp.alloc != nil {
		if i < 0 || i >= rp.alloc.Len() {
			return rp.StartAllocated
		}
		return rp.alloc.At(i)
	}
	if i < 0 || i >= len(rp.Allocated) {
		return rp.StartAllocated
	}
	return rp.Allocated[i]
}

// ReservedAt: see AllocatedAt.
func (rp *Replayed) ReservedAt(i int) int64 {
	if rp.resv != nil {
		if i < 0 || i >= rp.resv.Len() {
			return rp.StartReserved
		}
		return rp.resv.At(i)
	}
	if i < 0 || i >= len(rp.Reserved) {
		return rp.StartReserved
	}
	return rp.Reserved[i]
}

// Figures is the compact figures Want.CompactFigures kept (allocated and
// reserved memory after each entry), shared, not copied; ok is false when
// they were not kept so. The view's model reads them instead of keeping a
// second copy of its own.
func (rp *Replayed) Figures() (alloc series.Bytes, resv series.Steps, ok bool) {
	if rp.alloc == nil {
		return series.Bytes{}, series.Steps{}, false
	}
	return *rp.alloc, *rp.resv, true
}

// padFigures gives the compact figures a zero for each entry before i the
// replay passed over, as the arrays' zero values do.
func (rp *Replayed) padFigures(i int) {
	for rp.alloc.Len() < i {
		rp.alloc.Add(0)
		rp.resv.Add(0)
	}
}

// Moment says when something happened.
type Moment struct {
	// Index is the trace entry after which the state is taken; -1 is
	// before the first entry (or the final state of a device without a
	// trace).
	Index int `json:"index"`
	// TimeUS is the entry's time_us (Unix epoch microseconds; 0 unknown),
	// Seconds the time since the first trace entry.
	TimeUS  int64   `json:"time_us,omitempty"`
	Seconds float64 `json:"seconds"`
	// Phase is the innermost annotated range open then ("" for none).
	Phase     string `json:"phase,omitempty"`
	Allocated int64  `json:"allocated_bytes"`
	Reserved  int64  `json:"reserved_bytes"`
}

// MomentAt describes the moment after trace entry i.
func (rp *Replayed) MomentAt(i int) Moment {
	m := Moment{Index: i, Allocated: rp.AllocatedAt(i), Reserved: rp.ReservedAt(i)}
	if t := rp.Trace(); i >= 0 && i < t.Len() {
		m.TimeUS = t.At(i).TimeUS
		if first := rp.FirstTimeUS(); m.TimeUS != 0 && first != 0 {
			m.Seconds = float64(m.TimeUS-first) / 1e6
		}
		m.Phase = rp.Phases.At(m.TimeUS)
	}
	return m
}

// State is a device's allocator state at one moment, shaped as
// torch.cuda.memory_snapshot() segments.
type State struct {
	Index    int
	Segments []snapshot.Segment
	// AllocIndex gives, for each allocated or pending block by address,
	// the trace entry that allocated it; blocks that are absent existed
	// before the first entry.
	AllocIndex map[uint64]int
	// capture is the state this one is a copy of, taken during a replay
	// for the entries of one allocator call (they share its segments).
	capture *State
}

// BornBeforeTrace reports whether a live block was allocated before the
// recorded trace began.
func (s *State) BornBeforeTrace(addr uint64) bool {
	_, ok := s.AllocIndex[addr]
	return !ok
}

// States replays the device again and captures its state after each of
// the given trace entries (-1: before the first entry; the final state of
// a device without a trace).
//
// States that Prefetch captured come from it without a replay; a State is
// shared then, and callers do not modify it.
func (rp *Replayed) States(indices ...int) ([]*State, error) {
	out := make([]*State, len(indices))
	var order []int
	for k, i := range indices {
		if st, ok := rp.prefetched[i]; ok {
			out[k] = st
		} else {
			order = append(order, i)
		}
	}
	if len(order) == 0 {
		return out, nil
	}
	slices.Sort(order)
	order = slices.Compact(order)
	c := rp.NewStateCursor()
	got := map[int]*State{}
	for _, i := range order {
		st, err := c.At(i)
		if err != nil {
			return nil, err
		}
		got[i] = st
	}
	for k, i := range indices {
		if out[k] == nil {
			out[k] = got[i]
		}
	}
	return out, nil
}

// Captured reports whether the state after entry i was captured already
// (by ReplayFor or Prefetch): States returns it without a replay.
func (rp *Replayed) Captured(i int) bool {
	_, ok := rp.prefetched[i]
	return ok
}

// StateCursor captures states at increasing trace entries with one replay,
// starting over when asked for an earlier entry: stepping through the
// trace one entry at a time costs one entry each.
type StateCursor struct {
	rp       *Replayed
	r        *replay.Replay
	allocIdx map[uint64]int
}

// NewStateCursor returns a cursor before the first entry.
func (rp *Replayed) NewStateCursor() *StateCursor { return &StateCursor{rp: rp} }

// Pos is the entry the cursor's state is after (-1 before the first).
func (c *StateCursor) Pos() int {
	if c.r == nil {
		return -1
	}
	return c.r.Pos() - 1
}

// At returns the state after trace entry i (-1: before the first entry).
func (c *StateCursor) At(i int) (*State, error) {
	rp := c.rp
	if c.r == nil || i < c.Pos() {
		// Going back replays from the start: the old replay (a whole
		// simulator) is garbage before the new one is built, not after,
		// or the two would be live at once.
		c.r = nil
		c.allocIdx = map[uint64]int{}
		r, err := replay.New(rp.Snap, replay.Options{Device: rp.Device, RuntimeSettings: rp.runtimeSettings, OnEvent: func(i int, e snapshot.TraceEntry, a *allocator.Allocator) {
			if e.Action == snapshot.ActionAlloc {
				c.allocIdx[e.Addr] = i
			}
		}})
		if err != nil {
			return nil, fmt.Errorf("device %d: %w", rp.Device, err)
		}
		c.r = r
	}
	if i >= 0 {
		if err := c.r.RunTo(i); err != nil {
			return nil, fmt.Errorf("device %d: %w", rp.Device, err)
		}
	}
	return rp.capture(i, c.r.Allocator(), c.allocIdx), nil
}

// Prefetch captures the states after the given entries in one replay, for
// the analyses that ask for them next (a report's peak and its ooms), so
// that each does not replay the trace again.
func (rp *Replayed) Prefetch(indices ...int) error {
	sts, err := rp.States(indices...)
	if err != nil {
		return err
	}
	if rp.prefetched == nil {
		rp.prefetched = map[int]*State{}
	}
	for k, i := range indices {
		rp.prefetched[i] = sts[k]
	}
	return nil
}

func (rp *Replayed) capture(i int, a *allocator.Allocator, allocIdx map[uint64]int) *State {
	st := rp.captureRaw(i, a, allocIdx)
	rp.fixStacks(st)
	return st
}

// captureRaw copies the allocator's state after entry i, with the
// allocation entries of its live blocks (allocIdx: the last alloc entry
// at each address so far).
func (rp *Replayed) captureRaw(i int, a *allocator.Allocator, allocIdx map[uint64]int) *State {
	st := &State{Index: i, Segments: a.Segments(), AllocIndex: map[uint64]int{}}
	for si := range st.Segments {
		seg := &st.Segments[si]
		for bi := range seg.Blocks {
			b := &seg.Blocks[bi]
			if !b.State.Active() {
				continue
			}
			if k, during := allocIdx[b.Address]; during {
				st.AllocIndex[b.Address] = k
			}
		}
	}
	return st
}

// fixStacks gives stackless live blocks the stack the final snapshot
// knows: entries recorded without frames (context="state") leave a block
// stackless, and the final snapshot knows the stack of a block that is
// still live at the end. It needs the whole trace (rp.final).
func (rp *Replayed) fixStacks(st *State) {
	for si := range st.Segments {
		seg := &st.Segments[si]
		for bi := range seg.Blocks {
			b := &seg.Blocks[bi]
			if !b.State.Active() || b.Stack != snapshot.NoStack {
				continue
			}
			k, during := st.AllocIndex[b.Address]
			if fb, ok := rp.finalAt(b.Address); ok && fb.size == b.Size && (during && fb.last == k || !during && fb.last < 0) {
				b.Stack = fb.stack
			}
		}
	}
}

// FinalState is the snapshot's own final state of the device (its
// segments, which the replay reproduces), with the allocation entries of
// its live blocks.
func (rp *Replayed) FinalState() *State {
	st := &State{Index: rp.Trace().Len() - 1, AllocIndex: map[uint64]int{}}
	for _, seg := range rp.Snap.DeviceSegments(rp.Device) {
		st.Segments = append(st.Segments, *seg)
	}
	slices.SortStableFunc(st.Segments, func(x, y snapshot.Segment) int {
		switch {
		case x.Address < y.Address:
			return -1
		case x.Address > y.Address:
			return 1
		}
		return 0
	})
	for _, fb := range rp.final {
		if fb.last >= 0 {
			st.AllocIndex[fb.addr] = fb.last
		}
	}
	return st
}
