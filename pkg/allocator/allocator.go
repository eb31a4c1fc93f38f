package allocator

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/memstat/memstat/pkg/snapshot"
)

// Options describe the simulated device and the harness around the
// allocator. The zero value is an unlimited device with default placement
// and a deterministic clock.
type Options struct {
	// Device is the device ordinal reported in snapshots and OOM messages.
	Device int
	// Capacity is the physical memory the allocator may obtain (cudaMalloc
	// fails beyond it); 0 means unlimited.
	Capacity int64
	// TotalMemory is cudaDeviceProp.totalGlobalMem; it sizes expandable
	// segments' address reservations. Defaults to Capacity, or 80 GiB when
	// the capacity is unlimited.
	TotalMemory int64
	// BaseAddress is where the default placement starts (0x7f0000000000 if
	// zero).
	BaseAddress uint64
	// SegmentAddress, when set, is asked for the address of every new
	// cudaMalloc'd segment and every new expandable-segment reservation,
	// just before it is created (so a failed cudaMalloc asks nothing).
	// Returning ok=false falls back to the default placement. A replay
	// driver uses it to give each segment the address the recorded trace
	// shows, which best fit's lowest-address tie-break depends on.
	SegmentAddress func(req SegmentRequest) (addr uint64, ok bool)
	// Clock returns the Unix-epoch microseconds stamped on trace entries.
	// The default is a deterministic clock that advances one microsecond
	// per entry, so that simulations are reproducible.
	Clock func() int64
	// Stacks is the table the StackIDs passed to the allocator refer to;
	// Snapshot puts it into the snapshot it returns. May be nil.
	Stacks *snapshot.Stacks
}

// deterministicEpoch is where the default clock starts: 2024-01-01 UTC.
const deterministicEpoch = 1704067200000000

// Allocator simulates one device's CUDA caching allocator (PyTorch's native
// DeviceCachingAllocator), decision for decision: rounding, pools, best fit,
// splitting, merging, streams and deferred frees, expandable segments,
// garbage collection, the OOM fallbacks, statistics, the trace and the
// snapshot.
//
// Memory is identified by device address, as a storage's data pointer is
// in PyTorch. An Allocator is not safe for concurrent use; independent
// Allocators share nothing, so what-if runs can proceed in parallel.
type Allocator struct {
	cfg   Config
	v     Version
	dev   *Device
	small blockPool
	large blockPool

	regions regions
	// allocated maps the address of every handed-out block to it
	// (NativeCachingAllocator's allocated_blocks).
	allocated addrTable
	// pending maps the address of every freed block still waiting for
	// events to it.
	pending addrTable
	// streams holds the outstanding events per stream, sorted by stream
	// id. PyTorch keeps them in an unordered map (cuda_events, keyed by
	// stream) and walks it in hash order, so no order is "the" order;
	// ascending ids keep runs reproducible. When blocks of different
	// streams complete in one pass, the order they are freed in decides
	// which merge first, so inactive_split figures may differ from a
	// real run's (docs/versions.md, "Event order").
	streams  []*streamQueue
	eventSeq uint64
	nEvents  int

	stats Stats
	// fractionSet and allowedMax model set_per_process_memory_fraction.
	fractionSet bool
	allowedMax  int64

	hist   history
	clock  func() int64
	tick   int64
	stacks *snapshot.Stacks
	// mute suppresses trace entries while a starting state is seeded.
	mute bool
	// spare recycles block objects released by merges and frees, so the
	// steady state allocates nothing.
	spare  []*block
	forced int64

	// pools is graph_pools, sorted by id; a freeable pool is also
	// graph_pools_freeable.
	pools []*privatePool
	// captures is captures_underway, oldest first.
	captures []capture
	// deferred holds blocks freed during a capture whose stream events
	// wait until no capture is underway.
	deferred []*block
	// routed makes getPool return route's sets (the default ones when
	// route is nil) whatever the captures say: a replay driver's choice
	// of the pool the recording shows.
	routed bool
	route  *privatePool
	// privateReserved and privateAllocated total the private pools.
	privateReserved, privateAllocated Stat
	// outside holds the segments kept outside the simulation
	// (AddUnmodelled).
	outside unmodelled
	// seedBatch, while not nil, holds the blocks seeding hands out or
	// leaves pending until EndSeedBatch puts them in their tables.
	seedBatch *seedBatch
}

// streamQueue is one stream's FIFO of outstanding events (cuda_events).
type streamQueue struct {
	stream int64
	events []event
	// done: events with seq <= done have completed on the device.
	done uint64
}

type event struct {
	b   *block
	seq uint64
}

// New creates an allocator with the given configuration on a fresh device.
// Like PyTorch it copies max_split_size into the statistics once, and
// applies the configuration's per_process_memory_fraction (2.10+).
func New(cfg Config, opts Options) (*Allocator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Capacity < 0 || opts.TotalMemory < 0 {
		return nil, errors.New("allocator: negative device capacity")
	}
	a := &Allocator{
		cfg:    cfg,
		v:      cfg.Version,
		dev:    newDevice(&opts),
		small:  blockPool{small: true},
		clock:  opts.Clock,
		tick:   deterministicEpoch,
		stacks: opts.Stacks,
	}
	a.hist.ring.setMax(1)
	a.stats.MaxSplitSize = cfg.maxSplitStat()
	if cfg.Version.fractionOneUnlimited() && cfg.PerProcessMemoryFraction < 1 {
		if err := a.SetMemoryFraction(cfg.PerProcessMemoryFraction); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Config returns the configuration in force.
func (a *Allocator) Config() Config { return a.cfg }

// Version is the PyTorch version being simulated.
func (a *Allocator) Version() Version { return a.v }

// Device returns the simulated device.
func (a *Allocator) Device() *Device { return a.dev }

// Stats returns a copy of the statistics.
// Segments kept outside the simulation (AddUnmodelled) count in them.
func (a *Allocator) Stats() Stats { return a.outside.withUnmodelled(a.stats) }

// NumOOMs is Stats().NumOOMs (num_ooms) without copying every statistic.
func (a *Allocator) NumOOMs() int64 { return a.stats.NumOOMs }

// AllocatedReserved returns Stats' allocated_bytes.all and
// reserved_bytes.all without copying every statistic: for callers that
// follow them after each call (a replay's observers).
func (a *Allocator) AllocatedReserved() (allocated, reserved Stat) {
	allocated, reserved = a.stats.AllocatedBytes[PoolAll], a.stats.ReservedBytes[PoolAll]
	if u := &a.outside; len(u.segs) > 0 {
		addKept(&allocated, &u.all.AllocatedBytes[PoolAll], &u.fromStart.AllocatedBytes[PoolAll])
		addKept(&reserved, &u.all.ReservedBytes[PoolAll], &u.fromStart.ReservedBytes[PoolAll])
	}
	return allocated, reserved
}

// BytesNow returns Stats' current allocated_bytes, reserved_bytes and
// active_bytes of pool p (PoolAll, PoolSmall or PoolLarge) without copying
// every statistic: for callers that sample them after each call (a
// timeline), where a Stats copy per entry was most of their allocation.
func (a *Allocator) BytesNow(p int) (allocated, reserved, active int64) {
	st := &a.stats
	allocated, reserved, active = st.AllocatedBytes[p].Current, st.ReservedBytes[p].Current, st.ActiveBytes[p].Current
	if u := &a.outside; len(u.segs) > 0 {
		allocated += u.all.AllocatedBytes[p].Current
		reserved += u.all.ReservedBytes[p].Current
		active += u.all.ActiveBytes[p].Current
	}
	return allocated, reserved, active
}

// MemoryStats returns torch.cuda.memory_stats(): PyTorch's flat keys with
// their values, sorted by key as PyTorch sorts them.
func (a *Allocator) MemoryStats() []KeyValue {
	st := a.Stats()
	return st.MemoryStats(a.v)
}

// ResetPeakStats is torch.cuda.reset_peak_memory_stats: every peak becomes
// the current value.
func (a *Allocator) ResetPeakStats() {
	a.stats.resetPeak()
	a.privateReserved.Peak = a.privateReserved.Current
	a.privateAllocated.Peak = a.privateAllocated.Current
	for _, pp := range a.pools {
		pp.reserved.Peak = pp.reserved.Current
		pp.allocated.Peak = pp.allocated.Current
	}
}

// ResetAccumulatedStats is torch.cuda.reset_accumulated_memory_stats: the
// allocated/freed totals and the event counters go back to zero.
func (a *Allocator) ResetAccumulatedStats() { a.stats.resetAccumulated() }

// SetAllocatorSettings is torch.cuda.memory._set_allocator_settings: the
// string is parsed on top of the current configuration (see
// Config.Reparse). The max_split_size statistic keeps its old value, as in
// PyTorch.
func (a *Allocator) SetAllocatorSettings(s string) error {
	cfg, err := a.cfg.Reparse(s)
	if err != nil {
		return err
	}
	a.cfg = cfg
	return nil
}

// SetMemoryFraction is torch.cuda.set_per_process_memory_fraction: from
// then on a segment is only obtained while reserved memory stays within
// fraction × device memory. Up to 2.9 any call (even 1.0) sets the limit
// and enables garbage collection; from 2.10 a fraction of 1.0 removes it.
func (a *Allocator) SetMemoryFraction(fraction float64) error {
	if !(fraction >= 0 && fraction <= 1) {
		return fmt.Errorf("Invalid fraction value: %s. Allowed range: 0~1", pyFloat(fraction))
	}
	if a.v.fractionOneUnlimited() {
		a.fractionSet, a.allowedMax = false, 0
		if fraction < 1 {
			a.fractionSet = true
			a.allowedMax = int64(fraction * float64(a.dev.totalMemory))
		}
		return nil
	}
	_, total := a.dev.MemGetInfo()
	a.fractionSet = true
	a.allowedMax = int64(fraction * float64(total))
	return nil
}

// MemoryFraction is torch.cuda.get_per_process_memory_fraction.
func (a *Allocator) MemoryFraction() float64 {
	if !a.fractionSet {
		return 1
	}
	total := a.dev.totalMemory
	if !a.v.fractionOneUnlimited() {
		_, total = a.dev.MemGetInfo()
	}
	return float64(a.allowedMax) / float64(total)
}

// pyFloat formats a float as Python's str() does for the values a
// fraction can take ("1.5", "2.0", "nan").
func pyFloat(f float64) string {
	if f != f {
		return "nan"
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eIN") {
		s += ".0"
	}
	return s
}

// gcEnabled: garbage collection (and its age bookkeeping) runs only with a
// memory fraction and a positive threshold.
func (a *Allocator) gcEnabled() bool {
	return a.fractionSet && a.cfg.GarbageCollectionThreshold > 0
}

// expandableFor is is_expandable_segments_active for a request to pool:
// the option is on and, before 2.4, the pool is not private (alloc_block
// of 2.1-2.3 cudaMallocs for private pools: "checkpointing logic for
// private pools doesn't support the expandable_segments_ structure yet").
func (a *Allocator) expandableFor(pool *blockPool) bool {
	return a.expandableOn() && (pool.owner == nil || a.v.PrivatePoolsExpandable())
}

// expandableOn: the expandable_segments option is on (and the version has
// it), whatever the pool.
func (a *Allocator) expandableOn() bool {
	return a.cfg.ExpandableSegments && a.v.HasExpandableSegments()
}

func (a *Allocator) poolFor(size int64) *blockPool {
	if size <= SmallSize {
		return &a.small
	}
	return &a.large
}

func (a *Allocator) newBlock() *block {
	if n := len(a.spare); n > 0 {
		b := a.spare[n-1]
		a.spare = a.spare[:n-1]
		return b
	}
	return new(block)
}

func (a *Allocator) recycle(b *block) {
	*b = block{}
	a.spare = append(a.spare, b)
}

// context is maybeGatherContext: the caller's stack is kept only when the
// history's context level reaches the level the call site asks for.
func (a *Allocator) context(level ContextLevel, stack snapshot.StackID) snapshot.StackID {
	if a.hist.context < level {
		return snapshot.NoStack
	}
	return stack
}

func orStack(s, fallback snapshot.StackID) snapshot.StackID {
	if s != snapshot.NoStack {
		return s
	}
	return fallback
}

// Malloc serves a request of size bytes on a stream, as
// NativeCachingAllocator::allocate does for a new tensor storage, and
// returns the block's address. stack is the caller's stack for the trace
// and snapshot (snapshot.NoStack if none).
//
// A request of 0 bytes returns address 0 without touching the allocator.
// Requests of 1 EiB or more fail at once with an *OOMError, without
// statistics or trace. When no memory can be found the error is an
// *OOMError with PyTorch's message for the version.
func (a *Allocator) Malloc(size int64, stream int64, stack snapshot.StackID) (uint64, error) {
	switch {
	case size < 0:
		return 0, fmt.Errorf("allocator: negative allocation size %d", size)
	case size >= OneEiB:
		return 0, &OOMError{Version: a.v, Device: a.dev.index, RequestedSize: size, OverOneEiB: true}
	case size == 0:
		return 0, nil
	}
	ctx := a.context(ContextState, stack)
	if !a.capturing() {
		// process_events queries CUDA events, illegal during a capture:
		// malloc skips it while any capture is underway.
		if len(a.deferred) > 0 {
			a.insertDeferredEvents()
		}
		if a.nEvents > 0 {
			a.processEvents(ctx)
		}
	} else if a.cfg.GraphCaptureRecordStreamReuse && len(a.deferred) > 0 {
		a.freeSafeBlocksInCapture(stream, ctx)
	}
	b, err := a.malloc(size, stream, ctx)
	if err != nil {
		return 0, err
	}
	a.allocated.put(b)
	return b.addr, nil
}

// allocParams is AllocParams: one request as it moves through the search
// and the fallbacks.
type allocParams struct {
	size       int64 // rounded
	allocSize  int64 // what a cache miss cudaMallocs
	stream     int64
	pool       *blockPool
	expandable bool // expandable segments active for this request
	block      *block
}

func (a *Allocator) malloc(orig int64, stream int64, ctx snapshot.StackID) (*block, error) {
	size := roundSize(orig, &a.cfg.RoundupPower2Divisions, a.v)
	pool := a.getPool(size, stream)
	p := allocParams{
		size:       size,
		allocSize:  AllocationSize(size),
		stream:     stream,
		pool:       pool,
		expandable: a.expandableFor(pool),
	}
	if !a.getFreeBlock(&p) {
		found, err := a.allocateWithFallbacks(&p, ctx)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, a.outOfMemory(&p, orig, ctx)
		}
	}
	return a.allocFoundBlock(&p, orig, ctx, a.shouldSplit(p.block, size)), nil
}

// allocateWithFallbacks runs the cache-miss path: garbage collection, a new
// segment, then freeing oversize cached blocks, then freeing every cached
// segment and retrying (each step only if the previous ones failed).
func (a *Allocator) allocateWithFallbacks(p *allocParams, ctx snapshot.StackID) (bool, error) {
	if a.gcEnabled() {
		if err := a.garbageCollect(ctx); err != nil {
			return false, err
		}
	}
	if ok, err := a.allocBlock(p, false, ctx); ok || err != nil {
		return ok, err
	}
	released, err := a.releaseAvailableCachedBlocks(p, ctx)
	if err != nil {
		return false, err
	}
	if released {
		if ok, err := a.allocBlock(p, false, ctx); ok || err != nil {
			return ok, err
		}
	}
	if a.capturing() {
		// No synchronizing release during a capture (malloc's
		// captures_underway check): the request fails here.
		return false, nil
	}
	a.releaseCachedBlocks(ctx)
	return a.allocBlock(p, true, ctx)
}

// getFreeBlock is get_free_block: best fit on the request's stream, with
// the expandable-size walk and the two oversize rules.
func (a *Allocator) getFreeBlock(p *allocParams) bool {
	pool := p.pool
	if a.gcEnabled() {
		pool.freeCalls++
	}
	it, ok := pool.blocks.lowerBound(freeKey{p.stream, p.size, 0})
	if !ok || it.k.stream != p.stream {
		return false
	}
	b := it.b
	if b.expandable() {
		if p.expandable {
			// For best fit an expandable block counts with the unmapped
			// space right after it; move on while the next candidate's
			// expandable size is strictly smaller.
			for b.expandable() {
				nx, ok := pool.blocks.after(b.key())
				if !ok || nx.k.stream != p.stream || expandableSize(nx.b) >= expandableSize(b) {
					break
				}
				b = nx.b
			}
		} else {
			// Expandable segments were switched off at runtime: only
			// cudaMalloc'd blocks may be used.
			for {
				nx, ok := pool.blocks.after(b.key())
				if !ok || nx.k.stream != p.stream {
					return false
				}
				if b = nx.b; !b.expandable() {
					break
				}
			}
		}
	}
	maxSplit := a.cfg.MaxSplitSize
	if uint64(p.size) < maxSplit && uint64(b.size) >= maxSplit {
		return false // never hand an oversize block to a small request
	}
	if uint64(p.size) >= maxSplit && uint64(b.size) >= uint64(p.size)+a.cfg.nonSplitTolerance() {
		return false // an oversize block may only be rounded up a little
	}
	pool.removeFree(b)
	p.block = b
	return true
}

func expandableSize(b *block) int64 {
	if b.next != nil && !b.next.mapped {
		return b.size + b.next.size
	}
	return b.size
}

// allocBlock is alloc_block: obtain new memory for the request, a
// cudaMalloc'd segment or pages of an expandable segment.
func (a *Allocator) allocBlock(p *allocParams, isRetry bool, ctx snapshot.StackID) (bool, error) {
	if isRetry {
		a.stats.NumAllocRetries++
	}
	size := p.allocSize
	if a.fractionSet && a.dev.obtained+size > a.allowedMax {
		return false, nil // refused without calling cudaMalloc
	}
	if p.expandable {
		b, err := a.tryAllocateExpandable(p, ctx)
		p.block = b
		return b != nil, err
	}
	if !a.dev.fits(size) {
		return false, nil
	}
	addr, _, err := a.dev.placeAt(SegmentRequest{Size: size, Stream: p.stream, Pool: p.pool.kind()}, &a.regions)
	if err != nil {
		return false, err
	}
	p.block = a.createSegment(addr, size, p.stream, p.pool, ctx)
	return true, nil
}

// createSegment records a successful cudaMalloc: a new region holding one
// free, unsplit block (not yet in the free set).
func (a *Allocator) createSegment(addr uint64, size, stream int64, pool *blockPool, ctx snapshot.StackID) *block {
	a.dev.obtained += size
	r := &region{base: addr, size: size, stream: stream, pool: pool}
	b := a.newBlock()
	*b = block{addr: addr, size: size, region: r, mapped: true}
	r.head = b
	a.regions.add(r)
	pi := pool.statIndex()
	a.stats.Segment.increase(pi, 1)
	a.stats.ReservedBytes.increase(pi, size)
	a.noteReserved(pool, size, 1)
	if uint64(size) >= a.cfg.MaxSplitSize {
		a.stats.OversizeSegments.increase(1)
	}
	a.stats.NumDeviceAlloc++
	a.record(snapshot.ActionSegmentAlloc, addr, size, stream, pool, ctx)
	b.segStack = ctx
	return b
}

// shouldSplit is should_split: small-pool blocks (and every block while
// expandable segments are on) split when at least 512 bytes would remain;
// large blocks only below max_split_size and with more than 1 MiB left.
// The test is the global setting (CUDAAllocatorConfig::expandable_segments()
// in should_split, 2.1 to 2.10), not whether the block's own pool maps
// expandable segments: a private pool's cudaMalloc'd blocks of 2.1-2.3
// (alloc_block excludes private pools from expandable segments there) split
// by the 512-byte rule too while the option is on.
func (a *Allocator) shouldSplit(b *block, size int64) bool {
	remaining := b.size - size
	if b.pool().small || a.expandableOn() {
		return remaining >= MinBlockSize
	}
	return uint64(size) < a.cfg.MaxSplitSize && remaining > SmallSize
}

// allocFoundBlock is alloc_found_block: hand out the front of the block
// (splitting off the rest, which keeps the old block object) and count it.
func (a *Allocator) allocFoundBlock(p *allocParams, orig int64, ctx snapshot.StackID, split bool) *block {
	b := p.block
	size := p.size
	pi := p.pool.statIndex()
	alreadySplit := b.isSplit()
	if split {
		rest := b
		b = a.newBlock()
		*b = block{addr: rest.addr, size: size, region: rest.region, mapped: true}
		b.prev = rest.prev
		if b.prev != nil {
			b.prev.next = b
		}
		b.next = rest
		rest.prev = b
		rest.addr += uint64(size)
		rest.size -= size
		p.pool.insertFree(rest)
		b.region.noteHead(b)
		if !b.expandable() {
			if alreadySplit {
				// An inactive split block shrinks by the part handed out.
				a.stats.InactiveSplitBytes.decrease(pi, size)
			} else {
				// A whole segment becomes split: its free rest is new.
				a.stats.InactiveSplitBytes.increase(pi, rest.size)
				a.stats.InactiveSplit.increase(pi, 1)
			}
		}
	} else if alreadySplit && !b.expandable() {
		a.stats.InactiveSplitBytes.decrease(pi, b.size)
		a.stats.InactiveSplit.decrease(pi, 1)
	}
	b.allocated = true
	b.requested = orig
	b.stack = ctx
	if a.v < V2_1 && a.hist.enabled {
		// 2.0's alloc_found_block: the split-off rest (the old block)
		// drops the chain's leading entries before its new start, then
		// the handed-out block does the same up to its end and pushes
		// this allocation (trimHistoryBefore, HistoryChain).
		if split {
			b.next.setHist(trimHistoryBefore(b.next.hist(), b.next.addr))
		}
		h := trimHistoryBefore(b.hist(), b.end())
		b.setHist(append(append(make([]snapshot.HistoryItem, 0, len(h)+1),
			snapshot.HistoryItem{Addr: b.addr, RealSize: orig, Stack: ctx}), h...))
	}
	a.record(snapshot.ActionAlloc, b.addr, orig, b.stream(), b.pool(), ctx)
	a.stats.Allocation.increase(pi, 1)
	a.stats.AllocatedBytes.increase(pi, b.size)
	a.stats.Active.increase(pi, 1)
	a.stats.ActiveBytes.increase(pi, b.size)
	a.stats.RequestedBytes.increase(pi, orig)
	a.noteAllocated(b.pool(), b.size)
	if uint64(b.size) >= a.cfg.MaxSplitSize {
		a.stats.OversizeAllocations.increase(1)
	}
	return b
}

// Free releases the block at addr, as the storage's deleter does. If the
// block was used on other streams (RecordStream) it stays active until
// events recorded now on those streams complete; otherwise it returns to
// the cache at once. stack is the caller's stack (used with the "all"
// context level).
func (a *Allocator) Free(addr uint64, stack snapshot.StackID) error {
	b := a.allocated.take(addr)
	if b == nil {
		return fmt.Errorf("invalid device pointer: %#x", addr)
	}
	a.free(b, a.context(ContextAll, stack))
	return nil
}

func (a *Allocator) free(b *block, ctx snapshot.StackID) {
	b.allocated = false
	pi := b.pool().statIndex()
	a.stats.Allocation.decrease(pi, 1)
	a.stats.AllocatedBytes.decrease(pi, b.size)
	a.noteAllocated(b.pool(), -b.size)
	a.record(snapshot.ActionFreeRequested, b.addr, b.requested, b.stream(), b.pool(), orStack(ctx, b.stack))
	if uint64(b.size) >= a.cfg.MaxSplitSize {
		a.stats.OversizeAllocations.decrease(1)
	}
	switch {
	case len(b.streamUses()) > 0 && len(a.captures) > 0 && !slices.Contains(b.streamUses(), heldStream):
		a.deferUntilNoCapture(b)
	case len(b.streamUses()) > 0:
		a.insertEvents(b)
	default:
		a.freeBlock(b, ctx)
	}
}

// RecordStream is Tensor.record_stream / caching_allocator's recordStream:
// the block at addr is in use on another stream, so freeing it must wait
// for that stream. The allocation stream itself is ignored.
func (a *Allocator) RecordStream(addr uint64, stream int64) error {
	b := a.allocated.get(addr)
	if b == nil {
		return fmt.Errorf("invalid device pointer: %#x", addr)
	}
	if u := b.streamUses(); stream != b.stream() && !slices.Contains(u, stream) {
		b.setStreamUses(append(u, stream))
	}
	return nil
}

// insertEvents records one event per stream the block was used on; the
// block is freed when all of them have completed.
func (a *Allocator) insertEvents(b *block) {
	u := b.streamUses()
	slices.Sort(u)
	for _, s := range u {
		a.enqueueEvent(s, b)
	}
	if b.extra.hist == nil {
		// Most uses are FreeDeferred's one pseudo-stream, on the pending
		// frees of a seeded snapshot: keeping an empty record per block
		// would cost more than making one again.
		b.extra = nil
	} else {
		b.setStreamUses(u[:0])
	}
	a.putPending(b)
}

func (a *Allocator) enqueueEvent(stream int64, b *block) {
	i, found := slices.BinarySearchFunc(a.streams, stream, func(q *streamQueue, s int64) int {
		switch {
		case uint64(q.stream) < uint64(s):
			return -1
		case q.stream == s:
			return 0
		}
		return 1
	})
	if !found {
		a.streams = slices.Insert(a.streams, i, &streamQueue{stream: stream})
	}
	a.eventSeq++
	q := a.streams[i]
	q.events = append(q.events, event{b: b, seq: a.eventSeq})
	b.eventCount++
	a.nEvents++
}

// CompleteStreamEvents tells the simulator that the device has finished all
// work submitted to a stream so far: every event recorded on it until now
// has completed. The blocks waiting for them are freed at the start of the
// next Malloc (or by EmptyCache), as PyTorch polls events only there.
func (a *Allocator) CompleteStreamEvents(stream int64) {
	for _, q := range a.streams {
		if q.stream == stream {
			q.done = a.eventSeq
		}
	}
}

// CompleteAllStreamEvents completes every outstanding event on every
// stream (the device is idle). Frees held by FreeDeferred are not events of
// a real stream and stay pending.
func (a *Allocator) CompleteAllStreamEvents() {
	for _, q := range a.streams {
		if q.stream != heldStream {
			q.done = a.eventSeq
		}
	}
}

// processEvents is process_events: per stream, pop completed events from
// the front of the queue and free blocks whose last event completed.
// Streams are walked in ascending id; PyTorch walks its unordered map in
// hash order, so with completions on several streams in one pass the
// inactive_split counters may differ (see a.streams).
func (a *Allocator) processEvents(ctx snapshot.StackID) {
	kept := a.streams[:0]
	for _, q := range a.streams {
		n := 0
		for n < len(q.events) && q.events[n].seq <= q.done {
			b := q.events[n].b
			a.nEvents--
			if b.eventCount--; b.eventCount == 0 {
				a.freeBlock(b, ctx)
			}
			n++
		}
		q.events = slices.Delete(q.events, 0, n)
		if len(q.events) > 0 {
			kept = append(kept, q)
		}
	}
	clear(a.streams[len(kept):])
	a.streams = kept
}

// synchronizeAndFreeEvents waits for every outstanding event and frees the
// blocks that were waiting.
func (a *Allocator) synchronizeAndFreeEvents(ctx snapshot.StackID) {
	a.stats.NumSyncAllStreams++
	// "Might as well make sure capture-deferred end of life events get
	// processed too" (synchronize_and_free_events).
	if len(a.deferred) > 0 {
		a.insertDeferredEvents()
	}
	for _, q := range a.streams {
		for _, e := range q.events {
			if e.b.eventCount--; e.b.eventCount == 0 {
				a.freeBlock(e.b, ctx)
			}
		}
	}
	clear(a.streams)
	a.streams = a.streams[:0]
	a.nEvents = 0
}

// freeBlock is free_block: return a block to its pool, merging it with
// free neighbours of the same mapped state. The freed block's object
// survives the merge.
func (a *Allocator) freeBlock(b *block, ctx snapshot.StackID) {
	a.record(snapshot.ActionFreeCompleted, b.addr, b.requested, b.stream(), b.pool(), orStack(ctx, b.stack))
	a.pending.take(b.addr)
	b.stack = snapshot.NoStack
	origSize, req := b.size, b.requested
	netBlocks, netBytes := int64(0), int64(0)
	for _, cand := range [2]*block{b.prev, b.next} {
		if n := a.tryMerge(b, cand); n > 0 {
			netBlocks--
			netBytes -= n
		}
	}
	b.pool().insertFree(b)
	if b.isSplit() {
		netBlocks++
		netBytes += b.size
	}
	pi := b.pool().statIndex()
	// Expandable segments are left out of inactive_split: their free pages
	// can always be released.
	if !b.expandable() {
		adjust(&a.stats.InactiveSplit, pi, netBlocks)
		adjust(&a.stats.InactiveSplitBytes, pi, netBytes)
	}
	a.stats.Active.decrease(pi, 1)
	a.stats.ActiveBytes.decrease(pi, origSize)
	a.stats.RequestedBytes.decrease(pi, req)
}

// trimHistoryBefore is 2.0's trimHistoryBefore: drop the chain's leading
// entries whose address is before point (it stops at the first entry at or
// past point, so entries behind it stay even when they are outside the
// block).
func trimHistoryBefore(h []snapshot.HistoryItem, point uint64) []snapshot.HistoryItem {
	for len(h) > 0 && h[0].Addr < point {
		h = h[1:]
	}
	if len(h) == 0 {
		return nil
	}
	return h
}

// joinHistory is 2.0's try_merge_blocks on the two chains: the lower
// block's chain, then the upper block's. It makes a new slice: chains are
// shared by clones and never changed in place.
func joinHistory(lo, hi []snapshot.HistoryItem) []snapshot.HistoryItem {
	if len(hi) == 0 {
		return lo
	}
	if len(lo) == 0 {
		return hi
	}
	return append(append(make([]snapshot.HistoryItem, 0, len(lo)+len(hi)), lo...), hi...)
}

func adjust(s *StatArray, pool int, delta int64) {
	if delta > 0 {
		s.increase(pool, delta)
	} else if delta < 0 {
		s.decrease(pool, -delta)
	}
}

// tryMerge is try_merge_blocks: absorb src into dst if src is free and in
// the same mapped state. dst must not be in a free set. Returns the bytes
// absorbed.
func (a *Allocator) tryMerge(dst, src *block) int64 {
	if src == nil || !src.free() || dst.mapped != src.mapped {
		return 0
	}
	if dst.prev == src {
		dst.addr = src.addr
		dst.prev = src.prev
		if dst.prev != nil {
			dst.prev.next = dst
		}
		// The segment's allocation stack moves with the segment start.
		dst.segStack = src.segStack
		dst.region.noteHead(dst)
		dst.setHist(joinHistory(src.hist(), dst.hist()))
	} else {
		dst.next = src.next
		if dst.next != nil {
			dst.next.prev = dst
		}
		dst.setHist(joinHistory(dst.hist(), src.hist()))
	}
	n := src.size
	dst.size += n
	if src.mapped {
		src.pool().removeFree(src)
	} else {
		src.pool().removeUnmapped(src)
	}
	a.recycle(src)
	return n
}
