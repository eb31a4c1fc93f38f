package analysis

import (
	"slices"
	"sync/atomic"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Want names the states a caller will ask a replay for (Replayed.States),
// so that the one replay ReplayFor runs captures them as it goes instead
// of a second replay rebuilding them.
type Want struct {
	// Indices are trace entries whose states are wanted (-1: before the
	// first entry).
	Indices []int
	// PeakAllocated and PeakReserved want the states at the peaks of
	// allocated and reserved memory (FindPeak; ExplainOOMs without an
	// oom, segments --at peak); OOMs the state at each recorded oom, or
	// without one at the peak of reserved memory (ExplainOOMs).
	PeakAllocated, PeakReserved, OOMs bool
	// NoFigures leaves Replayed.Allocated and Reserved nil, for a caller
	// that keeps the figures itself (the view's server keeps them in 4
	// bytes an entry rather than 16); the Replayed's MomentAt, AllocatedAt
	// and FindPeak need them.
	NoFigures bool
	// CompactFigures keeps the figures AllocatedAt, ReservedAt, MomentAt
	// and FindPeak read in about 4 bytes an entry instead of 16
	// (allocated memory in 512-byte units, reserved memory as its
	// changes), leaving Replayed.Allocated and Reserved nil: for the
	// commands that print figures at a few entries (peak, oom, segments,
	// diff, report: the view's model then keeps its own, as with
	// NoFigures).
	CompactFigures bool
	// LiveOnly keeps only the active blocks (allocated, pending free) of
	// the states captured, about half of them: for callers that read what
	// was live and nothing else (FindPeak: peak, diff). Describe, Segments
	// and an oom's free space need every block.
	LiveOnly bool
	// RuntimeSettings replays with replay.Options.RuntimeSettings (the
	// program changed allocator settings at runtime: --runtime-settings),
	// this replay and any the Replayed runs again.
	RuntimeSettings bool
	// Captures replays with replay.Options.Captures (the program captured
	// CUDA graphs or used a MemPool: --captures). It changes only the
	// result's bounds, not the simulation, so the replays the Replayed
	// runs again for states do without it.
	Captures bool
	// StartScan is the start rebuild's pass begun while the snapshot was
	// read (replay.Options.StartScan; command.LoadSnapshotScanned): the
	// replay of the device whose trace it scanned takes it, others scan
	// for themselves.
	StartScan *replay.StartScan
}

// capturer takes the wanted states during the replay. Entries named by
// index are captured when the allocator call containing them is applied
// (the state RunTo gives). The entry of a peak is known only at the end,
// so the capturer guesses: a running sum of the trace's own sizes
// (allocations rounded as the allocator rounds, segment sizes exact)
// follows the real figure closely, and a state is captured when the
// real figure reaches a new high where the sum is within a slack of its
// highest value and of every later value (the slack covers what the sum
// misses: blocks left unsplit, rounding tables) and the next call does
// not raise it again. A state
// is kept only if its entry turns out to be the peak; when the guess
// misses, States replays up to the peak as before. The captures are
// limited to about one replay's worth of copied blocks.
type capturer struct {
	rp    *Replayed
	trace *snapshot.Trace
	rd    *snapshot.Reader // for track's look ahead
	// want are the wanted entries, sorted; next the first not yet passed.
	want []int
	next int
	got  map[int]*State
	// alloc and res follow the peaks.
	alloc, res peakTrack
	// budget is the number of blocks the captures may still copy.
	budget int
	// liveOnly: see Want.LiveOnly.
	liveOnly bool
	// startForPeak: the state before the first entry was captured only
	// because a peak may be there (startAlloc, startRes: the peaks then).
	startForPeak         bool
	startAlloc, startRes int64
	// taken are the states captured, each with the last entry of the
	// allocator call it was captured after (their AllocIndex is filled by
	// fill).
	taken []takenState
}

type takenState struct {
	st    *State
	after int
}

// peakTrack follows one peak (allocated or reserved memory).
type peakTrack struct {
	on bool
	// cand marks the entries where a new high of the real figure is
	// captured (see newPeakTrack).
	cand []uint64
	// best is the real peak when st was captured at entry at.
	best int64
	st   *State
	at   int
	// rises reports whether an entry makes the figure rise (and the call
	// it starts raise it), delta its change to the sum.
	rises func(snapshot.Action) bool
	delta func(e *snapshot.TraceEntry) int64
}

func allocRises(a snapshot.Action) bool { return a == snapshot.ActionAlloc }

func allocDelta(e *snapshot.TraceEntry) int64 {
	switch e.Action {
	case snapshot.ActionAlloc:
		return roundGuess(e.Size)
	case snapshot.ActionFreeCompleted, snapshot.ActionFree:
		return -roundGuess(e.Size)
	}
	return 0
}

// roundGuess is the block size of a request under the default rounding
// (512-byte multiples): only a guess, for the capturer.
func roundGuess(n int64) int64 {
	if n < allocator.MinBlockSize {
		return allocator.MinBlockSize
	}
	return (n + allocator.MinBlockSize - 1) / allocator.MinBlockSize * allocator.MinBlockSize
}

func reserveRises(a snapshot.Action) bool {
	return a == snapshot.ActionSegmentAlloc || a == snapshot.ActionSegmentMap
}

func reserveDelta(e *snapshot.TraceEntry) int64 {
	switch e.Action {
	case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentMap:
		return e.Size
	case snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
		return -e.Size
	}
	return 0
}

func newCapturer(rp *Replayed, trace *snapshot.Trace, w Want) *capturer {
	c := &capturer{rp: rp, trace: trace, rd: trace.Reader(), got: map[int]*State{}, budget: trace.Len() + 1024}
	c.want = slices.Clone(w.Indices)
	c.liveOnly = w.LiveOnly
	peakRes := w.PeakReserved
	if w.OOMs {
		n := len(c.want)
		for i, e := range trace.All() {
			if trace.Count(snapshot.ActionOOM) == 0 {
				break
			}
			if e.Action == snapshot.ActionOOM {
				c.want = append(c.want, i)
			}
		}
		peakRes = peakRes || len(c.want) == n
	}
	slices.Sort(c.want)
	c.want = slices.Compact(c.want)
	if trace.Len() > 0 {
		c.alloc, c.res = newPeakTracks(trace, w.PeakAllocated, peakRes)
		// A peak may be before the first entry (a trace that only frees,
		// or whose entries the replay forces back): the state at the
		// start costs one copy.
		if (c.alloc.on || c.res.on) && !slices.Contains(c.want, -1) {
			c.want = append([]int{-1}, c.want...)
			c.startForPeak = true
		}
	}
	return c
}

// peakTrackRun is how many entries newPeakTracks decodes at once for its
// backward pass (160 KB of them).
const peakTrackRun = 4096

// newPeakTracks makes the tracks of the peaks of allocated and reserved
// memory (each only if on) in one pass forward and one backward over the
// trace, for both at once.
func newPeakTracks(trace *snapshot.Trace, onAlloc, onRes bool) (alloc, res peakTrack) {
	if !onAlloc && !onRes {
		return
	}
	var sumA, highA, sumR, highR int64
	for _, e := range trace.All() {
		sumA += allocDelta(&e)
		highA = max(highA, sumA)
		sumR += reserveDelta(&e)
		highR = max(highR, sumR)
	}
	// Entry i is a candidate when its sum is within the slack of the
	// highest sum at or after it (nothing later is clearly higher) and of
	// the highest of all.
	words := (trace.Len() + 63) / 64
	alloc = peakTrack{on: true, best: -1 << 62, at: -2, rises: allocRises, delta: allocDelta, cand: make([]uint64, words)}
	res = peakTrack{on: true, best: -1 << 62, at: -2, rises: reserveRises, delta: reserveDelta, cand: make([]uint64, words)}
	slA, slR := allocSlack(highA), reserveSlack(highR)
	afterA, afterR := int64(-1<<62), int64(-1<<62)
	// Backward: runs of entries decoded forward into one buffer
	// (Trace.Slice), then read from its end; a Reader's At for each entry
	// cost twice the forward pass.
	buf := make([]snapshot.TraceEntry, 0, min(trace.Len(), peakTrackRun))
	for hi := trace.Len(); hi > 0; {
		lo := max(0, hi-peakTrackRun)
		buf = trace.Slice(lo, hi, buf)
		for i := hi - 1; i >= lo; i-- {
			if sumA >= highA-slA && sumA >= afterA-slA {
				alloc.cand[i/64] |= 1 << (i % 64)
			}
			if sumR >= highR-slR && sumR >= afterR-slR {
				res.cand[i/64] |= 1 << (i % 64)
			}
			afterA, afterR = max(afterA, sumA), max(afterR, sumR)
			e := &buf[i-lo]
			sumA -= allocDelta(e)
			sumR -= reserveDelta(e)
		}
		hi = lo
	}
	if !onAlloc {
		alloc = peakTrack{}
	}
	if !onRes {
		res = peakTrack{}
	}
	return alloc, res
}

// allocSlack is what the sum of requested sizes may miss of allocated
// memory: blocks left unsplit (up to 1 MiB each), other rounding tables.
// On the published snapshots and recorded training runs the sum misses the
// peak by a few MiB.
func allocSlack(high int64) int64 { return high/64 + 8<<20 }

// reserveSlack: segment sizes are exact, so is the sum.
func reserveSlack(int64) int64 { return 0 }

// step is called once the allocator call applying entries lo..hi is done
// (lo = hi = -1: the state before the first entry).
func (c *capturer) step(lo, hi int, a *allocator.Allocator) {
	var shared *State
	take := func(i int) *State {
		if shared == nil {
			shared = c.rp.captureRaw(i, a, nil)
			c.budget -= stateBlocks(shared) // what was copied
			if c.liveOnly {
				shared.Segments = liveSegments(shared.Segments)
			}
			shared.capture = shared
			c.taken = append(c.taken, takenState{shared, hi})
		}
		if shared.Index == i {
			return shared
		}
		st := *shared
		st.Index = i
		return &st
	}
	for c.next < len(c.want) && c.want[c.next] <= hi {
		if i := c.want[c.next]; i >= lo {
			c.got[i] = take(i)
		}
		c.next++
	}
	if !c.alloc.on && !c.res.on {
		return
	}
	al, re := a.AllocatedReserved()
	if lo < 0 {
		c.alloc.best, c.res.best = al.Peak, re.Peak
		c.startAlloc, c.startRes = al.Peak, re.Peak
		return
	}
	c.track(&c.alloc, lo, hi, al.Peak, take)
	c.track(&c.res, lo, hi, re.Peak, take)
	if c.startForPeak && (!c.alloc.on || al.Peak > c.startAlloc) && (!c.res.on || re.Peak > c.startRes) {
		// Both peaks are past the state before the first entry: it
		// cannot be printed, and is let go now rather than held to the
		// end.
		c.startForPeak = false
		st := c.got[-1]
		delete(c.got, -1)
		c.drop(st)
	}
}

func (c *capturer) track(p *peakTrack, lo, hi int, peak int64, take func(int) *State) {
	if !p.on {
		return
	}
	if peak <= p.best || p.cand[hi/64]&(1<<(hi%64)) == 0 {
		return
	}
	// The next call raises the figure again (its first entries are
	// segment events, then the allocation): this one is not the peak.
	for k := hi + 1; k < c.trace.Len(); k++ {
		a := c.rd.At(k).Action
		if p.rises(a) {
			return
		}
		if !isSegmentEvent(a) {
			break
		}
	}
	if c.budget <= 0 {
		return
	}
	old := p.st
	p.best, p.st, p.at = peak, take(hi), hi
	c.drop(old)
}

// drop lets go of a state a peak track no longer holds, unless the other
// track or a wanted entry holds it: only the states that may be printed
// stay live during the replay, not every guess.
func (c *capturer) drop(st *State) {
	if st == nil || sameState(st, c.alloc.st) || sameState(st, c.res.st) {
		return
	}
	for _, g := range c.got {
		if sameState(st, g) {
			return
		}
	}
	c.taken = slices.DeleteFunc(c.taken, func(t takenState) bool { return sameState(st, t.st) })
}

// sameState reports whether two states are one capture (take hands out
// copies of one capture for the entries of one allocator call: they
// share its segments).
func sameState(a, b *State) bool {
	if a == nil || b == nil {
		return false
	}
	return a == b || a.capture != nil && a.capture == b.capture
}

// allocHistory is what the analyses read of the trace's alloc entries:
// the last one at each address, and, when states are to be filled, each
// one's predecessor at its address, so that the last alloc entry at an
// address up to any entry is found by walking back from the last one.
// It is gathered from the trace alone, so it can be before the states it
// fills are captured.
type allocHistory struct {
	// last maps an address to its last alloc entry: the entry itself
	// without prev, its number among the alloc entries (ordinal) with it.
	last lastTable
	// entry and prev, by ordinal: the alloc entry, and the ordinal of the
	// previous alloc entry at its address (-1: none). Nil without states
	// to fill.
	entry, prev []int32
}

// lastAlloc is the last alloc entry at addr in the whole trace.
func (h *allocHistory) lastAlloc(addr uint64) (int, bool) {
	k, ok := h.last.get(addr)
	if !ok {
		return 0, false
	}
	if h.entry == nil {
		return int(k), true
	}
	return int(h.entry[k]), true
}

// lastAllocUpTo is the last alloc entry at addr among entries 0..upTo.
// Walking back from the trace's last costs one step an alloc entry at
// addr after upTo: filling a state costs at most one step an alloc entry
// after it, as each address appears once among its live blocks.
func (h *allocHistory) lastAllocUpTo(addr uint64, upTo int) (int, bool) {
	k, ok := h.last.get(addr)
	if !ok {
		return 0, false
	}
	for k >= 0 && int(h.entry[k]) > upTo {
		k = h.prev[k]
	}
	if k < 0 {
		return 0, false
	}
	return int(h.entry[k]), true
}

// mayTake reports whether step may capture any state (one scan fills).
func (c *capturer) mayTake() bool {
	return len(c.want) > 0 || c.alloc.on || c.res.on
}

// scan gathers the alloc entries' history of the whole trace and fills
// the Replayed's firstFree, in one pass. It reads only the trace: it runs
// beside the replay's steps, on the core they leave idle (stopped, when
// the replay fails, within a few thousand entries). withPrev keeps what
// fill needs (mayTake, asked before the steps begin).
func (c *capturer) scan(withPrev bool, stopped *atomic.Bool) *allocHistory {
	rp := c.rp
	h := &allocHistory{}
	if withPrev {
		n := c.trace.Count(snapshot.ActionAlloc)
		h.entry, h.prev = make([]int32, 0, n), make([]int32, 0, n)
	}
	for i, e := range c.trace.All() {
		if i&4095 == 0 && stopped.Load() {
			return h
		}
		switch e.Action {
		case snapshot.ActionAlloc:
			if !withPrev {
				h.last.swap(e.Addr, int32(i))
				break
			}
			prev, ok := h.last.swap(e.Addr, int32(len(h.entry)))
			if !ok {
				prev = -1
			}
			h.entry = append(h.entry, int32(i))
			h.prev = append(h.prev, prev)
		case snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted, snapshot.ActionFree:
			// The first event at an address is a free: the block was
			// allocated before the trace. NoStack (the zero value) marks
			// an address seen without a stack.
			if _, ok := h.last.get(e.Addr); !ok {
				if _, ok := rp.firstFree[e.Addr]; !ok {
					rp.firstFree[e.Addr] = e.Stack
				}
			}
		}
	}
	return h
}

// fill sets the captured states' AllocIndex as they stand after their
// entries: the last alloc entry up to then at each live block's address
// (h from a scan withPrev).
func (c *capturer) fill(h *allocHistory) {
	for _, t := range c.taken {
		st := t.st
		for si := range st.Segments {
			for _, b := range st.Segments[si].Blocks {
				if !b.State.Active() {
					continue
				}
				if i, ok := h.lastAllocUpTo(b.Address, t.after); ok {
					st.AllocIndex[b.Address] = i
				}
			}
		}
	}
}

// finish completes the captured states once the replay is done (their
// stacks need the whole trace) and hands them to the Replayed: the peaks'
// only when the guess was right.
func (c *capturer) finish() {
	rp := c.rp
	if p := &c.alloc; p.st != nil && p.at == rp.Result.PeakAllocated.Index {
		c.got[p.at] = p.st
	}
	if p := &c.res; p.st != nil && p.at == rp.Result.PeakReserved.Index {
		c.got[p.at] = p.st
	}
	if len(c.got) == 0 {
		return
	}
	if rp.prefetched == nil {
		rp.prefetched = map[int]*State{}
	}
	done := map[*State]bool{}
	for i, st := range c.got {
		st.capture = nil // only the replay's bookkeeping
		if !done[st] {
			rp.fixStacks(st)
			done[st] = true
		}
		rp.prefetched[i] = st
	}
}

// liveSegments is segs with only their active blocks, in one new array
// (the copy segs was is let go).
func liveSegments(segs []snapshot.Segment) []snapshot.Segment {
	n := 0
	for si := range segs {
		for _, b := range segs[si].Blocks {
			if b.State.Active() {
				n++
			}
		}
	}
	live := make([]snapshot.Block, 0, n)
	out := make([]snapshot.Segment, len(segs))
	for si := range segs {
		start := len(live)
		for _, b := range segs[si].Blocks {
			if b.State.Active() {
				live = append(live, b)
			}
		}
		out[si] = segs[si]
		out[si].Blocks = live[start:len(live):len(live)]
	}
	return out
}

func stateBlocks(st *State) int {
	n := 0
	for i := range st.Segments {
		n += len(st.Segments[i].Blocks) + 1
	}
	return n
}
