package replay

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/memstat/memstat/pkg/allocator"
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

// Mode selects how a Replay treats the recorded decisions.
type Mode uint8

const (
	// Follow reproduces the recorded run and measures fidelity.
	Follow Mode = iota
	// WhatIf simulates the recorded requests under other settings.
	WhatIf
)

func (m Mode) String() string {
	if m == WhatIf {
		return "what-if"
	}
	return "follow"
}

// Options configure a Replay.
type Options struct {
	// Device is the device ordinal whose trace and segments are replayed.
	Device int
	// Config is the allocator configuration to simulate. nil: the one the
	// snapshot records in allocator_settings, or the defaults of Version
	// for files without settings. A Config carries its own Version, which
	// then wins over the Version field.
	Config *allocator.Config
	// Version is the PyTorch release to simulate; 0 guesses it from the
	// file's schema (GuessVersion).
	Version allocator.Version
	// Capacity is the device memory the simulator may obtain. 0 derives
	// it from the trace's first oom entry (device_free plus the memory
	// reserved at that entry), or leaves it unlimited without one.
	Capacity int64
	// TotalMemory is cudaDeviceProp.totalGlobalMem, which sizes the
	// address reservations of expandable segments. 0 infers an upper
	// bound from the spacing of the recorded reservations, capped by the
	// capacity (or 80 GiB).
	TotalMemory int64
	Mode        Mode
	// OnEvent, if set, is called after each trace entry has been applied,
	// with the allocator in the state after it. The entries an allocator
	// call produces together (a segment_free run or segment_alloc before
	// the alloc they serve) are applied together, so OnEvent sees the same
	// state for each of them. The allocator must not be modified.
	OnEvent func(i int, e snapshot.TraceEntry, a *allocator.Allocator)
	// CheckEvery runs CheckInvariants after every n-th entry (0: never);
	// a failure stops the replay with an error.
	CheckEvery int
	// KeepStart keeps the rebuilt starting state after it is seeded, for a
	// follow replay whose Recording what-if replays start from.
	KeepStart bool
	// RuntimeSettings says the program called
	// torch.cuda.memory._set_allocator_settings: expandable_segments may
	// have been switched where the recording shows no new segment, so a
	// follow replay (2.1+) treats every split decision that depends on it
	// as unknown from the start (runtime.go), tries the other setting
	// where a call diverges (an oom the recorded setting would have
	// served included), and prints the figures built on block sizes as
	// bounds. Without it the replay assumes no switch the segments do not
	// show, and says so where that matters (Result.Assumptions).
	RuntimeSettings bool
	// Captures says the program captured CUDA graphs or allocated in a
	// torch.cuda.MemPool (use_mem_pool, 2.5+): an oom during either had
	// no retry, and a pool released before the snapshot (or, at 2.9+, one
	// that never named itself in the trace) leaves no mark where the
	// default pools would have made the same calls. With it a follow
	// replay takes private pools as possible (poolsPossible): every oom's
	// retry counts at the upper end of num_alloc_retries only, and before
	// 2.9 the private pools' peaks are bounds. Without it the replay
	// assumes none was underway at an oom the recording does not tie to
	// a pool, and says so (Result.Assumptions, assumeNoCapture). The
	// simulation is the same either way: only the figures' bounds differ.
	Captures bool
	// StartScan, if set, is the start rebuild's pass begun while the
	// snapshot was read (NewStartScan, snapshot.LoadOptions.TraceGrown):
	// a follow replay whose trace continues what it scanned takes it and
	// scans only the rest; any replay stops it. The result is the same.
	StartScan *StartScan
	// Recording, for a WhatIf replay, is what a follow replay of the same
	// device, release and total memory (no Config or Capacity of its own)
	// found (Replay.Recording): the what-if replay starts from it instead
	// of running that follow replay first. It is only read, so what-if
	// replays may share one.
	Recording *Recording
}

// Recording is what a what-if replay takes from a follow replay of the
// recording that applied every entry: the starting state rebuilt under
// the recorded settings, the pool of each call, where the program emptied
// the cache, the capacity.
type Recording struct {
	snap             *snapshot.Snapshot
	opts             Options
	start            startState
	pools            callPools
	emptyCacheAt     map[int]bool
	capacity         int64
	capacitySource   string
	preexistingBytes int64
	// live: the follow replay is still running (LiveRecording); pools
	// and emptyCacheAt are its findings before its first step.
	live *liveShare
}

// Recording returns what what-if replays of this follow replay's
// recording start from (Options.Recording): a command that follows the
// recording and then simulates other settings replays the recording once,
// not once more per setting. The replay must be a follow replay made with
// KeepStart that has applied every entry (Run, Result).
func (r *Replay) Recording() (*Recording, error) {
	if r.opts.Mode != Follow || !r.opts.KeepStart {
		return nil, errors.New("replay: a recording comes from a follow replay made with KeepStart")
	}
	if r.pos < r.tw.n {
		return nil, fmt.Errorf("replay: the follow replay applied %d of %d entries", r.pos, r.tw.n)
	}
	if r.live != nil {
		return nil, errors.New("replay: the recording of this follow replay was taken live (LiveRecording)")
	}
	return r.recording(), nil
}

func (r *Replay) recording() *Recording {
	o := r.opts
	o.OnEvent = nil // not kept alive by what-if replays
	return &Recording{snap: r.snap, opts: o, start: r.start, pools: r.pools, emptyCacheAt: r.emptyCacheAt,
		capacity: r.res.Capacity, capacitySource: r.res.CapacitySource, preexistingBytes: r.res.History.PreexistingBytes}
}

// fits reports why rec cannot start the what-if replay of s with o, if
// it cannot: it must come from the follow replay New would run itself.
func (rec *Recording) fits(s *snapshot.Snapshot, o Options) error {
	f := rec.opts
	if rec.snap != s || f.Device != o.Device || f.Version != o.Version || f.TotalMemory != o.TotalMemory || f.Config != nil || f.Capacity != 0 {
		return errors.New("replay: the recording given is of another snapshot, device, release or setting than the what-if replay")
	}
	return nil
}

// Replay is a step-able replay of one device's trace.
type Replay struct {
	snap  *snapshot.Snapshot
	opts  Options
	cfg   allocator.Config
	trace *snapshot.Trace
	// tw reads trace for the step loop (decoded around the position).
	tw traceWindow
	// streams resolves the trace entries' streams (snapshot.Contexts).
	streams streamTable
	final   []*snapshot.Segment
	a       *allocator.Allocator
	pos     int
	done    bool
	// res is allocated apart from the Replay: a caller that keeps only
	// the result (stats over many files) must not keep the replay's
	// allocator state and trace alive with it.
	res   *Result
	start startState

	// win is the window of entries the allocator call being tried may
	// produce; the segment-address hook reads it. cur is the allocator
	// the call runs on (the replay's, or a trial clone).
	win [2]int
	cur *allocator.Allocator
	// seeded holds the address ranges of the starting state's segments.
	seeded spans
	// forcedOOMs counts recorded ooms applied by force; capacityOOMs
	// those of them that tell nothing of private pools (capacityOOM).
	forcedOOMs   int64
	capacityOOMs int
	// emptyCacheAt marks the entries where the program called
	// empty_cache() (follow mode finds them; what-if replays them).
	emptyCacheAt map[int]bool

	// What-if: simulated address of each live recorded allocation, and
	// the recorded allocations that ran out of memory.
	simAddr addrPairs
	failed  map[uint64]bool
	// ahead is the first entry whose memory the what-if's step loop has
	// not asked for in advance yet (touchAhead); touched sums what those
	// reads found, so that they are made.
	ahead   int
	touched uint64

	peakAlloc, peakRes PeakAt
	// startStats: memory_stats after the starting state was seeded
	// (follow mode; unappliedBounds).
	startStats []allocator.KeyValue
	// settingsUnknown: the file records no allocator settings and the
	// caller named none; the replay assumes the defaults for what the
	// recording does not show (settingsBounds).
	settingsUnknown bool
	// atPeak is the reserved memory when allocated memory first reached
	// peakAlloc.
	atPeak Unused

	// pools says which pool each recorded call went to (see pools).
	pools callPools
	// mapPools: the pools of segment_map entries of a trace that names no
	// pool, known from the reservation they share with a map a final
	// segment covers (inferTotalMemory).
	mapPools map[int]snapshot.PoolID
	// unnamedPools counts the pools unnamedPool made.
	unnamedPools int64
	// poolUnknown: a call of a trace that names no pool, with private
	// pools, was reproduced in no pool the replay could try (tryPools),
	// or diverged: it was forced.
	poolUnknown bool

	// toggled: the recording shows expandable_segments switched at
	// runtime (runtime.go); preBlocks are then the live blocks of the
	// starting state.
	toggled   bool
	preBlocks []allocator.BlockInfo
	// splitsUnknown: Options.RuntimeSettings; the figures built on block
	// sizes (how a request was rounded, whether a block was split, which
	// blocks counted as oversize) are bounds whatever the recording shows.
	splitsUnknown bool
	// switchShown: the recording itself shows the switch (toggled without
	// the option, or a split only a switch explains).
	switchShown bool
	// kindsShown: the segments' kinds show expandable_segments switched
	// (expandableToggled).
	kindsShown bool
	// watchSplits: without the option, the replay looks for a large-pool
	// cache hit whose split decision depends on expandable_segments
	// (noteSplitDependence); dependentSplit is the first one's entry.
	watchSplits       bool
	sawDependentSplit bool
	// outside: the call being finished allocates at an address no
	// region holds (followMalloc), so it has no block to look at.
	outside bool

	// live is shared with what-if replays running beside this one
	// (LiveRecording, live.go). A follow replay publishes to it: findings
	// not yet published, and the position last published. A what-if
	// replay reads it: how much of the log it has taken, the entries it
	// may apply (below liveReady), and why it cannot go on.
	live          *liveShare
	livePending   []liveNote
	livePublished int
	liveRead      int
	liveReady     int
	liveErr       error

	// tally: what the bounds read from the whole trace (tally.go);
	// tallyAhead delivers it from the goroutine Run started.
	tally      *traceTally
	tallyAhead chan tallyOutcome
}

// New prepares the replay of device o.Device of s: it picks the
// configuration, rebuilds and seeds the starting state and derives the
// device capacity. Nothing of the trace is applied yet.
func New(s *snapshot.Snapshot, o Options) (*Replay, error) {
	r, total, follow, err := prepare(s, o)
	if err != nil {
		return nil, err
	}
	if o.Mode == Follow {
		return r, r.initFollow(total)
	}
	return r, r.initWhatIf(total, follow)
}

// prepare is New up to the simulator: the configuration, the starting
// state rebuilt (or taken from the follow recording of a what-if replay),
// the call pools and the device's total memory.
func prepare(s *snapshot.Snapshot, o Options) (r *Replay, total int64, follow *Recording, err error) {
	if o.Device < 0 {
		return nil, 0, nil, fmt.Errorf("allocator: device %d", o.Device)
	}
	r = &Replay{snap: s, opts: o, trace: s.Trace(o.Device), streams: streamsOf(s.Contexts), final: s.DeviceSegments(o.Device), res: &Result{}}
	r.tw = newTraceWindow(r.trace)
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
	label := v.String()
	if v == 0 {
		// The file's keys may allow several releases: the replay applies
		// the oldest one's rules and says which releases the file could be.
		guess := GuessVersionRange(s)
		v, label = guess.Min, guess.String()
	}
	if o.Config != nil {
		r.cfg = *o.Config
		if r.cfg.Version != v {
			label = r.cfg.Version.String()
		}
		v = r.cfg.Version
	} else {
		var notes []string
		r.cfg, notes = ConfigFromSettings(s.Settings, v)
		r.res.Warnings = append(r.res.Warnings, notes...)
		if s.Settings == nil {
			r.settingsUnknown = true
			// What the recording itself shows: expandable segments map
			// and unmap pages, and their segments say so.
			r.cfg.ExpandableSegments = v.HasExpandableSegments() && recordsExpandable(s, o.Device)
		}
	}
	if err := r.cfg.Validate(); err != nil {
		return nil, 0, nil, err
	}
	if r.cfg.Backend == "cudaMallocAsync" {
		r.res.Warnings = append(r.res.Warnings, "the recorded backend is cudaMallocAsync; the native caching allocator is simulated instead")
	}
	r.res.Device = o.Device
	r.res.Mode = o.Mode.String()
	r.res.Version = label
	r.res.Settings = r.cfg.String()

	// Follow mode rebuilds the start and derives the capacity; what-if
	// needs both too, plus where the program emptied the cache, so it runs
	// a follow replay of its own first.
	if o.Mode == WhatIf {
		if follow = o.Recording; follow != nil {
			if err := follow.fits(s, o); err != nil {
				return nil, 0, nil, err
			}
		} else {
			fo := o
			fo.Mode, fo.Config, fo.OnEvent, fo.CheckEvery = Follow, nil, nil, 0
			fo.KeepStart = true
			fo.Capacity = 0
			fr, err := New(s, fo)
			if err != nil {
				return nil, 0, nil, err
			}
			for fr.Step() == nil {
			}
			follow = fr.recording()
		}
	}
	total = o.TotalMemory
	if total == 0 {
		total = r.inferTotalMemory(false)
	}
	if follow != nil {
		// The starting state is the recording's, rebuilt under the
		// recorded settings whatever the what-if ones are.
		r.start = follow.start
	} else {
		resSize := func(page int64) int64 {
			return allocator.ReservationSize(total, page)
		}
		r.start = reconstructStart(r.cfg, r.trace, r.streams, r.final, resSize, o.StartScan)
		if o.TotalMemory == 0 && len(r.start.segments) == 0 && len(r.start.reservations) == 0 {
			// A trace from an empty allocator: every reservation it
			// uses is made in it, so its maps and unmaps tell more.
			total = r.inferTotalMemory(true)
		}
		r.startPools()
	}
	r.res.Warnings = append(r.res.Warnings, r.start.warnings...)
	switch {
	case follow != nil && follow.live != nil:
		// Its own copy: the log of the running follow replay goes in.
		r.pools, r.live = follow.pools.sharedCopy(), follow.live
	case follow != nil:
		r.pools = follow.pools
	default:
		r.pools = findCallPools(r.snap, r.trace, r.final, r.mapPools, r.poolMallocs())
	}
	return r, total, follow, nil
}

// recordsExpandable reports whether device dev's recording shows
// expandable segments: a segment_map or segment_unmap entry, or a final
// segment marked expandable.
func recordsExpandable(s *snapshot.Snapshot, dev int) bool {
	if tr := s.Trace(dev); tr.Count(snapshot.ActionSegmentMap)+tr.Count(snapshot.ActionSegmentUnmap) > 0 {
		return true
	}
	for _, seg := range s.DeviceSegments(dev) {
		if seg.Expandable {
			return true
		}
	}
	return false
}

// inferTotalMemory bounds totalGlobalMem by the spacing of the expandable
// reservations: reservations do not overlap, and the lowest address known
// of each (stream, pool) -- its first recorded segment_map, or the lowest
// of its final segments -- is at or after its base, so the next one's
// lowest known address lies at least a reservation (1 1/8 of the device
// memory, in whole pages) further on. Without a trace the final segments
// alone bound it; else a guessed 80 GiB would make a reservation that
// swallows its neighbours.
func (r *Replay) inferTotalMemory(fromEmpty bool) int64 {
	limit := int64(allocator.DefaultTotalMemory)
	type key = reservationKey
	bases := map[key]uint64{}
	var largestMap int64
	note := func(k key, addr uint64) {
		if b, ok := bases[k]; !ok || addr < b {
			bases[k] = addr
		}
	}
	// mapKey is the reservation key of the segment_map at entry i: its
	// stream, its pool kind and its private pool (pool_id, or that of
	// the final segment holding it).
	// poolsUnnamed: a trace that names no pool (before 2.9) of a
	// recording with private pools, which map expandable segments of
	// their own (2.4+; before, every map is the default pools'). A map
	// no final segment covers may
	// then be any pool's: mapKey gives it the default pools, and the
	// reservation walk lets it join a reservation of its stream and kind
	// whatever that one's pool (the pool a map has is its reservation's).
	poolsUnnamed := !r.snap.Features.TracePoolID && r.cfg.Version.PrivatePoolsExpandable() && slices.ContainsFunc(r.final, func(f *snapshot.Segment) bool { return !f.PoolID.IsDefault() })
	firstMap := map[key]int{}
	// The passes over segment_map entries are skipped where there is none.
	hasMaps := r.trace.Count(snapshot.ActionSegmentMap) > 0
	for i, e := range r.trace.All() {
		if !hasMaps {
			break
		}
		if e.Action != snapshot.ActionSegmentMap {
			continue
		}
		largestMap = max(largestMap, e.Size)
		k, _ := r.mapKeyOf(i, e)
		if _, ok := bases[k]; !ok {
			bases[k] = e.Addr
			firstMap[k] = i
		}
	}
	mapped := maps.Clone(bases)
	for _, s := range r.final {
		if s.Expandable {
			note(key{s.Stream, s.Pool == snapshot.SmallPool, s.PoolID}, s.Address)
		}
	}
	type base struct {
		addr uint64
		page int64
	}
	pageOf := func(k key) int64 {
		if k.small {
			return allocator.SmallBuffer
		}
		return allocator.LargeBuffer
	}
	var addrs []base
	for k, b := range bases {
		addrs = append(addrs, base{b, pageOf(k)})
	}
	bound := func(gap, page int64) {
		gap = gap / page * page
		if t := gap / 9 * 8; t > 0 && t < limit {
			limit = t
		}
	}
	gaps := func() {
		slices.SortFunc(addrs, func(x, y base) int { return cmp.Compare(x.addr, y.addr) })
		for i := 1; i < len(addrs); i++ {
			// The lower reservation is total + total/8 rounded up to
			// its own pages (2 MiB small, 20 MiB large) and fits in the
			// gap, so total*9/8 <= the gap rounded down to those pages.
			// Rounding by 20 MiB whatever the pool made small
			// reservations too short, not rounding at all made them too
			// long; either way a recorded new reservation was taken for
			// a map inside an old one.
			bound(int64(addrs[i].addr-addrs[i-1].addr), addrs[i-1].page)
		}
	}
	gaps()
	// From an empty allocator (every reservation made in the trace): a
	// (stream, pool) may release a reservation (release_blocks frees one
	// it unmapped entirely) and make new ones, and an allocation that ran
	// out of memory may leave a new reservation that is mapped only
	// later. Walking the maps and unmaps with the reservation sizes the
	// bound allows (too large, never too small) finds more bases: a map
	// that is not inside a live reservation of its (stream, pool) is the
	// first map of a new reservation, at its base. Each base is one more
	// gap, a tighter bound, which may show more new reservations.
	found := map[uint64]bool{}
	for _, b := range addrs {
		found[b.addr] = true
	}
	passes := 0
	for fromEmpty && (hasMaps || r.trace.Count(snapshot.ActionSegmentUnmap) > 0) {
		added := false
		var w reservationWalk
		var all []*walkedReservation
		for i, e := range r.trace.All() {
			switch e.Action {
			case snapshot.ActionSegmentUnmap:
				w.unmap(e.Addr, e.Size)
			case snapshot.ActionSegmentMap:
				kk, known := r.mapKeyOf(i, e)
				k := key(kk)
				res := w.containing(e.Addr)
				inside := res != nil && e.Addr < res.base+uint64(allocator.ReservationSize(limit, pageOf(k)))
				switch {
				case inside && res.key == k:
				case inside && poolsUnnamed && (!known || !res.known) && res.key.(key).stream == k.stream && res.key.(key).small == k.small:
					// One of the two is of a pool not known: the map
					// is in the reservation, of its pool.
					if known {
						res.key, res.known = k, true
					}
				default:
					res = w.reserve(e.Addr, k)
					res.known = known || !poolsUnnamed
					all = append(all, res)
					if !found[e.Addr] {
						found[e.Addr] = true
						addrs = append(addrs, base{e.Addr, pageOf(k)})
						added = true
					}
				}
				res.maps = append(res.maps, i)
				w.mapIn(res, e.Addr, e.Size)
			}
		}
		if poolsUnnamed {
			// The pool of each map whose reservation holds a map of a
			// known pool (findCallPools routes it there).
			r.mapPools = map[int]snapshot.PoolID{}
			for _, res := range all {
				if res.known {
					for _, i := range res.maps {
						r.mapPools[i] = res.key.(key).pool
					}
				}
			}
			// The bases are the walk's: the first map or final segment
			// of a known pool may lie inside a reservation a map of no
			// known pool began. Final segments outside every walked
			// reservation keep theirs.
			var next []base
			for _, res := range all {
				next = append(next, base{res.base, pageOf(res.key.(key))})
			}
			for _, f := range r.final {
				k := key{f.Stream, f.Pool == snapshot.SmallPool, f.PoolID}
				if f.Expandable && !slices.ContainsFunc(all, func(res *walkedReservation) bool {
					return f.Address >= res.base && f.Address < res.base+uint64(allocator.ReservationSize(limit, pageOf(res.key.(key))))
				}) {
					next = append(next, base{f.Address, pageOf(k)})
				}
			}
			slices.SortFunc(next, func(x, y base) int { return cmp.Compare(x.addr, y.addr) })
			next = slices.Compact(next)
			same := slices.Equal(next, addrs)
			addrs = next
			if passes++; same || passes > 16 {
				break
			}
			gaps()
			continue
		}
		if !added {
			break
		}
		gaps()
	}
	// A map for another (stream, pool) above a reservation's first
	// recorded map lies beyond that reservation (the driver hands out
	// rising addresses; a released reservation is not reused before the
	// replay could tell). Final segments may start past their
	// reservation's base, so they do not bound it this way.
	for i, e := range r.trace.All() {
		if !hasMaps {
			break
		}
		if e.Action != snapshot.ActionSegmentMap {
			continue
		}
		k, known := r.mapKeyOf(i, e)
		for bk, b := range mapped {
			if poolsUnnamed && bk.stream == k.stream && bk.small == k.small && (!known || bk.pool.IsDefault()) {
				// Either may be a map of the other's pool, in its
				// reservation (a default-pools key holds the maps no
				// final segment names).
				continue
			}
			if bk != key(k) && b < e.Addr {
				bound(int64(e.Addr-b), pageOf(bk))
			}
		}
	}
	// So does a cudaMalloc'd segment above it, made after that map (a
	// recording that switched expandable_segments at runtime).
	for i, e := range r.trace.All() {
		if len(mapped) == 0 {
			break
		}
		if e.Action != snapshot.ActionSegmentAlloc {
			continue
		}
		for bk, b := range mapped {
			if b < e.Addr && firstMap[bk] < i {
				bound(int64(e.Addr-b), pageOf(bk))
			}
		}
	}
	// One map lies inside one reservation of 1 1/8 x totalGlobalMem, so
	// the device was at least 8/9 of the largest map (a recording of a
	// device larger than the default).
	if need := (largestMap/9*8 + allocator.LargeBuffer - 1) / allocator.LargeBuffer * allocator.LargeBuffer; need > limit && len(addrs) < 2 {
		limit = need
	}
	return limit
}

// reservationWalk follows the expandable reservations of a trace (for
// inferTotalMemory): the live ones by base, and the mapped ranges, which
// tell which reservation an unmap belongs to.
type reservationWalk struct {
	live   []*walkedReservation // by base
	ranges []mappedRange        // by start, disjoint
}

type walkedReservation struct {
	base   uint64
	key    any // inferTotalMemory's (stream, pool kind, pool id)
	mapped int64
	// known: its key's pool is known (a map of it in a final segment);
	// maps: the segment_map entries in it.
	known bool
	maps  []int
}

// reservationKey is a segment_map's reservation key (inferTotalMemory).
type reservationKey struct {
	stream int64
	small  bool
	pool   snapshot.PoolID
}

// mapKeyOf is the reservation key of the segment_map at entry i: its
// stream, its pool kind and its private pool (pool_id, or that of the
// final segment holding it), and whether that pool is known: a trace
// that names no pool says it only for a map a final segment covers (the
// others get the default pools).
func (r *Replay) mapKeyOf(i int, e snapshot.TraceEntry) (reservationKey, bool) {
	k := reservationKey{stream: r.streams.of(&e), small: r.mapIsSmall(i)}
	if r.snap.Features.TracePoolID {
		k.pool = r.snap.Context(&e).Pool
		return k, true
	}
	if n := sort.Search(len(r.final), func(x int) bool { return r.final[x].Address > e.Addr }); n > 0 {
		if f := r.final[n-1]; f.Expandable && e.Addr < f.End() {
			k.pool = f.PoolID
			return k, true
		}
	}
	return k, false
}

type mappedRange struct {
	start, end uint64
	res        *walkedReservation
}

// containing returns the live reservation with the highest base at or
// below addr: the only one that can hold addr, reservations being
// disjoint.
func (w *reservationWalk) containing(addr uint64) *walkedReservation {
	i := sort.Search(len(w.live), func(i int) bool { return w.live[i].base > addr })
	if i == 0 {
		return nil
	}
	return w.live[i-1]
}

func (w *reservationWalk) reserve(base uint64, key any) *walkedReservation {
	res := &walkedReservation{base: base, key: key}
	i := sort.Search(len(w.live), func(i int) bool { return w.live[i].base >= base })
	if i < len(w.live) && w.live[i].base == base {
		w.live[i] = res
		return res
	}
	w.live = slices.Insert(w.live, i, res)
	return res
}

func (w *reservationWalk) mapIn(res *walkedReservation, addr uint64, size int64) {
	w.cut(addr, addr+uint64(size))
	i := sort.Search(len(w.ranges), func(i int) bool { return w.ranges[i].start >= addr })
	w.ranges = slices.Insert(w.ranges, i, mappedRange{addr, addr + uint64(size), res})
	res.mapped += size
}

// unmap takes [addr, +size) out of its reservation; a reservation left
// with nothing mapped was released (release_blocks).
func (w *reservationWalk) unmap(addr uint64, size int64) {
	i := sort.Search(len(w.ranges), func(i int) bool { return w.ranges[i].end > addr })
	if i == len(w.ranges) || w.ranges[i].start > addr {
		return
	}
	res := w.ranges[i].res
	w.cut(addr, addr+uint64(size))
	if res.mapped -= size; res.mapped <= 0 {
		if j := slices.Index(w.live, res); j >= 0 {
			w.live = slices.Delete(w.live, j, j+1)
		}
	}
}

// cut removes [lo, hi) from the mapped ranges.
func (w *reservationWalk) cut(lo, hi uint64) {
	i := sort.Search(len(w.ranges), func(i int) bool { return w.ranges[i].end > lo })
	j := i
	for j < len(w.ranges) && w.ranges[j].start < hi {
		j++
	}
	if i == j {
		return
	}
	var keep []mappedRange
	if m := w.ranges[i]; m.start < lo {
		keep = append(keep, mappedRange{m.start, lo, m.res})
	}
	if m := w.ranges[j-1]; m.end > hi {
		keep = append(keep, mappedRange{hi, m.end, m.res})
	}
	w.ranges = slices.Replace(w.ranges, i, j, keep...)
}

// mapIsSmall reports whether the segment_map at entry i serves a
// small-pool request: the pool of the allocation (or oom) it was made for.
func (r *Replay) mapIsSmall(i int) bool {
	for _, f := range r.trace.From(i + 1) {
		if f.Action == snapshot.ActionAlloc || f.Action == snapshot.ActionOOM {
			return r.cfg.RoundSize(f.Size) <= allocator.SmallSize
		}
	}
	return false
}

func (r *Replay) newAllocator(capacity, total int64, hook func(allocator.SegmentRequest) (uint64, bool)) error {
	a, err := allocator.New(r.cfg, allocator.Options{
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
		if err := r.a.SeedReservation(res.base, res.stream, res.pool, res.poolID); err != nil {
			failedRes = append(failedRes, fmt.Sprintf("reservation %#x: %v", res.base, err))
		}
	}
	// The simulator's tables of handed-out and pending blocks are sized
	// for the starting state's at once, not grown through every doubling
	// (each a rehash of every entry, cache misses each) as its blocks are
	// seeded: the sizes the doublings would reach where every segment
	// seeds, so the state and its memory are the same.
	var allocated, pending int
	for _, seg := range r.start.segments {
		for _, b := range seg.Blocks {
			switch b.State {
			case snapshot.ActiveAllocated:
				allocated++
			case snapshot.ActivePendingFree:
				pending++
			}
		}
	}
	r.a.ReserveAllocated(allocated)
	r.a.ReservePending(pending)
	var kept []string
	var keptBytes int64
	// The blocks go into the simulator's address tables once all are
	// laid out, in bulk (allocator.BeginSeedBatch): nothing below looks
	// a block up by its address.
	r.a.BeginSeedBatch(allocated, pending)
	for k, seg := range r.start.segments {
		if err := r.a.SeedSegment(seg); err != nil {
			r.a.AddUnmodelled(seg)
			kept = append(kept, fmt.Sprintf("segment %#x: %v", seg.Address, err))
			keptBytes += seg.TotalSize
		} else {
			r.seeded.add(seg.Address, seg.End())
		}
		r.res.History.PreexistingSegments++
		if !r.opts.KeepStart {
			// Seeded: its rebuilt blocks are garbage as the simulator
			// grows, not only once every segment is seeded.
			r.start.segments[k].Blocks = nil
		}
	}
	r.a.EndSeedBatch()
	switch {
	case len(kept) > 0:
		why := kept[0]
		if len(failedRes) > 0 {
			why += "; " + failedRes[0]
		}
		r.res.Warnings = append(r.res.Warnings, fmt.Sprintf("starting state: %d of %d segments (%s) could not be placed in the simulation and are kept as the snapshot has them: they count in every figure, but the trace cannot use them (first: %s)",
			len(kept), len(r.start.segments), allocator.FormatSize(keptBytes), why))
	case len(failedRes) > 0:
		r.res.Warnings = append(r.res.Warnings, fmt.Sprintf("starting state: %d expandable-segment reservations could not be placed where the rebuild put them; their segments were given reservations of their own (first: %s)",
			len(failedRes), failedRes[0]))
	}
	r.res.History.PreexistingBlocks = r.start.blocks
	r.res.History.PreexistingBytes = r.a.Stats().ReservedBytes[allocator.PoolAll].Current
}

// deriveCapacity is §16's rule: device_free at the first oom entry plus
// the memory reserved at that entry.
func (r *Replay) deriveCapacity(initial int64) (int64, string) {
	reserved := initial
	for i, e := range r.trace.All() {
		if r.trace.Count(snapshot.ActionOOM) == 0 {
			break
		}
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
	return r.seedFollow(r.followCapacity(total))
}

// followCapacity sets the device capacity of a follow replay (the
// option's or derived from the recording) and returns the total memory
// its simulator gets: what a what-if replay needs of the follow replay
// besides the starting state, known before the simulator is seeded.
func (r *Replay) followCapacity(total int64) int64 {
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
	r.res.Capacity, r.res.CapacitySource = capacity, source
	return total
}

// seedFollow makes a follow replay's simulator and seeds it with the
// rebuilt starting state (followCapacity first).
func (r *Replay) seedFollow(total int64) error {
	if err := r.newAllocator(r.res.Capacity, total, r.segmentAddress); err != nil {
		return err
	}
	r.seedStart()
	r.startStats = r.a.MemoryStats()
	if !r.opts.KeepStart {
		// Seeded: the rebuilt segments are garbage now (their blocks,
		// where the rebuild laid them out, and the segment records).
		r.start.segments, r.start.reservations = nil, nil
	}
	if err := r.a.RecordHistory(allocator.HistoryOptions{Enabled: allocator.HistoryAll, Context: allocator.ContextAll}); err != nil {
		return err
	}
	r.emptyCacheAt = make(map[int]bool)
	var first bool
	if r.toggled, first = r.expandableToggled(); r.toggled && r.a.Config().ExpandableSegments != first {
		setExpandable(r.a, first)
	}
	r.switchShown, r.kindsShown = r.toggled, r.toggled
	if r.opts.RuntimeSettings {
		// The user says the program changed settings at runtime: every
		// rounding and split decision is unknown from the start (any
		// release: max_split_size_mb and roundup_power2_divisions;
		// 2.1+: expandable_segments). With private pools the replay
		// does not follow expandable_segments segment by segment (a
		// pool's segments are cudaMalloc'd under it before 2.4), but
		// the bounds hold all the same.
		r.splitsUnknown = true
		if r.cfg.Version.HasExpandableSegments() && !r.pools.any && !r.toggled {
			r.toggled = true
			if r.a.Config().ExpandableSegments != first {
				setExpandable(r.a, first)
			}
		}
	} else if r.cfg.Version.HasExpandableSegments() && !r.toggled {
		// Without the option: note whether the recording has a cache hit
		// whose split decision depends on the setting (Assumptions).
		r.watchSplits = true
	}
	if r.toggled || r.splitsUnknown {
		r.a.Blocks(func(b allocator.BlockInfo) bool {
			if b.State == snapshot.ActiveAllocated || b.State == snapshot.ActivePendingFree {
				r.preBlocks = append(r.preBlocks, b)
			}
			return true
		})
	}
	r.res.Fidelity = &Fidelity{}
	tc := r.trace.Count
	r.res.Fidelity.SegmentEvents.Recorded = tc(snapshot.ActionSegmentAlloc) + tc(snapshot.ActionSegmentFree) + tc(snapshot.ActionSegmentMap) + tc(snapshot.ActionSegmentUnmap)
	r.res.Fidelity.Placements.Recorded = tc(snapshot.ActionAlloc)
	r.res.Fidelity.SnapshotMarkers.Recorded = tc(snapshot.ActionSnapshot)
	r.beginWindow()
	return nil
}

func (r *Replay) initWhatIf(total int64, follow *Recording) error {
	capacity, source := r.opts.Capacity, "option"
	if capacity == 0 {
		capacity, source = follow.capacity, follow.capacitySource
	}
	if r.opts.TotalMemory == 0 && capacity > 0 && capacity < total {
		total = capacity
	}
	if err := r.newAllocator(capacity, total, nil); err != nil {
		return err
	}
	r.res.Capacity, r.res.CapacitySource = capacity, source
	r.emptyCacheAt = follow.emptyCacheAt
	if follow.live != nil {
		r.emptyCacheAt = maps.Clone(follow.emptyCacheAt)
	}
	// The address map and the simulator's table of handed-out blocks are
	// sized for the starting state's live blocks at once (and the map for
	// half as many again, as the trace's allocations outnumber its frees
	// for a while), not grown through every doubling on the way: the
	// what-if replay is the longer of `memstat replay`'s two.
	live := 0
	for _, seg := range r.start.segments {
		for _, b := range seg.Blocks {
			if b.State.Active() {
				live++
			}
		}
	}
	r.simAddr.reserve(live + live/2)
	r.a.ReserveAllocated(live)
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
			r.simAddr.put(b.Address, addr)
			if b.State == snapshot.ActivePendingFree {
				r.a.FreeDeferred(addr, snapshot.NoStack)
			}
		}
	}
	r.res.History.PreexistingBytes = follow.preexistingBytes
	r.beginWindow()
	// Allocated: the starting state's copy of the snapshot's segments is
	// not read again here (the recording may still hold it for others).
	r.start.segments, r.start.reservations = nil, nil
	r.opts.Recording = nil
	return nil
}

// beginWindow makes the statistics count the recorded window only: the
// starting state is there, but its allocations are not counted as events
// of the window, and peaks start at the current values.
func (r *Replay) beginWindow() {
	r.a.ResetAccumulatedStats()
	r.a.ResetPeakStats()
	r.forcedOOMs, r.capacityOOMs = 0, 0
	r.a.ResetForcedOperations()
	r.a.MarkWindowStart()
	st := r.a.Stats()
	r.peakAlloc = PeakAt{Bytes: st.AllocatedBytes[allocator.PoolAll].Current, Index: -1}
	r.peakRes = PeakAt{Bytes: st.ReservedBytes[allocator.PoolAll].Current, Index: -1}
	r.atPeak = r.unusedNow()
	h := &r.res.History
	h.Entries = r.tw.n
	if r.tw.n > 0 {
		h.FirstTimeUS, h.LastTimeUS = r.tw.at(0).TimeUS, r.tw.at(r.tw.n-1).TimeUS
	}
	switch {
	case r.tw.n == 0:
		h.Coverage = CoverageNone
	case h.PreexistingSegments > 0 || r.start.unexplained > 0:
		h.Coverage = CoveragePartial
	default:
		h.Coverage = CoverageComplete
	}
}

// unusedNow splits the reserved memory of the current state (segments
// kept outside the simulation included).
func (r *Replay) unusedNow() Unused {
	st := r.a.SimulatedStats()
	kept, _ := r.a.UnmodelledStats()
	return NewUnused(st.ReservedBytes[allocator.PoolAll].Current+kept.ReservedBytes[allocator.PoolAll].Current,
		st.AllocatedBytes[allocator.PoolAll].Current+kept.AllocatedBytes[allocator.PoolAll].Current, r.a.CachedBytes())
}

// Len is the number of trace entries.
func (r *Replay) Len() int { return r.tw.n }

// Pos is the index of the next entry to apply (Len when all are).
func (r *Replay) Pos() int { return r.pos }

// Trace returns the trace being replayed (the snapshot's, immutable).
func (r *Replay) Trace() *snapshot.Trace { return r.trace }

// Allocator returns the simulated allocator in its current state, for
// inspection (blocks, regions, statistics). It must not be modified, and
// in follow mode it may be replaced by another object after a Step.
func (r *Replay) Allocator() *allocator.Allocator { return r.a }

// Config is the configuration being simulated.
func (r *Replay) Config() allocator.Config { return r.cfg }

// VersionLabel is the release the replay names (Result.Version): the
// one applied, or the range a file's keys allow when it was guessed.
func (r *Replay) VersionLabel() string { return r.res.Version }

// Step applies the next allocator call: one entry, or the entries one
// call produced together. It returns io.EOF when the trace is done.
func (r *Replay) Step() error {
	if r.pos >= r.tw.n {
		return io.EOF
	}
	// The previous step's spans of the trace are done with.
	r.tw.release()
	if r.opts.Mode == WhatIf {
		if r.live != nil && r.pos >= r.liveReady {
			if err := r.awaitFollow(); err != nil {
				return err
			}
		}
		r.stepWhatIf()
	} else {
		r.stepFollow()
		if r.live != nil {
			r.publish(false)
		}
	}
	if n := r.opts.CheckEvery; n > 0 && (r.pos%n == 0 || r.pos == r.tw.n) {
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
func (r *Replay) Run() (*Result, error) {
	r.startTally()
	if err := r.RunTo(r.tw.n); err != nil {
		return nil, err
	}
	return r.Result(), nil
}

// Result finishes the replay and returns what it found: it applies what
// is left of the trace (without invariant checks; use Run for those) and,
// in follow mode, compares the final state with the snapshot and then
// reconciles them. Later calls return the same result; stepping is over.
func (r *Replay) Result() *Result {
	if r.done {
		return r.res
	}
	for r.pos < r.tw.n && r.liveErr == nil {
		r.Step()
	}
	r.done = true
	if r.opts.Mode == WhatIf && r.live != nil {
		// A recording of NewLive is handed out before the follow replay
		// knows what its starting state reserves.
		if b, ok := r.awaitSeeded(); ok {
			r.res.History.PreexistingBytes = b
		}
	}
	if r.opts.Mode == Follow {
		f := r.res.Fidelity
		f.ForcedOperations = r.a.ForcedOperations() + r.forcedOOMs
		if !r.switchShown && (r.mayToggle() || r.splitsUnknown && r.toggled) && r.finalSizesDiffer() {
			r.toggled, r.switchShown = true, true
		}
		if r.toggled || r.splitsUnknown {
			r.resizeToFinal()
		}
		r.res.Agreement = r.agree()
		r.reconcile()
	}
	r.res.OOMs.Recorded = r.trace.Count(snapshot.ActionOOM)
	st := r.a.Stats()
	r.res.OOMs.Simulated = int(st.NumOOMs)
	r.res.Stats = st
	r.res.MemoryStats = r.a.MemoryStats()
	us := slices.DeleteFunc(r.a.PoolUsages(), func(u allocator.PoolUsage) bool { return isUnnamedPool(u.ID) && u.Segments == 0 })
	if r.opts.Mode == Follow && r.pools.any && !r.snap.Features.TracePoolID {
		// The trace names no pool, so the replay may hold a segment in
		// another pool than the program did; the final segments name
		// each one's pool.
		us = finalPoolUsages(r.final, us)
	}
	if reserved := r.privateReservedPeak(); len(us) > 1 || reserved > 0 {
		r.res.Pools.Final = us
		r.res.Pools.Reserved, r.res.Pools.Allocated = r.a.PrivatePoolStats()
		if r.opts.Mode == Follow && r.pools.any && !r.snap.Features.TracePoolID {
			// As the final segments name the pools (finalPoolUsages).
			r.res.Pools.Reserved.Current, r.res.Pools.Allocated.Current = 0, 0
			for _, u := range us[1:] {
				r.res.Pools.Reserved.Current += u.Reserved
				r.res.Pools.Allocated.Current += u.Allocated
			}
		}
	}
	var unapplied, runtime map[string]Bound
	if r.opts.Mode == Follow {
		// What the recording does not determine is a bound, not the
		// simulator's guess.
		if r.tw.n == 0 {
			r.res.Bounds = noTraceBounds(int64(r.a.NumSegments()), r.cfg.Version)
		} else {
			r.res.Bounds = traceBounds(r.tallied(), r.cfg.Version, r.captureReason())
			if r.toggled || r.splitsUnknown {
				runtime = r.runtimeBounds(r.preBlocks)
				maps.Copy(r.res.Bounds, runtime)
			} else if r.sawDependentSplit {
				r.res.Assumptions = append(r.res.Assumptions, assumeNoSwitch)
			}
			if r.captureReason() == "" && r.trace.Count(snapshot.ActionOOM) > 0 {
				a := assumeNoCapture
				if !r.cfg.Version.HasDeviceCounters() {
					a = assumeNoCaptureRetries
				}
				r.res.Assumptions = append(r.res.Assumptions, a)
			}
		}
		if r.settingsUnknown && !r.splitsUnknown {
			// (With runtime settings runtimeBounds has bounded these
			// figures for any history of max_split_size_mb.)
			maps.Copy(r.res.Bounds, settingsBounds(r.res.MemoryStats))
		}
		if r.tw.n > 0 && r.res.Agreement != nil && r.res.Agreement.Remaining > 0 {
			// The reconciliation left the state unlike the snapshot's
			// (a segment it could not place, entries it could not
			// apply): the current figures are the final segments' own,
			// never the replayed state's.
			r.res.MemoryStats = r.finalCurrents(r.res.MemoryStats)
		}
		if r.tw.n > 0 && r.res.Fidelity.Unapplied > 0 {
			// Last: its bounds hold whatever the state did in between,
			// where the others' may lean on the replayed state.
			unapplied = unappliedBounds(r.tallied(), r.res.Fidelity.Unapplied, r.startStats, r.res.MemoryStats, &r.res.Pools)
			maps.Copy(r.res.Bounds, unapplied)
			if r.splitsUnknown {
				// The block-size and oversize bounds of runtime
				// settings come from the trace and the final segments
				// alone, and hold here too; unapplied's lean on block
				// sizes and counters the settings of the moment made.
				// (The inactive_split ones lean on the replayed state.)
				for k, b := range runtime {
					if !strings.HasPrefix(k, "inactive_split") {
						r.res.Bounds[k] = b
					}
				}
			}
		}
		r.res.MemoryStats = applyBounds(r.res.MemoryStats, r.res.Bounds)
	}
	r.res.PeakAllocated = r.peakAlloc
	r.res.PeakReserved = r.peakRes
	r.res.AtPeak = r.atPeak
	r.res.SegmentsCreated = st.NumDeviceAlloc
	r.res.FinalSegments = r.a.NumSegments()
	if r.res.Bounds != nil {
		maps.Copy(r.res.Bounds, poolBounds(&r.res.Pools, r.namesPools(), r.poolsUnseen(), r.peakRes.Bytes, r.peakAlloc.Bytes))
		for _, k := range []string{PrivatePoolReserved, PrivatePoolAllocated} {
			if b, ok := unapplied[k]; ok {
				r.res.Bounds[k] = b
			}
		}
	}
	r.res.History.Note = historyNote(&r.res.History)
	return r.res
}

// poolMallocs says whether the recording's cudaMalloc'd segments are
// taken as private pools' though the final state shows no pool: before
// 2.4 alloc_block maps expandable segments for the default pools only
// (!p.pool->owner_PrivatePool, 2.1 to 2.3), so with expandable_segments
// on a private pool's new memory is a segment_alloc. A segment_alloc in a
// recording whose setting is on (its settings, or its segment_map entries
// where the file has no settings) is then a pool's, or the setting
// switched off at runtime. The user says the latter with RuntimeSettings;
// without it the replay assumes no switch the recording does not show
// (runtime.go) and takes those segments as the pools', released before
// the snapshot where it shows none (unnamedPool), rather than a switch.
func (r *Replay) poolMallocs() bool {
	v := r.cfg.Version
	if r.opts.RuntimeSettings || !v.HasExpandableSegments() || v.PrivatePoolsExpandable() || !r.cfg.ExpandableSegments {
		return false
	}
	if slices.ContainsFunc(r.final, func(f *snapshot.Segment) bool { return !f.Expandable && f.PoolID.IsDefault() }) {
		// The default pools' own cudaMalloc'd segment: the switch shows.
		return false
	}
	return r.trace.Count(snapshot.ActionSegmentAlloc) > 0
}

// namesPools says whether the trace names each call's pool (2.9+).
func (r *Replay) namesPools() bool {
	return r.snap.Features.TracePoolID || r.cfg.Version.TracesPoolID()
}

// poolsPossible says whether the recording allows a private pool: the
// replay saw one, or the user says the program captured graphs or used a
// MemPool (Options.Captures), or the trace names no pool (before 2.9) and
// the default pools alone do not reproduce it (a call diverged, other
// than an oom where only the device's capacity differs, capacityOOM; or
// entries could not be applied). A pool the program released before the
// snapshot leaves no segment in the final state, and its calls are the
// default pools' only where the default pools would have made the same
// decisions; a recording they reproduce call for call shows nothing a
// pool explains, and the replay takes it as one without pools unless the
// user says otherwise (assumeNoCapture).
func (r *Replay) poolsPossible() bool {
	return r.poolsSeen() || r.poolsUnseen() != ""
}

// poolsUnseen is why the recording allows a private pool it does not
// show (poolsPossible), or "" where it shows one or allows none.
func (r *Replay) poolsUnseen() string {
	if r.poolsSeen() {
		return ""
	}
	if f := r.res.Fidelity; !r.namesPools() && f != nil && (f.Divergences > r.capacityOOMs || f.Unapplied > 0) {
		return reasonPoolsVanished
	}
	if r.opts.Captures {
		return reasonCapturesOption
	}
	return ""
}

// poolsSeen says whether the recording shows a private pool: one held
// memory in the replay, or the recording names one (a final segment, a
// 2.9+ entry's pool_id: a capture whose only request failed holds no
// memory), or it has a pool's cudaMalloc beside maps (poolMallocs).
func (r *Replay) poolsSeen() bool { return r.res.Pools.Any() || r.pools.any }

// captureReason is why an oom of the recording may have had no retry (a
// capture may have been underway: traceBounds), or "" when the recording
// allows no private pool.
func (r *Replay) captureReason() string {
	if r.poolsSeen() {
		return reasonCaptureOOM
	}
	if why := r.poolsUnseen(); why != "" {
		return reasonCaptureOOM + "; " + why
	}
	return ""
}

// finalCurrents replaces the current figures of stats by those of the
// device's final segments alone, counted directly (finalSegmentCurrents).
func (r *Replay) finalCurrents(stats []allocator.KeyValue) []allocator.KeyValue {
	current := map[string]int64{}
	for _, kv := range finalSegmentCurrents(r.final, r.cfg) {
		if strings.HasSuffix(kv.Key, ".current") {
			current[kv.Key] = kv.Value
		}
	}
	for i, kv := range stats {
		if v, ok := current[kv.Key]; ok {
			stats[i].Value = v
		}
	}
	return stats
}

// finalSegmentCurrents is memory_stats() of the final segments as a
// replay of the device's final state without its trace reads it (every
// segment seeded, or kept outside the simulation where it cannot be
// seeded), counted in one pass over the segments and their blocks
// (allocator.SegmentsCurrent) instead of a second simulator: on
// torch-100MB that replay was a quarter of stats' CPU and 21 MB of its
// peak memory. Only the .current values are meaningful.
// TestFinalSegmentCurrentsMatchNoTraceReplay keeps the two equal.
func finalSegmentCurrents(final []*snapshot.Segment, cfg allocator.Config) []allocator.KeyValue {
	st := allocator.SegmentsCurrent(final, cfg.MaxSplitSize)
	return st.MemoryStats(cfg.Version)
}

func (r *Replay) privateReservedPeak() int64 {
	reserved, _ := r.a.PrivatePoolStats()
	return reserved.Peak
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
	r.a.ClearTrace()
	st := r.a.SimulatedStats()
	// Segments kept outside the simulation since the start add their
	// constant figures (Allocator.AddUnmodelled).
	_, kept := r.a.UnmodelledStats()
	if p := st.AllocatedBytes[allocator.PoolAll].Peak + kept.AllocatedBytes[allocator.PoolAll].Current; p > r.peakAlloc.Bytes {
		r.peakAlloc = PeakAt{Bytes: p, Index: j, TimeUS: r.tw.at(j).TimeUS}
		r.atPeak = r.unusedNow()
	}
	if p := st.ReservedBytes[allocator.PoolAll].Peak + kept.ReservedBytes[allocator.PoolAll].Current; p > r.peakRes.Bytes {
		r.peakRes = PeakAt{Bytes: p, Index: j, TimeUS: r.tw.at(j).TimeUS}
	}
	if r.watchSplits && !r.sawDependentSplit && !r.outside {
		r.noteSplitDependence(i, j)
	}
	if r.opts.OnEvent != nil {
		for k := i; k <= j; k++ {
			r.opts.OnEvent(k, r.tw.at(k), r.a)
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
func (r *Replay) segmentAddress(req allocator.SegmentRequest) (uint64, bool) {
	// The entry for this segment is the one the call is about to record:
	// after a fallback released a reservation, an earlier map of the same
	// call lies outside every reservation too.
	if addr, ok := r.recordedSegment(req, r.win[0]+r.cur.TraceLen()); ok {
		return addr, true
	}
	return r.recordedSegment(req, r.win[0])
}

// recordedSegment finds the recorded address for a new segment or
// reservation among the window's entries from k on.
func (r *Replay) recordedSegment(req allocator.SegmentRequest, k int) (uint64, bool) {
	for ; k <= r.win[1] && k < r.tw.n; k++ {
		e := r.tw.at(k)
		switch {
		case !req.Expandable && e.Action == snapshot.ActionSegmentAlloc:
			return e.Addr, true
		case req.Expandable && e.Action == snapshot.ActionSegmentMap && !r.cur.InRegion(e.Addr):
			return e.Addr, true
		}
	}
	return 0, false
}

// ---- follow mode ----

func (r *Replay) stepFollow() {
	i := r.pos
	e := r.tw.at(i)
	switch e.Action {
	case snapshot.ActionAlloc, snapshot.ActionOOM, snapshot.ActionSegmentAlloc, snapshot.ActionSegmentFree,
		snapshot.ActionSegmentMap, snapshot.ActionSegmentUnmap:
		j := r.callEnd(i)
		r.placeGuessedReservations(i, j)
		r.notePoolReleases(i, j, r.routeCall(i, j))
		if j >= 0 {
			r.followMalloc(i, j)
		} else {
			r.followRelease(i)
		}
		r.a.EndRoute()
	case snapshot.ActionFreeRequested:
		// HoldAt: a free of an address outside every segment (a trace
		// that disagrees with its snapshot) costs no table miss.
		if r.a.HoldAt(e.Addr) == allocator.HoldAllocated {
			r.a.FreeDeferred(e.Addr, e.Stack)
		} else {
			r.unapplied(i, "nothing is allocated at that address")
		}
		r.finish(i, i)
	case snapshot.ActionFreeCompleted, snapshot.ActionFree:
		// The block's hold is looked up once: syncedByCall changes the
		// state only where it succeeds (a guessed reservation it moves
		// is empty, so it holds no handed-out block).
		hold := r.a.HoldAt(e.Addr)
		if hold == allocator.HoldPending && r.syncedByCall(i) {
			return
		}
		switch hold {
		case allocator.HoldPending:
			r.a.CompletePendingFree(e.Addr, e.Stack)
		case allocator.HoldAllocated:
			// Its free_requested was not recorded.
			r.a.Free(e.Addr, e.Stack)
		default:
			r.unapplied(i, "nothing is allocated at that address")
		}
		r.finish(i, i)
	case snapshot.ActionSnapshot:
		if r.a.SimulatedStats().ActiveBytes[allocator.PoolAll].Current == e.Size {
			r.res.Fidelity.SnapshotMarkers.Reproduced++
		}
		r.finish(i, i)
	default:
		r.finish(i, i)
	}
}

// placeGuessedReservations moves each empty reservation whose base the
// simulator guessed to the address the recording's segment maps i..j (j <
// 0: the segment events from i on) show for it: the first map of a
// (stream, pool) outside every reservation known.
func (r *Replay) placeGuessedReservations(i, j int) {
	for k := i; k < r.tw.n && (k <= j || j < 0 && isSegmentEvent(r.tw.at(k).Action)); k++ {
		if e := r.tw.at(k); e.Action == snapshot.ActionSegmentMap {
			r.a.PlaceGuessedReservation(e.Addr, r.streams.of(&e), r.mapIsSmall(k))
		}
	}
}

// callEnd returns the index of the alloc or oom entry that ends the
// allocator call starting at i (segment events, then the alloc or oom),
// or -1 if the segment events at i are not followed by one. The frees a
// fallback's synchronization completes (free_completed) may sit between
// the segment events.
func (r *Replay) callEnd(i int) int {
	k := i
	for k < r.tw.n && (isSegmentEvent(r.tw.at(k).Action) || k > i && r.tw.at(k).Action == snapshot.ActionFreeCompleted) {
		k++
	}
	if k < r.tw.n && (r.tw.at(k).Action == snapshot.ActionAlloc || r.tw.at(k).Action == snapshot.ActionOOM) {
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
	if r.pools.guess[j] && r.tryPools(i, j) {
		return
	}
	want := r.tw.span(i, j+1)
	e := r.tw.at(j)
	isAlloc := e.Action == snapshot.ActionAlloc
	shown := r.toggled && r.followSetting(i, j)
	if canToggle := r.toggled || r.mayToggle(); isAlloc && (canToggle || r.splitsUnknown) && !r.a.Allocated(e.Addr) && r.splitInside(e.Addr) && canToggle {
		// A recorded allocation inside a live block: the real allocator
		// split a block the replay, under the setting the segments show,
		// handed out whole. Under the settings the snapshot records,
		// only expandable_segments switched on and off again between
		// two new segments does that (should_split: a remainder of
		// 512 B to 1 MiB), so this is the switch's evidence, met
		// mid-trace. (Under Options.RuntimeSettings a rounding the
		// recorded settings do not make does it too: the block is cut
		// back all the same.)
		r.toggled, r.switchShown = true, true
	}
	if isAlloc && i == j && !r.toggled && !r.wantExample() && !r.a.InRegion(e.Addr) {
		// An allocation at an address no segment holds, with no
		// segment event in its call: no simulated call places it
		// there (a cache hit lies in a segment, a new segment is a
		// segment event), so it is forced, as a prediction or a trial
		// would conclude. The prediction would only name the
		// simulator's choice in an example, and the examples are
		// full. Traces that disagree with their snapshot (the
		// generated benchmark files) have one per allocation. The
		// allocation is not applied, and no block holds its address
		// for noteSplitDependence to look at.
		r.outside = true
		r.force(i, j, nil)
		r.outside = false
		return
	}
	// The common cases are predicted without trying the call on a copy.
	if isAlloc {
		out, addr, allocSize := r.a.PredictMalloc(e.Size, r.streams.of(&e))
		ok := false
		switch out {
		case allocator.OutcomeCacheHit:
			ok = i == j && addr == e.Addr
		case allocator.OutcomeNewSegment:
			s := r.tw.at(i)
			ok = j == i+1 && s.Action == snapshot.ActionSegmentAlloc && s.Size == allocSize && s.Addr == e.Addr && r.streams.of(&s) == r.streams.of(&e)
		}
		if ok {
			r.win, r.cur = [2]int{i, j}, r.a
			_, err := r.a.Malloc(e.Size, r.streams.of(&e), e.Stack)
			if got := r.a.Trace(); err == nil && sameEntries(got, want) {
				r.matched(i, j)
				return
			}
			// The prediction said otherwise. Not expected:
			// PredictMalloc mirrors Malloc, except where the dictated
			// address is taken (an empty reservation the real allocator
			// had released); a call that failed before changing
			// anything is forced.
			if err != nil && len(r.a.Trace()) == 0 {
				r.force(i, j, func() string { return fmt.Sprintf("predicted placement not reproduced (%v)", err) })
				return
			}
			r.diverged(i, j, func() string { return fmt.Sprintf("predicted placement not reproduced (%v)", err) })
			r.finish(i, j)
			return
		}
		// A known outcome that differs from the recording needs no trial
		// on a copy: the call would produce the predicted entries, which
		// are not the recorded ones. Copying the whole state per call made
		// traces with many such calls quadratic.
		if out != allocator.OutcomeUnknown {
			if r.toggled && !shown && r.tryOtherSetting(i, j) {
				return
			}
			if isRelease(r.tw.at(i).Action) && r.tryEmptyCache(i, j-1) {
				return
			}
			r.force(i, j, func() string { return r.describePrediction(out, addr, allocSize) })
			return
		}
	}
	ok, got, err := r.tryCall(i, j)
	if ok || r.toggled && !shown && r.tryOtherSetting(i, j) {
		return
	}
	// A leading release run the call does not produce itself is the
	// program's empty_cache().
	if isRelease(r.tw.at(i).Action) && r.tryEmptyCache(i, j-1) {
		return
	}
	if i == j && e.Action == snapshot.ActionOOM && r.capacityOOM(got) {
		r.capacityOOMs++
	}
	r.force(i, j, func() string { return "simulator: " + describeEntries(got, err) })
}

// capacityOOM says whether a recorded oom that the simulator would have
// served (got: its entries) differs from the recording only in how much
// memory the device allowed (a memory fraction, another process), which
// says nothing of private pools (poolsPossible): the simulator made new
// memory without releasing any (so no cached block of the default pools
// fitted, as none of a pool's would have had to), the recording shows no
// fallback's entries, and release_cached_blocks would have written none
// either (an empty_cache() of the replayed state writes nothing), so the
// recording reads the same whether a retry ran or a capture skipped it.
func (r *Replay) capacityOOM(got []snapshot.TraceEntry) bool {
	grew := false
	for _, g := range got {
		switch g.Action {
		case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentMap:
			grew = true
		case snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap, snapshot.ActionFreeCompleted:
			return false
		}
	}
	if !grew {
		return false
	}
	c := r.a.Clone()
	c.ClearTrace()
	c.EmptyCache(snapshot.NoStack)
	return len(c.Trace()) == 0
}

// tryCall runs the allocation of entry j on a copy of the allocator and
// keeps the copy if the call produced exactly entries i..j.
func (r *Replay) tryCall(i, j int) (bool, []snapshot.TraceEntry, error) {
	e := r.tw.at(j)
	c := r.a.Clone()
	c.OrderHeldFrees(r.tw.span(i, j+1))
	r.win, r.cur = [2]int{i, j}, c
	_, err := c.Malloc(e.Size, r.streams.of(&e), e.Stack)
	var oom *allocator.OOMError
	got := c.Trace()
	if (err == nil || errors.As(err, &oom)) && sameEntries(got, r.tw.span(i, j+1)) {
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
// or a new segment under a finite capacity. The caller has found entry
// i's block pending.
func (r *Replay) syncedByCall(i int) bool {
	k := i
	for k < r.tw.n && r.tw.at(k).Action == snapshot.ActionFreeCompleted {
		k++
	}
	if k == r.tw.n {
		return false
	}
	j := r.callEnd(k)
	if j < 0 {
		return false
	}
	fallback := r.tw.at(j).Action == snapshot.ActionOOM
	for _, f := range r.tw.span(k, j) {
		fallback = fallback || isRelease(f.Action) || r.a.Device().Capacity() > 0 && isSegmentEvent(f.Action)
	}
	if !fallback {
		return false
	}
	r.placeGuessedReservations(k, j)
	ok, _, _ := r.tryCall(i, j)
	return ok
}

// tryEmptyCache tries a user empty_cache() for the release run starting
// at i (ending at most at last); it keeps it if it produced exactly a
// prefix of the run.
func (r *Replay) tryEmptyCache(i, last int) bool {
	if r.tryEmptyCacheAs(i, last, false) {
		return true
	}
	// 2.9: an empty_cache during a capture returns only freeable pools.
	return r.pools.any && r.a.Version().CapturesGuardEmptyCache() && r.tryEmptyCacheAs(i, last, true)
}

func (r *Replay) tryEmptyCacheAs(i, last int, capturing bool) bool {
	c := r.a.Clone()
	if capturing {
		c.EmptyCacheCapturing(r.tw.at(i).Stack)
	} else {
		c.EmptyCache(r.tw.at(i).Stack)
	}
	got := c.Trace()
	if k := len(got); k > 0 && i+k-1 <= last && sameEntries(got, r.tw.span(i, i+k)) {
		r.a = c
		r.res.Fidelity.EmptyCacheCalls++
		r.emptyCacheAt[i] = true
		r.note(noteEmptyCache, i, snapshot.PoolID{})
		if capturing {
			r.pools.capturingEmptyCache[i] = true
			r.note(noteCapturingEmptyCache, i, snapshot.PoolID{})
		}
		r.res.Fidelity.SegmentEvents.Reproduced += k
		r.finish(i, i+k-1)
		return true
	}
	return false
}

// followRelease handles segment events no alloc or oom follows.
func (r *Replay) followRelease(i int) {
	k := i
	for k < r.tw.n && isSegmentEvent(r.tw.at(k).Action) {
		k++
	}
	if isRelease(r.tw.at(i).Action) {
		if r.tryEmptyCache(i, k-1) {
			return
		}
		r.emptyCacheAt[i] = true
		r.note(noteEmptyCache, i, snapshot.PoolID{})
	}
	r.force(i, k-1, func() string { return "no allocator call explains these segment events" })
}

func (r *Replay) matched(i, j int) {
	f := r.res.Fidelity
	for _, e := range r.tw.span(i, j+1) {
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
	if !r.namesPools() {
		// The call may have used a pool other than the one tried: one
		// the replay knows, or one released before the snapshot, which
		// the final state does not show (poolsPossible).
		r.poolUnknown = true
	}
	if r.wantExample() {
		r.example(fmt.Sprintf("entries %d-%d (recorded %s): %s", i, j, describeEntries(r.tw.span(i, j+1), nil), what()))
	}
}

// unapplied counts an entry the state could not take; why (a string or an
// error) is formatted only into a kept example.
func (r *Replay) unapplied(i int, why any) {
	e := r.tw.at(i)
	if r.res.Fidelity != nil {
		r.res.Fidelity.Unapplied++
		if r.wantExample() {
			r.example(fmt.Sprintf("entry %d (%s %#x, %d bytes) not applied: %v", i, e.Action, e.Addr, e.Size, why))
		}
	}
}

// errOutside is why an allocation at an address no region holds is not
// applied, where no example is kept to say more.
var errOutside = errors.New("no segment holds the address")

// force applies the recorded entries i..j with the Force* primitives
// after the simulator decided otherwise.
func (r *Replay) force(i, j int, what func() string) {
	r.diverged(i, j, what)
	a := r.a
	// The pool of the segment a call creates follows from its request.
	pool := snapshot.LargePool
	if last := r.tw.at(j); last.Action == snapshot.ActionAlloc || last.Action == snapshot.ActionOOM {
		if r.cfg.RoundSize(last.Size) <= allocator.SmallSize {
			pool = snapshot.SmallPool
		}
	}
	for k := i; k <= j; k++ {
		e := r.tw.at(k)
		var err error
		switch e.Action {
		case snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
			err = a.ForceRelease(e.Addr, e.Size, e.Stack)
		case snapshot.ActionSegmentAlloc:
			p := pool
			if r.tw.at(j).Action != snapshot.ActionAlloc && r.tw.at(j).Action != snapshot.ActionOOM {
				p = segmentPoolOfSize(e.Size)
			}
			err = a.ForceSegment(e.Addr, e.Size, r.streams.of(&e), p, e.Stack)
		case snapshot.ActionSegmentMap:
			err = a.ForceMap(e.Addr, e.Size, r.streams.of(&e), pool, e.Stack)
		case snapshot.ActionAlloc:
			if r.outside && !r.wantExample() {
				// No region holds the address (followMalloc): ForceMalloc
				// would process the due events and fail, its error made
				// (an allocation) only to go unread.
				a.ProcessEvents(e.Stack)
				err = errOutside
				break
			}
			err = a.ForceMalloc(e.Addr, e.Size, 0, r.streams.of(&e), e.Stack)
			if err != nil && r.splitsUnknown {
				// Settings changed at runtime: the recorded settings'
				// rounding may not fit where the program's did; the
				// smallest rounding any setting gives (runtimeBounds
				// bounds the figures built on it).
				lo, _ := roundRange(e.Size, r.cfg.Version)
				err = a.ForceMalloc(e.Addr, e.Size, lo, r.streams.of(&e), e.Stack)
			}
		case snapshot.ActionOOM:
			a.ForceOOM(e, r.streams.of(&e))
			r.forcedOOMs++
		case snapshot.ActionFreeCompleted, snapshot.ActionFree:
			// A fallback's synchronization completed this free inside
			// the call; the segment_free after it may release its
			// segment, so it is applied in its place.
			switch a.HoldAt(e.Addr) {
			case allocator.HoldPending:
				err = a.CompletePendingFree(e.Addr, e.Stack)
			case allocator.HoldAllocated:
				err = a.Free(e.Addr, e.Stack)
			default:
				err = errors.New("nothing is allocated at that address")
			}
		}
		if err != nil {
			r.unapplied(k, err)
		}
	}
	r.finish(i, j)
}

func (r *Replay) describePrediction(out allocator.MallocOutcome, addr uint64, allocSize int64) string {
	if out == allocator.OutcomeCacheHit {
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
		var oom *allocator.OOMError
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
	if touchAheadOn && i+touchLead >= r.ahead {
		r.touchAhead(i)
	}
	e := r.tw.at(i)
	a := r.a
	switch e.Action {
	case snapshot.ActionAlloc:
		a.RouteToPool(r.pools.call[i])
		addr, err := a.Malloc(e.Size, r.streams.of(&e), e.Stack)
		a.EndRoute()
		if err != nil {
			r.failed[e.Addr] = true
			r.simAddr.del(e.Addr)
		} else {
			r.simAddr.put(e.Addr, addr)
			delete(r.failed, e.Addr)
		}
	case snapshot.ActionFreeRequested:
		if sa, ok := r.simAddr.get(e.Addr); ok && a.Allocated(sa) {
			a.FreeDeferred(sa, e.Stack)
		}
	case snapshot.ActionFreeCompleted, snapshot.ActionFree:
		if r.failed[e.Addr] {
			delete(r.failed, e.Addr)
			break
		}
		if sa, ok := r.simAddr.get(e.Addr); ok {
			switch {
			case a.PendingFree(sa):
				a.CompletePendingFree(sa, e.Stack)
			case a.Allocated(sa):
				a.Free(sa, e.Stack)
			}
			r.simAddr.del(e.Addr)
		}
	case snapshot.ActionOOM:
		// The request failed for real; under other settings it may not.
		// The program went on without it, so a success is freed at once.
		a.RouteToPool(r.pools.call[i])
		addr, err := a.Malloc(e.Size, r.streams.of(&e), e.Stack)
		a.EndRoute()
		if err == nil {
			a.Free(addr, snapshot.NoStack)
		}
	case snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
		if id, ok := r.pools.released[i]; ok {
			a.MarkPoolReleased(id)
		}
		switch {
		case r.pools.capturingEmptyCache[i]:
			a.EmptyCacheCapturing(e.Stack)
		case r.emptyCacheAt[i]:
			a.EmptyCache(e.Stack)
		}
	}
	r.finish(i, i)
}

// touchLead and touchBatch: the what-if's step loop reads the memory the
// entries touchLead to touchLead+touchBatch ahead will read, in batches
// of touchBatch (BenchmarkWhatIf on torch-100MB: 16-64 ahead, in batches
// of 8-64, measured alike).
const (
	touchLead  = 32
	touchBatch = 16
)

// touchAheadOn is false only in the test that holds the replay with the
// reads ahead to the replay without them.
var touchAheadOn = true

// touchAhead reads, in one batch, the memory the coming entries' steps
// will read: the address map's slots of entries touchLead to
// touchLead+touchBatch ahead, and, for the frees among those whose slots
// it read a batch ago, the simulator's table slot and block. Each step
// misses the cache two or three times (the address map, the simulator's
// table, the block), one after the other; read in a batch, a few dozen
// misses are under way at once. Only what the trace window holds
// decoded is read; what the reads find does not matter (a later entry
// may change it), as they change nothing.
func (r *Replay) touchAhead(i int) {
	w := &r.tw
	var sum uint64
	from := max(r.ahead, i+touchLead)
	to := min(from+touchBatch, w.lo+len(w.buf))
	// The table slots and blocks of the batch read a batch ago (their
	// address map slots are in the cache by now).
	for k := max(w.lo, from-touchBatch); k < from && k < w.lo+len(w.buf); k++ {
		e := &w.buf[k-w.lo]
		switch e.Action {
		case snapshot.ActionFreeRequested, snapshot.ActionFree:
			if sa, ok := r.simAddr.get(e.Addr); ok {
				sum += r.a.Touch(sa, false)
			}
		case snapshot.ActionFreeCompleted:
			if sa, ok := r.simAddr.get(e.Addr); ok {
				sum += r.a.Touch(sa, true)
			}
		}
	}
	for k := max(w.lo, from); k < to; k++ {
		e := &w.buf[k-w.lo]
		switch e.Action {
		case snapshot.ActionAlloc, snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted, snapshot.ActionFree:
			sum += r.simAddr.touch(e.Addr)
		}
	}
	r.touched += sum
	r.ahead = max(to, i+touchLead+touchBatch)
}

// ---- private pools ----

// callPools tells a replay which pool each recorded call used. A trace
// says it directly from 2.9 (pool_id); before, the pool of a call follows
// from the addresses: an allocation lands in a segment of its pool, and a
// segment the trace creates belongs to the pool the final snapshot shows
// it in, if it is still there at the end.
type callPools struct {
	// call maps an alloc or oom entry to its private pool (absent: the
	// default pools); the what-if replay routes by it.
	call map[int]snapshot.PoolID
	// seg maps a segment_alloc or segment_map entry to its pool (absent:
	// unknown, replayed in the default pools).
	seg map[int]snapshot.PoolID
	// released maps a segment_free or segment_unmap of a private pool's
	// segment to that pool: the program had released the pool by then.
	released map[int]snapshot.PoolID
	// unknown lists the segments the trace creates and frees again, of
	// a recording that does not say pools, while private pools exist:
	// their pool is not known.
	unknown []int
	// any: the recording has private pools at all.
	any bool
	// guess marks the calls whose pool routeCall could not tell (a new
	// segment the trace frees again, an oom): followMalloc tries the
	// default and every live private pool.
	guess map[int]bool
	// capturingEmptyCache marks the empty_cache calls made during a
	// capture (2.9: only freeable pools released).
	capturingEmptyCache map[int]bool
}

// mapPools (inferTotalMemory) names the pool of maps no final segment
// covers, from the reservation they share with one that one covers.
// mallocs: the recording's cudaMalloc'd segments may be private pools'
// though the final state shows none (poolMallocs).
func findCallPools(s *snapshot.Snapshot, tr *snapshot.Trace, final []*snapshot.Segment, mapPools map[int]snapshot.PoolID, mallocs bool) callPools {
	cp := callPools{call: map[int]snapshot.PoolID{}, seg: map[int]snapshot.PoolID{}, released: map[int]snapshot.PoolID{}, guess: map[int]bool{}, capturingEmptyCache: map[int]bool{}}
	cp.any = mallocs && !s.Features.TracePoolID
	for _, f := range final {
		cp.any = cp.any || !f.PoolID.IsDefault()
	}
	if s.Features.TracePoolID {
		for i, e := range tr.All() {
			id := s.Context(&e).Pool
			if id.IsDefault() {
				continue
			}
			cp.any = true
			switch e.Action {
			case snapshot.ActionAlloc, snapshot.ActionOOM:
				cp.call[i] = id
			case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentMap:
				cp.seg[i] = id
			}
		}
		return cp
	}
	if !cp.any {
		return cp
	}
	// From the addresses: the final segments name the pools of the
	// segments still live at the end; the segment holding an address at a
	// moment names the pool of an allocation there.
	finalAt := func(addr uint64) *snapshot.Segment {
		k, ok := slices.BinarySearchFunc(final, addr, func(f *snapshot.Segment, a uint64) int {
			switch {
			case f.End() <= a:
				return -1
			case f.Address > a:
				return 1
			}
			return 0
		})
		if !ok {
			return nil
		}
		return final[k]
	}
	live := map[uint64]int{} // cudaMalloc'd segment address → its segment_alloc
	for i, e := range tr.All() {
		switch e.Action {
		case snapshot.ActionSegmentAlloc:
			live[e.Addr] = i
		case snapshot.ActionSegmentFree:
			if k, ok := live[e.Addr]; ok {
				delete(live, e.Addr)
				cp.unknown = append(cp.unknown, k)
			}
		case snapshot.ActionSegmentMap:
			// Expandable reservations belong to one pool for their life.
			if f := finalAt(e.Addr); f != nil && f.Expandable {
				cp.seg[i] = f.PoolID
			} else if id, ok := mapPools[i]; ok {
				cp.seg[i] = id
			}
		}
	}
	for addr, k := range live {
		if f := finalAt(addr); f != nil && f.Address == addr {
			cp.seg[k] = f.PoolID
		}
	}
	slices.Sort(cp.unknown)
	return cp
}

// routeCall puts the allocator call i..j (j < 0: a release run) in the
// pool the recording shows and returns it: the entry's own pool_id (2.9+),
// else the pool of a segment the call creates, else the pool of the
// segment its address lies in.
func (r *Replay) routeCall(i, j int) snapshot.PoolID {
	if !r.pools.any {
		return snapshot.PoolID{}
	}
	var id snapshot.PoolID
	switch {
	case r.snap.Features.TracePoolID:
		if j >= 0 {
			id = r.pools.call[j]
		} else {
			id = r.pools.seg[i]
		}
	default:
		found := false
		last := max(i, j)
		for k := i; k <= last && !found; k++ {
			switch a := r.tw.at(k).Action; a {
			case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentMap:
				id, found = r.pools.seg[k]
				if !found && a == snapshot.ActionSegmentMap {
					// A map inside a reservation is its pool's:
					// a reservation serves one pool for its life.
					id, found = r.a.PoolOf(r.tw.at(k).Addr)
				}
				if !found && j >= 0 {
					r.pools.guess[j] = true
				}
				found = true
			}
		}
		switch {
		case found || j < 0:
		case r.tw.at(j).Action == snapshot.ActionAlloc:
			id, _ = r.a.PoolOf(r.tw.at(j).Addr)
		default: // an oom: no address to go by
			r.pools.guess[j] = true
		}
		if j >= 0 && !id.IsDefault() {
			r.pools.call[j] = id
			r.note(noteCall, j, id)
		}
	}
	r.a.RouteToPool(id)
	return id
}

// notePoolReleases marks the pools whose segments the call or release run
// i..j returns: empty_cache (or a failed cudaMalloc's release of every
// cached segment) returns a private pool's segments only once its
// use_count is 0. A call may also return oversize blocks of its own pool
// (release_available_cached_blocks), which says nothing of the pool.
func (r *Replay) notePoolReleases(i, j int, own snapshot.PoolID) {
	if !r.pools.any {
		return
	}
	last := j
	if last < 0 {
		last = i
		for last+1 < r.tw.n && isSegmentEvent(r.tw.at(last+1).Action) {
			last++
		}
	}
	for k := i; k <= last; k++ {
		e := r.tw.at(k)
		if !isRelease(e.Action) {
			continue
		}
		if id, ok := r.a.PoolOf(e.Addr); ok && !id.IsDefault() && id != own {
			r.pools.released[k] = id
			r.note(noteReleased, k, id)
			r.a.MarkPoolReleased(id)
		}
	}
}

// tryPools tries the call i..j in the default pools and then in each live
// private pool, and keeps the first that reproduces the recorded entries
// (the recording does not say which pool the call used). A call no pool
// reproduces is left to followMalloc, routed to the default pools. When
// more than one pool reproduces a new segment (predictable calls are
// checked in all of them), which pool holds it is ambiguous: its bytes
// count in Pools.AmbiguousBytes.
func (r *Replay) tryPools(i, j int) bool {
	cands := []snapshot.PoolID{{}}
	cands = append(cands, r.a.LivePrivatePools()...)
	e := r.tw.at(j)
	matches := 0
	var chosen *snapshot.PoolID
	try := func(id snapshot.PoolID) bool {
		r.a.RouteToPool(id)
		if e.Action == snapshot.ActionAlloc {
			out, _, allocSize := r.a.PredictMalloc(e.Size, r.streams.of(&e))
			if out == allocator.OutcomeNewSegment {
				s := r.tw.at(i)
				if j == i+1 && s.Action == snapshot.ActionSegmentAlloc && s.Size == allocSize && s.Addr == e.Addr {
					matches++
					if chosen == nil {
						chosen = &id
					}
				}
				return false
			}
			if out != allocator.OutcomeUnknown {
				return false
			}
		}
		if chosen != nil {
			return false
		}
		if ok, _, _ := r.tryCall(i, j); ok {
			r.notePoolGuess(j, id, 1)
			return true
		}
		return false
	}
	for _, id := range cands {
		if try(id) {
			return true
		}
	}
	if chosen == nil && !r.snap.Features.TracePoolID {
		// A pool the program released before the snapshot leaves no
		// segment in it, so no pool the replay knows may reproduce the
		// call: it was one the replay has not seen (unnamedPool).
		if try(r.unnamedPool()) {
			return true
		}
	}
	if chosen == nil {
		// No pool reproduces the call: its pool stays unknown, and the
		// forced steps that follow it build its blocks from other block
		// objects than the program's allocator did.
		r.poolUnknown = true
		r.notePoolGuess(j, snapshot.PoolID{}, 0)
		r.a.RouteToPool(snapshot.PoolID{})
		return false
	}
	r.a.RouteToPool(*chosen)
	r.notePoolGuess(j, *chosen, matches)
	r.win, r.cur = [2]int{i, j}, r.a
	_, err := r.a.Malloc(e.Size, r.streams.of(&e), e.Stack)
	if err == nil && sameEntries(r.a.Trace(), r.tw.span(i, j+1)) {
		r.matched(i, j)
		return true
	}
	r.diverged(i, j, func() string { return fmt.Sprintf("predicted placement not reproduced (%v)", err) })
	r.finish(i, j)
	return true
}

// unnamedPool is a private pool the replay has not seen, for a call of a
// trace that names no pool (before 2.9) that neither the default pools nor
// any pool of the final snapshot reproduces: a pool the program created
// and released again before the snapshot (a graph reset, a MemPool
// deleted), whose segments are all gone by the end. Its id is negative, an
// id no program makes; the replay makes one more only once the last one
// holds a segment. Which of the vanished pools a call used is not known,
// so the private pools' peaks of such a recording are bounds (poolBounds)
// and the pool shows in no per-pool figure (it holds nothing at the end).
func (r *Replay) unnamedPool() snapshot.PoolID {
	id := snapshot.PoolID{-1, -r.unnamedPools}
	if r.unnamedPools == 0 || r.a.PoolHoldsSegments(id) {
		r.unnamedPools++
		id = snapshot.PoolID{-1, -r.unnamedPools}
	}
	return id
}

// finalPoolUsages are the pools' figures at the end as the final segments
// give them (each segment names its pool), with the kind and use count of
// the replay's pool of that id, replayed (the default pools first, then
// the private pools in id order, as PoolUsages lists them).
func finalPoolUsages(final []*snapshot.Segment, replayed []allocator.PoolUsage) []allocator.PoolUsage {
	byID := map[snapshot.PoolID]*allocator.PoolUsage{}
	out := []allocator.PoolUsage{{UseCount: -1}}
	for _, u := range replayed {
		if u.ID.IsDefault() {
			out[0] = allocator.PoolUsage{UseCount: -1, Kind: u.Kind}
		} else if !isUnnamedPool(u.ID) {
			out = append(out, allocator.PoolUsage{ID: u.ID, Kind: u.Kind, UseCount: u.UseCount, Freeable: u.Freeable,
				PeakReserved: u.PeakReserved, PeakAllocated: u.PeakAllocated})
		}
	}
	for _, f := range final {
		if _, ok := byID[f.PoolID]; ok || f.PoolID.IsDefault() {
			continue
		}
		if !slices.ContainsFunc(out, func(u allocator.PoolUsage) bool { return u.ID == f.PoolID }) {
			out = append(out, allocator.PoolUsage{ID: f.PoolID, Kind: allocator.KindOfPoolID(f.PoolID), UseCount: 1})
		}
	}
	slices.SortStableFunc(out[1:], func(x, y allocator.PoolUsage) int {
		if c := cmp.Compare(x.ID[0], y.ID[0]); c != 0 {
			return c
		}
		return cmp.Compare(x.ID[1], y.ID[1])
	})
	for k := range out {
		byID[out[k].ID] = &out[k]
	}
	for _, f := range final {
		u := byID[f.PoolID]
		u.Segments++
		u.Reserved += f.TotalSize
		for _, b := range f.Blocks {
			switch {
			case b.State == snapshot.ActiveAllocated:
				u.Allocated += b.Size
				u.Active += b.Size
			case b.State.Active():
				u.Active += b.Size
			default:
				u.LargestFree = max(u.LargestFree, b.Size)
			}
		}
	}
	return out
}

// isUnnamedPool reports whether id is one of unnamedPool's.
func isUnnamedPool(id snapshot.PoolID) bool { return id[0] < 0 }

// notePoolGuess records the pool a trial chose for call j; matches is how
// many pools would have reproduced it (0: none did, the pool is unknown).
func (r *Replay) notePoolGuess(j int, id snapshot.PoolID, matches int) {
	if !id.IsDefault() {
		r.pools.call[j] = id
		r.note(noteCall, j, id)
	}
	p := &r.res.Pools
	p.Inferred++
	if matches != 1 {
		p.Ambiguous++
		if j > 0 && (r.tw.at(j-1).Action == snapshot.ActionSegmentAlloc || r.tw.at(j-1).Action == snapshot.ActionSegmentMap) {
			p.AmbiguousBytes += r.tw.at(j - 1).Size
		}
	}
}

// startPools gives the starting state's segments that the final snapshot
// does not show (freed inside the window) the pool their first entry in
// the trace names, where entries carry pool_id (2.9+).
func (r *Replay) startPools() {
	if !r.snap.Features.TracePoolID {
		return
	}
	// The segments to name, in address order (start.segments is sorted),
	// and the highest end among each one and those before it: one pass
	// over the trace finds each one's first entry by binary search. (A
	// pass per segment was segments x entries: hours for a trace of
	// millions of entries that starts with 80,000 segments.)
	var want []*snapshot.Segment
	for k := range r.start.segments {
		seg := &r.start.segments[k]
		if seg.PoolID.IsDefault() && !seg.Expandable {
			// An expandable range goes with its reservation's pool.
			want = append(want, seg)
		}
	}
	if len(want) == 0 {
		return
	}
	maxEnd := make([]uint64, len(want))
	for k, seg := range want {
		maxEnd[k] = seg.End()
		if k > 0 {
			maxEnd[k] = max(maxEnd[k], maxEnd[k-1])
		}
	}
	named := make([]bool, len(want))
	left := len(want)
	for _, e := range r.trace.All() {
		if e.Action == snapshot.ActionOOM || e.Action == snapshot.ActionSnapshot {
			continue
		}
		// The segments that may hold e.Addr: those starting at or before
		// it, walking back while one of them may still reach past it.
		k := sort.Search(len(want), func(k int) bool { return want[k].Address > e.Addr }) - 1
		for ; k >= 0 && maxEnd[k] > e.Addr; k-- {
			if seg := want[k]; !named[k] && e.Addr < seg.End() {
				seg.PoolID = r.snap.Context(&e).Pool
				named[k] = true
				left--
			}
		}
		if left == 0 {
			return
		}
	}
}
