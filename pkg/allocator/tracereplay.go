package allocator

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/memstat/memstat/pkg/snapshot"
)

// Replaying a recorded trace (allocator model §16).
//
// A Replay drives one device's trace of a snapshot through the simulator,
// entry by entry, in one of two modes:
//
//   - Follow (the default) reproduces what the real allocator did. The
//     trace's allocs, frees and ooms are the inputs; the simulator decides
//     when to cudaMalloc or map, which block to use and where to split, and
//     only the address of each new segment comes from the trace. Each
//     decision is compared with the recording: where they agree the
//     simulator's own state is kept; where they differ the recorded
//     operations are applied with the Force* primitives instead, so the
//     state stays equal to reality, and the divergence is counted. A run of
//     segment_free/segment_unmap entries that the allocation after it does
//     not produce itself is a user torch.cuda.empty_cache(). The statistics
//     are then the exact torch.cuda.memory_stats() of the recorded run.
//   - WhatIf lets the simulator decide everything, with its own addresses,
//     under another configuration or device capacity. Frees are matched to
//     allocations by identity (the recorded address at allocation time),
//     not by address; an allocation that runs out of memory in the
//     simulation is counted and its frees are skipped; the program's own
//     empty_cache() calls are kept; the live blocks of the starting state
//     are allocated first.
//
// A trace that starts mid-run gets its starting state rebuilt first (see
// replay_start.go); a device without a trace is just its final state.

// ReplayMode selects how a Replay treats the recorded decisions.
type ReplayMode uint8

const (
	// Follow reproduces the recorded run and measures fidelity.
	Follow ReplayMode = iota
	// WhatIf simulates the recorded requests under other settings.
	WhatIf
)

func (m ReplayMode) String() string {
	if m == WhatIf {
		return "what-if"
	}
	return "follow"
}

// ReplayOptions configure a Replay.
type ReplayOptions struct {
	// Device is the device ordinal whose trace and segments are replayed.
	Device int
	// Config is the allocator configuration to simulate. nil: the one the
	// snapshot records in allocator_settings, or the defaults of Version
	// for files without settings. A Config carries its own Version, which
	// then wins over the Version field.
	Config *Config
	// Version is the PyTorch release to simulate; 0 guesses it from the
	// file's schema (GuessVersion).
	Version Version
	// Capacity is the device memory the simulator may obtain. 0 derives
	// it from the trace's first oom entry (device_free plus the memory
	// reserved at that entry), or leaves it unlimited without one.
	Capacity int64
	// TotalMemory is cudaDeviceProp.totalGlobalMem, which sizes the
	// address reservations of expandable segments. 0 infers an upper
	// bound from the spacing of the recorded reservations, capped by the
	// capacity (or 80 GiB).
	TotalMemory int64
	Mode        ReplayMode
	// OnEvent, if set, is called after each trace entry has been applied,
	// with the allocator in the state after it. The entries an allocator
	// call produces together (a segment_free run or segment_alloc before
	// the alloc they serve) are applied together, so OnEvent sees the same
	// state for each of them. The allocator must not be modified.
	OnEvent func(i int, e snapshot.TraceEntry, a *Allocator)
	// CheckEvery runs CheckInvariants after every n-th entry (0: never);
	// a failure stops the replay with an error.
	CheckEvery int
	// keepStart keeps the rebuilt starting state after it is seeded: a
	// what-if replay reuses the state of the follow replay it runs first.
	keepStart bool
}

// Replay is a step-able replay of one device's trace.
type Replay struct {
	snap  *snapshot.Snapshot
	opts  ReplayOptions
	cfg   Config
	trace []snapshot.TraceEntry
	// streams resolves the trace entries' streams (snapshot.Contexts).
	streams streamTable
	final   []*snapshot.Segment
	a       *Allocator
	pos     int
	done    bool
	// res is allocated apart from the Replay: a caller that keeps only
	// the result (stats over many files) must not keep the replay's
	// allocator state and trace alive with it.
	res   *ReplayResult
	start startState

	// win is the window of entries the allocator call being tried may
	// produce; the segment-address hook reads it. cur is the allocator
	// the call runs on (the replay's, or a trial clone).
	win [2]int
	cur *Allocator
	// seeded holds the address ranges of the starting state's segments.
	seeded spans
	// forcedOOMs counts recorded ooms applied by force.
	forcedOOMs int64
	// emptyCacheAt marks the entries where the program called
	// empty_cache() (follow mode finds them; what-if replays them).
	emptyCacheAt map[int]bool

	// What-if: simulated address of each live recorded allocation, and
	// the recorded allocations that ran out of memory.
	simAddr map[uint64]uint64
	failed  map[uint64]bool

	peakAlloc, peakRes PeakAt
	frag               float64
}

// NewReplay prepares the replay of device o.Device of s: it picks the
// configuration, rebuilds and seeds the starting state and derives the
// device capacity. Nothing of the trace is applied yet.
func NewReplay(s *snapshot.Snapshot, o ReplayOptions) (*Replay, error) {
	if o.Device < 0 {
		return nil, fmt.Errorf("allocator: device %d", o.Device)
	}
	r := &Replay{snap: s, opts: o, trace: s.Trace(o.Device), streams: streamsOf(s.Contexts), final: s.DeviceSegments(o.Device), res: &ReplayResult{}}
	slices.SortStableFunc(r.final, func(x, y *snapshot.Segment) int {
		switch {
		case x.Address < y.Address:
			return -1
		case x.Address > y.Address:
			return 1
		}
		return 0
	})
	v := o.Version
	if v == 0 {
		v = GuessVersion(s)
	}
	if o.Config != nil {
		r.cfg = *o.Config
		v = r.cfg.Version
	} else {
		var notes []string
		r.cfg, notes = ConfigFromSettings(s.Settings, v)
		r.res.Warnings = append(r.res.Warnings, notes...)
	}
	if err := r.cfg.Validate(); err != nil {
		return nil, err
	}
	if r.cfg.Backend == "cudaMallocAsync" {
		r.res.Warnings = append(r.res.Warnings, "the recorded backend is cudaMallocAsync; the native caching allocator is simulated instead")
	}
	r.res.Device = o.Device
	r.res.Mode = o.Mode.String()
	r.res.Version = v.String()
	r.res.Settings = r.cfg.String()

	// Follow mode rebuilds the start and derives the capacity; what-if
	// needs both too, plus where the program emptied the cache, so it runs
	// a follow replay of its own first.
	var follow *Replay
	if o.Mode == WhatIf {
		fo := o
		fo.Mode, fo.Config, fo.OnEvent, fo.CheckEvery = Follow, nil, nil, 0
		fo.keepStart = true
		fo.Capacity = 0
		var err error
		if follow, err = NewReplay(s, fo); err != nil {
			return nil, err
		}
		for follow.Step() == nil {
		}
	}
	total := o.TotalMemory
	if total == 0 {
		total = r.inferTotalMemory()
	}
	if follow != nil {
		// The starting state is the recording's, rebuilt under the
		// recorded settings whatever the what-if ones are.
		r.start = follow.start
	} else {
		resSize := func(page int64) int64 {
			d := Device{totalMemory: total}
			return d.reservationSize(page)
		}
		r.start = reconstructStart(r.cfg, r.trace, r.streams, r.final, resSize)
	}
	r.res.Warnings = append(r.res.Warnings, r.start.warnings...)

	if o.Mode == Follow {
		return r, r.initFollow(total)
	}
	return r, r.initWhatIf(total, follow)
}

// inferTotalMemory bounds totalGlobalMem by the spacing of the expandable
// reservations: reservations do not overlap, and the lowest address known
// of each (stream, pool) -- its first recorded segment_map, or the lowest
// of its final segments -- is at or after its base, so the next one's
// lowest known address lies at least a reservation (1 1/8 of the device
// memory, in whole pages) further on. Without a trace the final segments
// alone bound it; else a guessed 80 GiB would make a reservation that
// swallows its neighbours.
func (r *Replay) inferTotalMemory() int64 {
	limit := int64(DefaultTotalMemory)
	type key struct {
		stream int64
		small  bool
		pool   snapshot.PoolID
	}
	bases := map[key]uint64{}
	var largestMap int64
	note := func(k key, addr uint64) {
		if b, ok := bases[k]; !ok || addr < b {
			bases[k] = addr
		}
	}
	for i, e := range r.trace {
		if e.Action != snapshot.ActionSegmentMap {
			continue
		}
		largestMap = max(largestMap, e.Size)
		small := false
		for _, f := range r.trace[i+1:] {
			if f.Action == snapshot.ActionAlloc || f.Action == snapshot.ActionOOM {
				small = r.cfg.RoundSize(f.Size) <= SmallSize
				break
			}
		}
		k := key{stream: r.streams.of(&e), small: small}
		if _, ok := bases[k]; !ok {
			bases[k] = e.Addr
		}
	}
	for _, s := range r.final {
		if s.Expandable {
			note(key{s.Stream, s.Pool == snapshot.SmallPool, s.PoolID}, s.Address)
		}
	}
	var addrs []uint64
	for _, b := range bases {
		addrs = append(addrs, b)
	}
	slices.Sort(addrs)
	for i := 1; i < len(addrs); i++ {
		// The reservation, 1 1/8 of the memory rounded up to whole large
		// pages, must fit in the gap: whole pages of it, 8/9 of them.
		gap := int64(addrs[i]-addrs[i-1]) / LargeBuffer * LargeBuffer
		if t := gap / 9 * 8; t > 0 && t < limit {
			limit = t
		}
	}
	// One map lies inside one reservation of 1 1/8 x totalGlobalMem, so
	// the device was at least 8/9 of the largest map (a recording of a
	// device larger than the default).
	if need := (largestMap/9*8 + LargeBuffer - 1) / LargeBuffer * LargeBuffer; need > limit && len(addrs) < 2 {
		limit = need
	}
	return limit
}

func (r *Replay) newAllocator(capacity, total int64, hook func(SegmentRequest) (uint64, bool)) error {
	a, err := New(r.cfg, Options{
		Device: r.opts.Device, Capacity: capacity, TotalMemory: total,
		SegmentAddress: hook, Stacks: r.snap.Stacks,
	})
	if err != nil {
		return err
	}
	r.a = a
	return nil
}

// seedStart seeds the rebuilt starting state (follow mode) and counts it.
// A segment the model cannot place is kept outside the simulation
// (Allocator.AddUnmodelled): it still counts in every figure, and the
// device gets one warning line for all of them.
func (r *Replay) seedStart() {
	var failedRes []string
	for _, res := range r.start.reservations {
		if err := r.a.SeedReservation(res.base, res.stream, res.pool); err != nil {
			failedRes = append(failedRes, fmt.Sprintf("reservation %#x: %v", res.base, err))
		}
	}
	var kept []string
	var keptBytes int64
	for _, seg := range r.start.segments {
		if err := r.a.SeedSegment(seg); err != nil {
			r.a.AddUnmodelled(seg)
			kept = append(kept, fmt.Sprintf("segment %#x: %v", seg.Address, err))
			keptBytes += seg.TotalSize
		} else {
			r.seeded.add(seg.Address, seg.End())
		}
		r.res.History.PreexistingSegments++
	}
	switch {
	case len(kept) > 0:
		why := kept[0]
		if len(failedRes) > 0 {
			why += "; " + failedRes[0]
		}
		r.res.Warnings = append(r.res.Warnings, fmt.Sprintf("starting state: %d of %d segments (%s) could not be placed in the simulation and are kept as the snapshot has them: they count in every figure, but the trace cannot use them (first: %s)",
			len(kept), len(r.start.segments), formatSize(keptBytes), why))
	case len(failedRes) > 0:
		r.res.Warnings = append(r.res.Warnings, fmt.Sprintf("starting state: %d expandable-segment reservations could not be placed where the rebuild put them; their segments were given reservations of their own (first: %s)",
			len(failedRes), failedRes[0]))
	}
	r.res.History.PreexistingBlocks = r.start.blocks
	r.res.History.PreexistingBytes = r.a.Stats().ReservedBytes[PoolAll].Current
}

// deriveCapacity is §16's rule: device_free at the first oom entry plus
// the memory reserved at that entry.
func (r *Replay) deriveCapacity(initial int64) (int64, string) {
	reserved := initial
	for i, e := range r.trace {
		switch e.Action {
		case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentMap:
			reserved += e.Size
		case snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
			reserved -= e.Size
		case snapshot.ActionOOM:
			return e.DeviceFree() + reserved, fmt.Sprintf("derived from oom entry %d: device_free + reserved", i)
		}
	}
	return 0, "unlimited (no oom entry)"
}

func (r *Replay) initFollow(total int64) error {
	capacity, source := r.opts.Capacity, "option"
	if capacity == 0 {
		var initial int64
		for _, s := range r.start.segments {
			initial += s.TotalSize
		}
		capacity, source = r.deriveCapacity(initial)
	}
	if r.opts.TotalMemory == 0 && capacity > 0 && capacity < total {
		total = capacity
	}
	if err := r.newAllocator(capacity, total, r.segmentAddress); err != nil {
		return err
	}
	r.seedStart()
	if !r.opts.keepStart {
		// Seeded: the copy of the snapshot's segments is garbage now (a
		// tenth of the memory of replaying a large snapshot).
		r.start.segments, r.start.reservations = nil, nil
	}
	r.res.Capacity, r.res.CapacitySource = capacity, source
	if err := r.a.RecordHistory(HistoryOptions{Enabled: HistoryAll, Context: ContextAll}); err != nil {
		return err
	}
	r.emptyCacheAt = make(map[int]bool)
	r.res.Fidelity = &Fidelity{}
	for _, e := range r.trace {
		switch e.Action {
		case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentFree, snapshot.ActionSegmentMap, snapshot.ActionSegmentUnmap:
			r.res.Fidelity.SegmentEvents.Recorded++
		case snapshot.ActionAlloc:
			r.res.Fidelity.Placements.Recorded++
		case snapshot.ActionSnapshot:
			r.res.Fidelity.SnapshotMarkers.Recorded++
		}
	}
	r.beginWindow()
	return nil
}

func (r *Replay) initWhatIf(total int64, follow *Replay) error {
	capacity, source := r.opts.Capacity, "option"
	if capacity == 0 {
		capacity, source = follow.res.Capacity, follow.res.CapacitySource
	}
	if r.opts.TotalMemory == 0 && capacity > 0 && capacity < total {
		total = capacity
	}
	if err := r.newAllocator(capacity, total, nil); err != nil {
		return err
	}
	r.res.Capacity, r.res.CapacitySource = capacity, source
	r.emptyCacheAt = follow.emptyCacheAt
	r.simAddr = make(map[uint64]uint64)
	r.failed = make(map[uint64]bool)
	// The live blocks of the starting state are allocated first, in
	// address order; the simulator places them where it wants.
	for _, seg := range r.start.segments {
		r.res.History.PreexistingSegments++
		for _, b := range seg.Blocks {
			if !b.State.Active() {
				continue
			}
			r.res.History.PreexistingBlocks++
			req := b.RequestedSize
			if req <= 0 {
				req = b.Size
			}
			addr, err := r.a.Malloc(req, seg.Stream, b.Stack)
			if err != nil {
				r.failed[b.Address] = true
				continue
			}
			r.simAddr[b.Address] = addr
			if b.State == snapshot.ActivePendingFree {
				r.a.FreeDeferred(addr, snapshot.NoStack)
			}
		}
	}
	r.res.History.PreexistingBytes = follow.res.History.PreexistingBytes
	r.beginWindow()
	return nil
}

// beginWindow makes the statistics count the recorded window only: the
// starting state is there, but its allocations are not counted as events
// of the window, and peaks start at the current values.
func (r *Replay) beginWindow() {
	r.a.ResetAccumulatedStats()
	r.a.ResetPeakStats()
	r.forcedOOMs = 0
	r.a.forced = 0
	r.a.MarkWindowStart()
	st := r.a.Stats()
	r.peakAlloc = PeakAt{Bytes: st.AllocatedBytes[PoolAll].Current, Index: -1}
	r.peakRes = PeakAt{Bytes: st.ReservedBytes[PoolAll].Current, Index: -1}
	r.frag = fragmentation(&st)
	h := &r.res.History
	h.Entries = len(r.trace)
	if len(r.trace) > 0 {
		h.FirstTimeUS, h.LastTimeUS = r.trace[0].TimeUS, r.trace[len(r.trace)-1].TimeUS
	}
	switch {
	case len(r.trace) == 0:
		h.Coverage = CoverageNone
	case h.PreexistingSegments > 0 || r.start.unexplained > 0:
		h.Coverage = CoveragePartial
	default:
		h.Coverage = CoverageComplete
	}
}

func fragmentation(st *Stats) float64 {
	res := st.ReservedBytes[PoolAll].Current
	if res == 0 {
		return 0
	}
	return float64(res-st.AllocatedBytes[PoolAll].Current) / float64(res)
}

// Len is the number of trace entries.
func (r *Replay) Len() int { return len(r.trace) }

// Pos is the index of the next entry to apply (Len when all are).
func (r *Replay) Pos() int { return r.pos }

// Trace returns the trace being replayed (shared; do not modify).
func (r *Replay) Trace() []snapshot.TraceEntry { return r.trace }

// Allocator returns the simulated allocator in its current state, for
// inspection (blocks, regions, statistics). It must not be modified, and
// in follow mode it may be replaced by another object after a Step.
func (r *Replay) Allocator() *Allocator { return r.a }

// Config is the configuration being simulated.
func (r *Replay) Config() Config { return r.cfg }

// Step applies the next allocator call: one entry, or the entries one
// call produced together. It returns io.EOF when the trace is done.
func (r *Replay) Step() error {
	if r.pos >= len(r.trace) {
		return io.EOF
	}
	if r.opts.Mode == WhatIf {
		r.stepWhatIf()
	} else {
		r.stepFollow()
	}
	if n := r.opts.CheckEvery; n > 0 && (r.pos%n == 0 || r.pos == len(r.trace)) {
		if err := r.a.CheckInvariants(); err != nil {
			return fmt.Errorf("allocator: after trace entry %d: %w", r.pos-1, err)
		}
	}
	return nil
}

// RunTo applies every entry up to and including entry i (Pos() > i
// afterwards, or the end of the trace).
func (r *Replay) RunTo(i int) error {
	for r.pos <= i {
		if err := r.Step(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
	return nil
}

// Run applies the rest of the trace and returns the result.
func (r *Replay) Run() (*ReplayResult, error) {
	if err := r.RunTo(len(r.trace)); err != nil {
		return nil, err
	}
	return r.Result(), nil
}

// Result finishes the replay and returns what it found: it applies what
// is left of the trace (without invariant checks; use Run for those) and,
// in follow mode, compares the final state with the snapshot and then
// reconciles them. Later calls return the same result; stepping is over.
func (r *Replay) Result() *ReplayResult {
	if r.done {
		return r.res
	}
	for r.pos < len(r.trace) {
		r.Step()
	}
	r.done = true
	if r.opts.Mode == Follow {
		f := r.res.Fidelity
		f.ForcedOperations = r.a.ForcedOperations() + r.forcedOOMs
		r.res.Agreement = r.agree()
		r.reconcile()
	}
	for _, e := range r.trace {
		if e.Action == snapshot.ActionOOM {
			r.res.OOMs.Recorded++
		}
	}
	st := r.a.Stats()
	r.res.OOMs.Simulated = int(st.NumOOMs)
	r.res.Stats = st
	r.res.MemoryStats = r.a.MemoryStats()
	r.res.PeakAllocated = r.peakAlloc
	r.res.PeakReserved = r.peakRes
	r.res.FragmentationAtPeakReserved = r.frag
	r.res.SegmentsCreated = st.NumDeviceAlloc
	r.res.FinalSegments = r.a.numSegments()
	r.res.History.Note = historyNote(&r.res.History)
	return r.res
}

func historyNote(h *History) string {
	switch h.Coverage {
	case CoverageNone:
		return "no trace: the figures are the final state; peaks equal the current values and the allocated/freed/num_* counters are unknown (0)"
	case CoveragePartial:
		return fmt.Sprintf("the trace starts mid-run: %d segments and %d live blocks existed before its first entry; peaks are over the recorded window only, and the allocated/freed/num_* counters count only the window",
			h.PreexistingSegments, h.PreexistingBlocks)
	}
	return "the trace starts from an empty allocator: peaks and counters cover the whole recorded run"
}

// finish completes entries i..j: the state is the one after them.
func (r *Replay) finish(i, j int) {
	r.a.hist.ring.clear()
	st := &r.a.stats
	// Segments kept outside the simulation since the start add their
	// constant figures (Allocator.AddUnmodelled).
	kept := &r.a.outside.fromStart
	if p := st.AllocatedBytes[PoolAll].Peak + kept.AllocatedBytes[PoolAll].Current; p > r.peakAlloc.Bytes {
		r.peakAlloc = PeakAt{Bytes: p, Index: j, TimeUS: r.trace[j].TimeUS}
	}
	if p := st.ReservedBytes[PoolAll].Peak + kept.ReservedBytes[PoolAll].Current; p > r.peakRes.Bytes {
		r.peakRes = PeakAt{Bytes: p, Index: j, TimeUS: r.trace[j].TimeUS}
		cur := r.a.Stats()
		r.frag = fragmentation(&cur)
	}
	if r.opts.OnEvent != nil {
		for k := i; k <= j; k++ {
			r.opts.OnEvent(k, r.trace[k], r.a)
		}
	}
	r.pos = j + 1
}

func isSegmentEvent(a snapshot.Action) bool {
	switch a {
	case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentFree, snapshot.ActionSegmentMap, snapshot.ActionSegmentUnmap:
		return true
	}
	return false
}

func isRelease(a snapshot.Action) bool {
	return a == snapshot.ActionSegmentFree || a == snapshot.ActionSegmentUnmap
}

// segmentAddress is the follow mode's address policy: the k-th segment
// the simulator creates for an allocation takes the address of the
// segment_alloc recorded before that allocation; a new expandable
// reservation starts at the first recorded segment_map that lies outside
// every known reservation.
func (r *Replay) segmentAddress(req SegmentRequest) (uint64, bool) {
	for k := r.win[0]; k <= r.win[1] && k < len(r.trace); k++ {
		e := r.trace[k]
		switch {
		case !req.Expandable && e.Action == snapshot.ActionSegmentAlloc:
			return e.Addr, true
		case req.Expandable && e.Action == snapshot.ActionSegmentMap && r.cur.regions.find(e.Addr) == nil:
			return e.Addr, true
		}
	}
	return 0, false
}

// ---- follow mode ----

func (r *Replay) stepFollow() {
	i := r.pos
	e := r.trace[i]
	switch e.Action {
	case snapshot.ActionAlloc, snapshot.ActionOOM, snapshot.ActionSegmentAlloc, snapshot.ActionSegmentFree,
		snapshot.ActionSegmentMap, snapshot.ActionSegmentUnmap:
		if j := r.callEnd(i); j >= 0 {
			r.followMalloc(i, j)
		} else {
			r.followRelease(i)
		}
	case snapshot.ActionFreeRequested:
		if r.a.Allocated(e.Addr) {
			r.a.FreeDeferred(e.Addr, e.Stack)
		} else {
			r.unapplied(i, "nothing is allocated at that address")
		}
		r.finish(i, i)
	case snapshot.ActionFreeCompleted, snapshot.ActionFree:
		if r.syncedByCall(i) {
			return
		}
		switch {
		case r.a.pending.get(e.Addr) != nil:
			r.a.CompletePendingFree(e.Addr, e.Stack)
		case r.a.Allocated(e.Addr):
			// Its free_requested was not recorded.
			r.a.Free(e.Addr, e.Stack)
		default:
			r.unapplied(i, "nothing is allocated at that address")
		}
		r.finish(i, i)
	case snapshot.ActionSnapshot:
		if r.a.stats.ActiveBytes[PoolAll].Current == e.Size {
			r.res.Fidelity.SnapshotMarkers.Reproduced++
		}
		r.finish(i, i)
	default:
		r.finish(i, i)
	}
}

// callEnd returns the index of the alloc or oom entry that ends the
// allocator call starting at i (segment events, then the alloc or oom),
// or -1 if the segment events at i are not followed by one. The frees a
// fallback's synchronization completes (free_completed) may sit between
// the segment events.
func (r *Replay) callEnd(i int) int {
	k := i
	for k < len(r.trace) && (isSegmentEvent(r.trace[k].Action) || k > i && r.trace[k].Action == snapshot.ActionFreeCompleted) {
		k++
	}
	if k < len(r.trace) && (r.trace[k].Action == snapshot.ActionAlloc || r.trace[k].Action == snapshot.ActionOOM) {
		return k
	}
	return -1
}

// sameEntries compares what the simulator produced with recorded entries:
// action, address (device_free is not compared for ooms) and size, in
// order. The free_completed entries of a synchronization are compared as
// a set: PyTorch walks its per-stream event queues in hash-map order,
// while the replay holds every pending free in one queue.
func sameEntries(got, want []snapshot.TraceEntry) bool {
	if len(got) != len(want) {
		return false
	}
	var gotFrees, wantFrees []snapshot.TraceEntry
	gi := 0
	for _, w := range want {
		if w.Action == snapshot.ActionFree {
			w.Action = snapshot.ActionFreeCompleted
		}
		if w.Action == snapshot.ActionFreeCompleted {
			wantFrees = append(wantFrees, w)
			continue
		}
		for gi < len(got) && got[gi].Action == snapshot.ActionFreeCompleted {
			gotFrees = append(gotFrees, got[gi])
			gi++
		}
		if gi == len(got) {
			return false
		}
		g := got[gi]
		gi++
		if g.Action != w.Action || g.Size != w.Size || (g.Action != snapshot.ActionOOM && g.Addr != w.Addr) {
			return false
		}
	}
	gotFrees = append(gotFrees, got[gi:]...)
	if len(gotFrees) != len(wantFrees) {
		return false
	}
	byAddr := func(x, y snapshot.TraceEntry) int {
		switch {
		case x.Addr < y.Addr:
			return -1
		case x.Addr > y.Addr:
			return 1
		}
		return 0
	}
	slices.SortFunc(gotFrees, byAddr)
	slices.SortFunc(wantFrees, byAddr)
	for i, g := range gotFrees {
		if g.Action != snapshot.ActionFreeCompleted || g.Addr != wantFrees[i].Addr || g.Size != wantFrees[i].Size {
			return false
		}
	}
	return true
}

// followMalloc handles the allocator call i..j (j is its alloc or oom).
func (r *Replay) followMalloc(i, j int) {
	want := r.trace[i : j+1]
	e := r.trace[j]
	isAlloc := e.Action == snapshot.ActionAlloc
	// The common cases are predicted without trying the call on a copy.
	if isAlloc {
		out, addr, allocSize := r.a.predictMalloc(e.Size, r.streams.of(&e))
		ok := false
		switch out {
		case outcomeCacheHit:
			ok = i == j && addr == e.Addr
		case outcomeNewSegment:
			s := r.trace[i]
			ok = j == i+1 && s.Action == snapshot.ActionSegmentAlloc && s.Size == allocSize && s.Addr == e.Addr && r.streams.of(&s) == r.streams.of(&e)
		}
		if ok {
			r.win, r.cur = [2]int{i, j}, r.a
			_, err := r.a.Malloc(e.Size, r.streams.of(&e), e.Stack)
			if got := r.a.Trace(); err == nil && sameEntries(got, want) {
				r.matched(i, j)
				return
			}
			// The prediction said otherwise; the state is the
			// simulator's. Not expected: predictMalloc mirrors Malloc.
			r.diverged(i, j, func() string { return fmt.Sprintf("predicted placement not reproduced (%v)", err) })
			r.finish(i, j)
			return
		}
		// A known outcome that differs from the recording needs no trial
		// on a copy: the call would produce the predicted entries, which
		// are not the recorded ones. Copying the whole state per call made
		// traces with many such calls quadratic.
		if out != outcomeUnknown {
			if isRelease(r.trace[i].Action) && r.tryEmptyCache(i, j-1) {
				return
			}
			r.force(i, j, func() string { return r.describePrediction(out, addr, allocSize) })
			return
		}
	}
	ok, got, err := r.tryCall(i, j)
	if ok {
		return
	}
	// A leading release run the call does not produce itself is the
	// program's empty_cache().
	if isRelease(r.trace[i].Action) && r.tryEmptyCache(i, j-1) {
		return
	}
	r.force(i, j, func() string { return "simulator: " + describeEntries(got, err) })
}

// tryCall runs the allocation of entry j on a copy of the allocator and
// keeps the copy if the call produced exactly entries i..j.
func (r *Replay) tryCall(i, j int) (bool, []snapshot.TraceEntry, error) {
	e := r.trace[j]
	c := r.a.clone()
	c.orderHeldFrees(r.trace[i : j+1])
	r.win, r.cur = [2]int{i, j}, c
	_, err := c.Malloc(e.Size, r.streams.of(&e), e.Stack)
	var oom *OOMError
	got := c.Trace()
	if (err == nil || errors.As(err, &oom)) && sameEntries(got, r.trace[i:j+1]) {
		r.a = c
		r.matched(i, j)
		return true, nil, nil
	}
	return false, got, err
}

// syncedByCall handles a run of free_completed entries that the
// allocation after them produced itself: when cudaMalloc fails, the
// fallback synchronizes every stream (completing the frees that waited
// for events) before it releases cached segments and retries, and the
// blocks freed that way are not used by the retry. It tries that reading
// only where a fallback is possible at all: a release or an oom follows,
// or a new segment under a finite capacity.
func (r *Replay) syncedByCall(i int) bool {
	if r.a.pending.get(r.trace[i].Addr) == nil {
		return false
	}
	k := i
	for k < len(r.trace) && r.trace[k].Action == snapshot.ActionFreeCompleted {
		k++
	}
	if k == len(r.trace) {
		return false
	}
	j := r.callEnd(k)
	if j < 0 {
		return false
	}
	fallback := r.trace[j].Action == snapshot.ActionOOM
	for _, f := range r.trace[k:j] {
		fallback = fallback || isRelease(f.Action) || r.a.dev.capacity > 0 && isSegmentEvent(f.Action)
	}
	if !fallback {
		return false
	}
	ok, _, _ := r.tryCall(i, j)
	return ok
}

// tryEmptyCache tries a user empty_cache() for the release run starting
// at i (ending at most at last); it keeps it if it produced exactly a
// prefix of the run.
func (r *Replay) tryEmptyCache(i, last int) bool {
	c := r.a.clone()
	c.EmptyCache(r.trace[i].Stack)
	got := c.Trace()
	if k := len(got); k > 0 && i+k-1 <= last && sameEntries(got, r.trace[i:i+k]) {
		r.a = c
		r.res.Fidelity.EmptyCacheCalls++
		r.emptyCacheAt[i] = true
		r.res.Fidelity.SegmentEvents.Reproduced += k
		r.finish(i, i+k-1)
		return true
	}
	return false
}

// followRelease handles segment events no alloc or oom follows.
func (r *Replay) followRelease(i int) {
	k := i
	for k < len(r.trace) && isSegmentEvent(r.trace[k].Action) {
		k++
	}
	if isRelease(r.trace[i].Action) {
		if r.tryEmptyCache(i, k-1) {
			return
		}
		r.emptyCacheAt[i] = true
	}
	r.force(i, k-1, func() string { return "no allocator call explains these segment events" })
}

func (r *Replay) matched(i, j int) {
	f := r.res.Fidelity
	for _, e := range r.trace[i : j+1] {
		switch {
		case isSegmentEvent(e.Action):
			f.SegmentEvents.Reproduced++
		case e.Action == snapshot.ActionAlloc:
			f.Placements.Reproduced++
		}
	}
	r.finish(i, j)
}

const maxExamples = 10

// wantExample reports whether another example is kept; the text of one is
// made only then (formatting one per divergence dominated the replay of
// traces that diverge on most entries).
func (r *Replay) wantExample() bool {
	return len(r.res.Fidelity.Examples) < maxExamples
}

func (r *Replay) example(s string) {
	if r.wantExample() {
		r.res.Fidelity.Examples = append(r.res.Fidelity.Examples, s)
	}
}

// diverged counts a divergence; what describes the simulator's decision.
func (r *Replay) diverged(i, j int, what func() string) {
	r.res.Fidelity.Divergences++
	if r.wantExample() {
		r.example(fmt.Sprintf("entries %d-%d (recorded %s): %s", i, j, describeEntries(r.trace[i:j+1], nil), what()))
	}
}

// unapplied counts an entry the state could not take; why (a string or an
// error) is formatted only into a kept example.
func (r *Replay) unapplied(i int, why any) {
	e := r.trace[i]
	if r.res.Fidelity != nil {
		r.res.Fidelity.Unapplied++
		if r.wantExample() {
			r.example(fmt.Sprintf("entry %d (%s %#x, %d bytes) not applied: %v", i, e.Action, e.Addr, e.Size, why))
		}
	}
}

// force applies the recorded entries i..j with the Force* primitives
// after the simulator decided otherwise.
func (r *Replay) force(i, j int, what func() string) {
	r.diverged(i, j, what)
	a := r.a
	// The pool of the segment a call creates follows from its request.
	pool := snapshot.LargePool
	if last := r.trace[j]; last.Action == snapshot.ActionAlloc || last.Action == snapshot.ActionOOM {
		if r.cfg.RoundSize(last.Size) <= SmallSize {
			pool = snapshot.SmallPool
		}
	}
	for k := i; k <= j; k++ {
		e := r.trace[k]
		var err error
		switch e.Action {
		case snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
			err = a.ForceRelease(e.Addr, e.Size, e.Stack)
		case snapshot.ActionSegmentAlloc:
			p := pool
			if r.trace[j].Action != snapshot.ActionAlloc && r.trace[j].Action != snapshot.ActionOOM {
				p = segmentPoolOfSize(e.Size)
			}
			err = a.ForceSegment(e.Addr, e.Size, r.streams.of(&e), p, e.Stack)
		case snapshot.ActionSegmentMap:
			err = a.ForceMap(e.Addr, e.Size, r.streams.of(&e), pool, e.Stack)
		case snapshot.ActionAlloc:
			err = a.ForceMalloc(e.Addr, e.Size, 0, r.streams.of(&e), e.Stack)
		case snapshot.ActionOOM:
			a.forceOOM(e, r.streams.of(&e))
			r.forcedOOMs++
		}
		if err != nil {
			r.unapplied(k, err)
		}
	}
	r.finish(i, j)
}

// forceOOM records a recorded out-of-memory error the simulator did not
// reproduce: the oom trace entry and num_ooms.
func (a *Allocator) forceOOM(e snapshot.TraceEntry, stream int64) {
	a.record(snapshot.ActionOOM, e.Addr, e.Size, stream, a.context(ContextState, e.Stack))
	a.stats.NumOOMs++
}

func (r *Replay) describePrediction(out mallocOutcome, addr uint64, allocSize int64) string {
	if out == outcomeCacheHit {
		return fmt.Sprintf("simulator: alloc %#x from the cache", addr)
	}
	return fmt.Sprintf("simulator: a new %d-byte segment", allocSize)
}

func describeEntries(es []snapshot.TraceEntry, err error) string {
	var s string
	for i, e := range es {
		if i == 4 {
			s += fmt.Sprintf(" ... (%d entries)", len(es))
			break
		}
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %#x %d", e.Action, e.Addr, e.Size)
	}
	if err != nil {
		var oom *OOMError
		if !errors.As(err, &oom) {
			s += fmt.Sprintf(" (error: %v)", err)
		}
	}
	if s == "" {
		s = "nothing"
	}
	return s
}

// ---- what-if mode ----

func (r *Replay) stepWhatIf() {
	i := r.pos
	e := r.trace[i]
	a := r.a
	switch e.Action {
	case snapshot.ActionAlloc:
		addr, err := a.Malloc(e.Size, r.streams.of(&e), e.Stack)
		if err != nil {
			r.failed[e.Addr] = true
			delete(r.simAddr, e.Addr)
		} else {
			r.simAddr[e.Addr] = addr
			delete(r.failed, e.Addr)
		}
	case snapshot.ActionFreeRequested:
		if sa, ok := r.simAddr[e.Addr]; ok && a.Allocated(sa) {
			a.FreeDeferred(sa, e.Stack)
		}
	case snapshot.ActionFreeCompleted, snapshot.ActionFree:
		if r.failed[e.Addr] {
			delete(r.failed, e.Addr)
			break
		}
		if sa, ok := r.simAddr[e.Addr]; ok {
			switch {
			case a.pending.get(sa) != nil:
				a.CompletePendingFree(sa, e.Stack)
			case a.Allocated(sa):
				a.Free(sa, e.Stack)
			}
			delete(r.simAddr, e.Addr)
		}
	case snapshot.ActionOOM:
		// The request failed for real; under other settings it may not.
		// The program went on without it, so a success is freed at once.
		if addr, err := a.Malloc(e.Size, r.streams.of(&e), e.Stack); err == nil {
			a.Free(addr, snapshot.NoStack)
		}
	case snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
		if r.emptyCacheAt[i] {
			a.EmptyCache(e.Stack)
		}
	}
	r.finish(i, i)
}

// orderHeldFrees puts the frees held for the replay (FreeDeferred) in the
// order the recorded free_completed entries complete them, so that a
// synchronization inside the next call frees (and merges) them in the
// recorded order; PyTorch's own order follows its per-stream event queues
// in hash-map order, which the trace shows and the replay cannot know.
func (a *Allocator) orderHeldFrees(entries []snapshot.TraceEntry) {
	var q *streamQueue
	for _, s := range a.streams {
		if s.stream == heldStream {
			q = s
		}
	}
	if q == nil || len(q.events) < 2 {
		return
	}
	rank := make(map[uint64]int)
	for _, e := range entries {
		if e.Action == snapshot.ActionFreeCompleted {
			if _, ok := rank[e.Addr]; !ok {
				rank[e.Addr] = len(rank)
			}
		}
	}
	if len(rank) == 0 {
		return
	}
	slices.SortStableFunc(q.events, func(x, y event) int {
		rx, okx := rank[x.b.addr]
		ry, oky := rank[y.b.addr]
		switch {
		case okx && oky:
			return rx - ry
		case okx:
			return -1
		case oky:
			return 1
		}
		return 0
	})
}
