package allocator

import (
	"fmt"
	"math"
	"slices"

	"github.com/memstat/memstat/pkg/snapshot"
)

// This file holds the controls a trace-replay driver (pkg/replay, which
// follows a recording) needs and PyTorch does not have. They are kept apart from the decision path above: nothing here
// is called by Malloc, Free or EmptyCache.
//
//   - Seeding (SeedSegment) builds a starting state for a trace that begins
//     mid-run: segments and blocks that existed before recording. Seeding
//     records no trace entries; statistics change exactly as the operations
//     that built the state would have changed them.
//   - Forcing (Force*) makes the state follow a recorded trace where the
//     simulator's own decision differs: a segment at a dictated address and
//     size, pages mapped or released where the trace says, a block placed at
//     a dictated address. Forced operations are recorded in the trace and
//     the statistics like real ones and are counted by ForcedOperations.
//   - Deferred frees (FreeDeferred, CompletePendingFree) reproduce a
//     free_requested whose free_completed comes later, without knowing the
//     streams that delayed it.
//   - Inspection (the accessors at the end of this file) lets the driver
//     read the state it compares with a recording without copying it.

// heldStream is the pseudo-stream that FreeDeferred's events wait on. No
// real stream handle has this value, so only CompletePendingFree, the
// synchronization in EmptyCache and the OOM fallback complete them.
const heldStream int64 = math.MinInt64

// FreeDeferred frees the block at addr like Free, but keeps it active
// (active_pending_free) as if it had been used on a stream the simulator
// does not know: it returns to the cache at CompletePendingFree, or when
// EmptyCache or the last OOM fallback synchronizes all streams.
func (a *Allocator) FreeDeferred(addr uint64, stack snapshot.StackID) error {
	b := a.allocated.take(addr)
	if b == nil {
		return fmt.Errorf("invalid device pointer: %#x", addr)
	}
	a.freeDeferred(b, stack)
	return nil
}

// freeDeferred is FreeDeferred of b, taken out of the handed-out blocks'
// table (or never put in it).
func (a *Allocator) freeDeferred(b *block, stack snapshot.StackID) {
	b.setStreamUses(append(b.streamUses()[:0], heldStream))
	a.free(b, a.context(ContextAll, stack))
}

// CompletePendingFree completes every outstanding event of the freed block
// at addr and returns it to the cache now (its free_completed).
func (a *Allocator) CompletePendingFree(addr uint64, stack snapshot.StackID) error {
	b := a.pending.get(addr)
	if b == nil {
		return fmt.Errorf("allocator: no block awaiting events at %#x", addr)
	}
	left := b.eventCount
	kept := a.streams[:0]
	for _, q := range a.streams {
		for left > 0 && q.removeEventOf(b) {
			a.nEvents--
			left--
		}
		if len(q.events) > 0 {
			kept = append(kept, q)
		}
	}
	clear(a.streams[len(kept):])
	a.streams = kept
	b.eventCount = 0
	a.freeBlock(b, a.context(ContextAll, stack))
	return nil
}

// removeEventOf removes one event of b from the queue, keeping the order
// of the others, and reports whether there was one. It looks from both
// ends at once and moves the shorter side: a replay completes held frees
// mostly right after they were requested (at the back) or in the order
// they were requested (at the front), and scanning and compacting the
// whole queue each time made traces with many pending frees quadratic.
func (q *streamQueue) removeEventOf(b *block) bool {
	ev := q.events
	for i, j := 0, len(ev)-1; i <= j; i, j = i+1, j-1 {
		switch {
		case ev[i].b == b:
			copy(ev[1:i+1], ev[:i])
			ev[0] = event{}
			q.events = ev[1:]
			return true
		case ev[j].b == b:
			copy(ev[j:], ev[j+1:])
			ev[len(ev)-1] = event{}
			q.events = ev[:len(ev)-1]
			return true
		}
	}
	return false
}

// RouteToPool makes the pool id ((0, 0): the default pools) receive every
// request from now on, whatever the captures say, and makes the Seed* and
// Force* calls create segments there; a private pool that does not exist
// is created (kind unknown, use_count 1: alive). A replay driver uses it
// to put each recorded call in the pool the recording shows. EndRoute
// gives get_pool its own choice back.
func (a *Allocator) RouteToPool(id snapshot.PoolID) {
	a.routed, a.route = true, nil
	if id.IsDefault() {
		return
	}
	pp := a.poolByID(id)
	if pp == nil {
		pp, _ = a.createOrIncrefPool(id, KindOfPoolID(id))
	}
	a.route = pp
}

// EndRoute ends RouteToPool.
func (a *Allocator) EndRoute() { a.routed, a.route = false, nil }

// MarkPoolReleased records that the program released pool id (its
// use_count reached 0): a replay driver learns it when the recording shows
// empty_cache returning the pool's segments.
func (a *Allocator) MarkPoolReleased(id snapshot.PoolID) {
	if pp := a.poolByID(id); pp != nil && pp.useCount > 0 {
		pp.useCount, pp.freeable = 0, true
	}
}

// PoolOf returns the pool id of the segment holding addr, and false if no
// segment holds it.
func (a *Allocator) PoolOf(addr uint64) (snapshot.PoolID, bool) {
	r := a.regions.find(addr)
	if r == nil {
		return snapshot.PoolID{}, false
	}
	return r.pool.id, true
}

// poolOfKind is the block set of a kind in the routed pool (the default
// pools unless RouteToPool chose a private one).
func (a *Allocator) poolOfKind(kind snapshot.Pool) *blockPool {
	if a.routed && a.route != nil {
		if kind == snapshot.SmallPool {
			return &a.route.small
		}
		return &a.route.large
	}
	if kind == snapshot.SmallPool {
		return &a.small
	}
	return &a.large
}

func (a *Allocator) pageOf(pool *blockPool) int64 {
	if pool.small {
		return SmallBuffer
	}
	return LargeBuffer
}

// SeedSegment adds a segment, with its blocks, that existed before the
// simulation started; the argument has the form the snapshot reader
// produces. A cudaMalloc'd segment is created at its address; an
// expandable one is mapped into the reservation that contains its address
// (see SeedReservation), or into a new reservation starting at its address.
// Blocks in state active_allocated become allocations with their size,
// requested size and stack; active_pending_free blocks become freed blocks
// waiting as after FreeDeferred; inactive blocks stay free and keep their
// (possibly stale) requested size. Blocks not listed are free. The device's
// capacity is not checked: the state is known to have existed. A segment
// of a private pool (segment_pool_id other than (0, 0)) goes to that pool,
// created alive if it does not exist yet.
func (a *Allocator) SeedSegment(seg snapshot.Segment) error {
	routed, route := a.routed, a.route
	a.RouteToPool(seg.PoolID)
	defer func() { a.routed, a.route = routed, route }()
	if seg.TotalSize <= 0 {
		return fmt.Errorf("allocator: seeded segment %#x has size %d", seg.Address, seg.TotalSize)
	}
	if err := validateSeedBlocks(&seg); err != nil {
		return err
	}
	a.mute = true
	defer func() { a.mute = false }()
	pool := a.poolOfKind(seg.Pool)
	if seg.Expandable {
		if err := a.forceMap(seg.Address, seg.TotalSize, seg.Stream, pool, seg.Stack); err != nil {
			return err
		}
	} else {
		if err := a.forceSegment(seg.Address, seg.TotalSize, seg.Stream, pool, seg.Stack); err != nil {
			return err
		}
		// The segment's free blocks enter the free set once its layout
		// is complete (see blockPool.seeding), also when seeding fails
		// half-way.
		r := a.regions.find(seg.Address)
		for b := r.head; b != nil; b = b.next {
			if b.mapped && b.free() {
				pool.removeFree(b)
			}
		}
		pool.seeding = true
		defer func() {
			pool.seeding = false
			for b := r.head; b != nil; b = b.next {
				if b.mapped && b.free() {
					pool.insertFree(b)
				}
			}
		}()
	}
	// The blocks are laid out front to back, so the block holding the
	// next one's address is found by walking on from the last one placed
	// (a search from the segment's head for each made seeding quadratic
	// in the blocks of a segment).
	r := a.regions.find(seg.Address)
	cur := r.blockAt(seg.Address)
	for _, sb := range seg.Blocks {
		if !sb.State.Active() {
			continue
		}
		for cur != nil && cur.end() <= sb.Address {
			cur = cur.next
		}
		nb, err := a.forceMallocAt(cur, sb.Address, sb.RequestedSize, sb.Size, seg.Stream, sb.Stack)
		if err != nil {
			return err
		}
		cur = nb
		if sb.State == snapshot.ActivePendingFree {
			// FreeDeferred of a block never put in the table of
			// handed-out ones (Malloc then FreeDeferred, without the
			// table's insert and delete in between).
			a.freeDeferred(nb, snapshot.NoStack)
		} else {
			a.putAllocated(nb)
		}
	}
	// Free blocks keep the requested size of their last allocation.
	cur = r.blockAt(seg.Address)
	for _, sb := range seg.Blocks {
		if sb.State.Active() {
			continue
		}
		for cur != nil && cur.end() <= sb.Address {
			cur = cur.next
		}
		if cur != nil && cur.addr == sb.Address {
			cur.requested = sb.RequestedSize
		}
	}
	if head := r.blockAt(seg.Address); head != nil {
		head.segStack = seg.Stack
	}
	return nil
}

func validateSeedBlocks(seg *snapshot.Segment) error {
	at := seg.Address
	for i, b := range seg.Blocks {
		if b.Address != at || b.Size <= 0 {
			return fmt.Errorf("allocator: seeded segment %#x: block %d at %#x (size %d) does not follow the previous one", seg.Address, i, b.Address, b.Size)
		}
		at += uint64(b.Size)
	}
	if len(seg.Blocks) > 0 && at != seg.End() {
		return fmt.Errorf("allocator: seeded segment %#x: blocks cover %d of %d bytes", seg.Address, at-seg.Address, seg.TotalSize)
	}
	return nil
}

// SeedReservation creates the (empty) address reservation of an expandable
// segment at base, so that later seeded or forced maps land in it. Replay
// drivers learn base from the first segment_map outside known reservations.
func (a *Allocator) SeedReservation(base uint64, stream int64, pool snapshot.Pool, id snapshot.PoolID) error {
	routed, route := a.routed, a.route
	a.RouteToPool(id)
	defer func() { a.routed, a.route = routed, route }()
	p := a.poolOfKind(pool)
	_, err := a.reserveAt(base, stream, p)
	return err
}

// PlaceGuessedReservation takes a recorded segment_map at base that lies
// in no reservation the recording placed: if an empty reservation of the
// stream and pool kind has a base the simulator guessed (an allocation
// that ran out of memory leaves its new reservation unmapped, at an
// address the trace never shows), it moves there. A new reservation is
// mapped from its base, and find_expandable_block takes an empty
// reservation of the stream before it makes another. It reports whether
// one was moved.
func (a *Allocator) PlaceGuessedReservation(base uint64, stream int64, small bool) bool {
	if in := a.regions.find(base); in != nil && !(in.guessedBase && in.mappedBytes == 0) {
		return false
	}
	if base == 0 || base%MinBlockSize != 0 {
		return false
	}
	for _, r := range a.regions.list {
		if !r.guessedBase || r.mappedBytes != 0 || r.stream != stream || r.pool.small != small {
			continue
		}
		// Any other region in the way refuses the move; r's own old
		// range may be the lowest one overlapping, so looking at the
		// lowest alone let a move overlap a region above it.
		if a.regions.overlapsOther(base, r.size, r) {
			return false
		}
		b := r.head
		r.pool.removeUnmapped(b)
		a.regions.remove(r)
		r.base, b.addr, r.guessedBase = base, base, false
		a.regions.add(r)
		r.pool.insertUnmapped(b)
		return true
	}
	return false
}

// TraceLen is the number of trace entries recorded since the trace was
// last cleared (ClearTrace): in a follow replay, how far the allocator
// call being tried has come.
func (a *Allocator) TraceLen() int { return len(a.hist.ring.buf) }

func (a *Allocator) reserveAt(base uint64, stream int64, pool *blockPool) (*region, error) {
	page := a.pageOf(pool)
	if base == 0 || base%MinBlockSize != 0 {
		return nil, fmt.Errorf("allocator: reservation address %#x is not 512-byte aligned", base)
	}
	if a.regions.overlapping(base, a.dev.reservationSize(page)) != nil {
		return nil, fmt.Errorf("allocator: reservation at %#x overlaps a live segment", base)
	}
	b, err := a.createReservation(base, stream, pool, page, true)
	if err != nil {
		return nil, err
	}
	return b.region, nil
}

// ForceSegment performs a cudaMalloc of size bytes at addr, as the trace
// shows it, whatever the simulator would have done. The new segment is one
// free block in the cache. The device's capacity is not checked.
func (a *Allocator) ForceSegment(addr uint64, size, stream int64, pool snapshot.Pool, stack snapshot.StackID) error {
	if err := a.forceSegment(addr, size, stream, a.poolOfKind(pool), a.context(ContextState, stack)); err != nil {
		return err
	}
	a.forced++
	return nil
}

func (a *Allocator) forceSegment(addr uint64, size, stream int64, pool *blockPool, ctx snapshot.StackID) error {
	if addr == 0 || addr%MinBlockSize != 0 || size <= 0 {
		return fmt.Errorf("allocator: bad segment %#x size %d", addr, size)
	}
	for {
		// An empty expandable reservation where the recording puts a
		// segment: the real allocator had released it (its pages were
		// all unmapped), the replay had not. It holds no memory.
		o := a.regions.overlapping(addr, size)
		if o == nil {
			break
		}
		if !o.expandable || o.mappedBytes != 0 {
			return fmt.Errorf("allocator: segment %#x (+%d) overlaps a live segment", addr, size)
		}
		a.releaseReservation(o.head)
	}
	b := a.createSegment(addr, size, stream, pool, ctx)
	pool.insertFree(b)
	return nil
}

// ForceMap maps the pages covering [addr, addr+size) of an expandable
// segment, as a recorded segment_map shows. The range must start on a page
// of the reservation containing addr and lie in its unmapped space; without
// a reservation there, one is created starting at addr. The device's
// capacity is not checked.
func (a *Allocator) ForceMap(addr uint64, size, stream int64, pool snapshot.Pool, stack snapshot.StackID) error {
	if err := a.forceMap(addr, size, stream, a.poolOfKind(pool), a.context(ContextState, stack)); err != nil {
		return err
	}
	a.forced++
	return nil
}

func (a *Allocator) forceMap(addr uint64, size, stream int64, pool *blockPool, ctx snapshot.StackID) error {
	if size <= 0 {
		return fmt.Errorf("allocator: map of %d bytes", size)
	}
	r := a.regions.find(addr)
	if r != nil && r.expandable && r.mappedBytes == 0 && !r.canMap(addr, size, stream, pool) {
		// An empty reservation where the recording maps something else:
		// the simulator made it on its own (an allocation that then ran
		// out of memory leaves its new reservation unmapped) at an
		// address the trace never shows. It holds no memory; the
		// recording's reservation takes its place.
		a.releaseReservation(r.head)
		r = nil
	}
	if r == nil {
		for {
			o := a.regions.overlapping(addr, a.dev.reservationSize(a.pageOf(pool)))
			if o == nil || !o.expandable || o.mappedBytes != 0 {
				break
			}
			a.releaseReservation(o.head)
		}
		var err error
		if r, err = a.reserveAt(addr, stream, pool); err != nil {
			return err
		}
	}
	if !r.expandable || r.stream != stream || r.pool != pool {
		return fmt.Errorf("allocator: %#x is not in an expandable segment of stream %d, %s pool", addr, stream, pool.kind())
	}
	if (addr-r.base)%uint64(r.page) != 0 {
		return fmt.Errorf("allocator: map at %#x is not page-aligned in the reservation at %#x", addr, r.base)
	}
	u := r.blockAt(addr)
	pages := (size + r.page - 1) / r.page * r.page
	if u.mapped || addr+uint64(pages) > u.end() {
		return fmt.Errorf("allocator: [%#x, +%d) is not unmapped address space", addr, pages)
	}
	if addr > u.addr {
		// Cut the unmapped block so that the mapped range starts a block.
		pool.removeUnmapped(u)
		rest := a.newBlock()
		*rest = block{addr: addr, size: int64(u.end() - addr), region: r}
		rest.prev, rest.next = u, u.next
		if u.next != nil {
			u.next.prev = rest
		}
		u.next = rest
		u.size = int64(addr - u.addr)
		pool.insertUnmapped(u)
		pool.insertUnmapped(rest)
		u = rest
	}
	// Forced: the memory is known to have been there, whatever the
	// simulated capacity says.
	a.mapBlock(u, size, ctx, false)
	return nil
}

// noSegmentError is a forced allocation at an address no segment holds,
// the usual error when a trace and its snapshot disagree (once per entry
// on such traces): its text is made only when it is read.
type noSegmentError uint64

func (e noSegmentError) Error() string {
	return fmt.Sprintf("allocator: no segment at %#x", uint64(e))
}

// ProcessEvents frees the pending blocks whose stream events have
// completed, as every allocation does first (malloc's process_events):
// what ForceMalloc does before it finds that no segment holds its
// address, for a driver that knows that already (InRegion) and has no
// use for the error, which costs an allocation each (a follow replay of
// a trace that disagrees with its snapshot, once per entry).
func (a *Allocator) ProcessEvents(stack snapshot.StackID) {
	if a.nEvents > 0 {
		a.processEvents(a.context(ContextState, stack))
	}
}

// ForceMalloc serves a request of size bytes at addr, where the recorded
// trace placed it, instead of where the simulator would. addr must lie in a
// free block of the request's stream and pool. With blockSize 0 the block
// is cut like PyTorch cuts a free block starting at addr (should_split);
// otherwise exactly blockSize bytes are handed out. Pending events are
// processed first, as Malloc does.
func (a *Allocator) ForceMalloc(addr uint64, size, blockSize, stream int64, stack snapshot.StackID) error {
	ctx := a.context(ContextState, stack)
	a.ProcessEvents(stack)
	if err := a.forceMalloc(addr, size, blockSize, stream, ctx); err != nil {
		return err
	}
	a.forced++
	return nil
}

func (a *Allocator) forceMalloc(addr uint64, size, blockSize, stream int64, ctx snapshot.StackID) error {
	if size <= 0 || blockSize < 0 {
		return fmt.Errorf("allocator: forced allocation of %d bytes (block %d)", size, blockSize)
	}
	r := a.regions.find(addr)
	if r == nil {
		return noSegmentError(addr)
	}
	_, err := a.forceMallocIn(r.blockAt(addr), addr, size, blockSize, stream, ctx)
	return err
}

// forceMallocIn is forceMalloc once the block b holding addr is found; it
// returns the block handed out.
func (a *Allocator) forceMallocIn(b *block, addr uint64, size, blockSize, stream int64, ctx snapshot.StackID) (*block, error) {
	nb, err := a.forceMallocAt(b, addr, size, blockSize, stream, ctx)
	if err != nil {
		return nil, err
	}
	a.allocated.put(nb)
	return nb, nil
}

// forceMallocAt is forceMallocIn but for the handed-out blocks' table,
// which the caller puts the block in (or not, SeedSegment's pending ones).
func (a *Allocator) forceMallocAt(b *block, addr uint64, size, blockSize, stream int64, ctx snapshot.StackID) (*block, error) {
	if size <= 0 || blockSize < 0 {
		return nil, fmt.Errorf("allocator: forced allocation of %d bytes (block %d)", size, blockSize)
	}
	rounded := roundSize(size, &a.cfg.RoundupPower2Divisions, a.v)
	need := rounded
	if blockSize > 0 {
		need = blockSize
	}
	switch {
	case b == nil || b.addr > addr:
		return nil, noSegmentError(addr)
	case !b.mapped || !b.free():
		return nil, fmt.Errorf("allocator: %#x is not in a free block", addr)
	case b.stream() != stream:
		return nil, fmt.Errorf("allocator: block at %#x belongs to stream %d, not %d", addr, b.stream(), stream)
	case addr+uint64(need) > b.end():
		return nil, fmt.Errorf("allocator: %d bytes at %#x do not fit the free block [%#x, %#x)", need, addr, b.addr, b.end())
	case blockSize == 0 && b.pool().small != (rounded <= SmallSize):
		return nil, fmt.Errorf("allocator: a %d-byte request does not belong in the %s pool", size, b.pool().kind())
	}
	if addr > b.addr {
		b = a.splitFree(b, addr)
	}
	b.pool().removeFree(b)
	p := allocParams{
		size:       need,
		allocSize:  AllocationSize(rounded),
		stream:     stream,
		pool:       b.pool(),
		expandable: a.expandableFor(b.pool()),
		block:      b,
	}
	split := b.size > need
	if blockSize == 0 {
		split = a.shouldSplit(b, need)
	}
	return a.allocFoundBlock(&p, size, ctx, split), nil
}

// splitFree cuts the free mapped block b at addr: b keeps the front, a new
// free block takes the rest. inactive_split counts both parts.
func (a *Allocator) splitFree(b *block, at uint64) *block {
	pool := b.pool()
	pool.removeFree(b)
	wasSplit := b.isSplit()
	rest := a.newBlock()
	*rest = block{addr: at, size: int64(b.end() - at), region: b.region, mapped: true}
	rest.prev, rest.next = b, b.next
	if b.next != nil {
		b.next.prev = rest
	}
	b.next = rest
	b.size = int64(at - b.addr)
	pool.insertFree(b)
	pool.insertFree(rest)
	if !b.expandable() {
		pi := pool.statIndex()
		if wasSplit {
			a.stats.InactiveSplit.increase(pi, 1)
		} else {
			a.stats.InactiveSplit.increase(pi, 2)
			a.stats.InactiveSplitBytes.increase(pi, b.size+rest.size)
		}
	}
	return rest
}

// ForceRelease returns memory to the device where the trace shows a
// segment_free or segment_unmap the simulator did not produce: a whole free
// cudaMalloc'd segment starting at addr (size must be its size, or 0), or
// the pages [addr, addr+size) of a free range of an expandable segment.
func (a *Allocator) ForceRelease(addr uint64, size int64, stack snapshot.StackID) error {
	ctx := a.context(ContextAll, stack)
	r := a.regions.find(addr)
	if r == nil {
		return fmt.Errorf("allocator: no segment at %#x", addr)
	}
	if !r.expandable {
		b := r.head
		if addr != r.base || (size != 0 && size != r.size) || !b.free() || b.isSplit() {
			return fmt.Errorf("allocator: %#x is not a whole free segment", addr)
		}
		a.releaseBlock(b, ctx)
		a.forced++
		return nil
	}
	b := r.blockAt(addr)
	page := uint64(r.page)
	if !b.mapped || !b.free() || size <= 0 || (addr-r.base)%page != 0 || uint64(size)%page != 0 || addr+uint64(size) > b.end() {
		return fmt.Errorf("allocator: [%#x, +%d) is not whole free pages", addr, size)
	}
	if addr > b.addr {
		b = a.splitFree(b, addr)
	}
	if addr+uint64(size) < b.end() {
		a.splitFree(b, addr+uint64(size))
	}
	a.unmapBlock(b, ctx)
	if b.prev == nil && b.next == nil {
		a.releaseReservation(b)
	}
	a.forced++
	return nil
}

// canMap reports whether the recorded map of size bytes at addr fits the
// expandable reservation r as it is: same stream and pool, on a page
// boundary, in unmapped address space.
func (r *region) canMap(addr uint64, size, stream int64, pool *blockPool) bool {
	if !r.expandable || r.stream != stream || r.pool != pool || (addr-r.base)%uint64(r.page) != 0 {
		return false
	}
	u := r.blockAt(addr)
	pages := (size + r.page - 1) / r.page * r.page
	return u != nil && !u.mapped && addr+uint64(pages) <= u.end()
}

// ForceOOM records a recorded out-of-memory error the simulator did not
// reproduce: the oom trace entry and num_ooms.
func (a *Allocator) ForceOOM(e snapshot.TraceEntry, stream int64) {
	a.record(snapshot.ActionOOM, e.Addr, e.Size, stream, a.getPool(a.cfg.RoundSize(e.Size), stream), a.context(ContextState, e.Stack))
	a.stats.NumOOMs++
}

// OrderHeldFrees puts the frees held for the replay (FreeDeferred) in the
// order the recorded free_completed entries complete them, so that a
// synchronization inside the next call frees (and merges) them in the
// recorded order; PyTorch's own order follows its per-stream event queues
// in hash-map order, which the trace shows and the replay cannot know.
func (a *Allocator) OrderHeldFrees(entries []snapshot.TraceEntry) {
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

// EmptyCacheCapturing is empty_cache() called while a graph is being
// captured, as 2.9 runs it (Version.CapturesGuardEmptyCache): only the
// private pools that may be freed return their segments. A driver that
// sees such a release run in a recording replays it with this.
func (a *Allocator) EmptyCacheCapturing(stack snapshot.StackID) {
	a.releaseFreeablePools(a.context(ContextAll, stack))
}

// ResetForcedOperations restarts the ForcedOperations count: a driver
// counts only what it forced inside the recorded window, not while
// building the state before it.
func (a *Allocator) ResetForcedOperations() { a.forced = 0 }

// ClearTrace empties the trace ring: a driver that compares each call's
// entries (Trace) with a recording clears it between calls.
func (a *Allocator) ClearTrace() { a.hist.ring.clear() }

// SimulatedStats is the simulated state's statistics without the segments
// kept outside the simulation (Stats adds them), read in place: a driver
// that looks at the peaks after every entry must not copy them each time.
// The caller must not modify them.
func (a *Allocator) SimulatedStats() *Stats { return &a.stats }

// UnmodelledStats are the current figures of the segments kept outside the
// simulation (AddUnmodelled): all of them, and those kept since before
// MarkWindowStart, which count in the window's peaks too. Read in place;
// the caller must not modify them.
func (a *Allocator) UnmodelledStats() (all, fromStart *Stats) {
	return &a.outside.all, &a.outside.fromStart
}

// PendingFree reports whether the block at addr waits for its stream
// events (active_pending_free) before it returns to the cache.
func (a *Allocator) PendingFree(addr uint64) bool { return a.pending.get(addr) != nil }

// InRegion reports whether addr lies in a simulated region (a cudaMalloc'd
// segment or an expandable segment's reservation): a driver that dictates
// where a new reservation starts looks for a recorded map outside all of
// them.
func (a *Allocator) InRegion(addr uint64) bool { return a.regions.find(addr) != nil }

// PoolHoldsSegments reports whether private pool id exists and holds a
// segment (or a mapped range).
func (a *Allocator) PoolHoldsSegments(id snapshot.PoolID) bool {
	pp := a.poolByID(id)
	return pp != nil && a.hasRegionsOf(pp)
}

// LivePrivatePools are the private pools still in use (use_count > 0),
// the ones a call of a recording may have been routed to.
func (a *Allocator) LivePrivatePools() []snapshot.PoolID {
	var ids []snapshot.PoolID
	for _, pp := range a.pools {
		if pp.useCount > 0 {
			ids = append(ids, pp.id)
		}
	}
	return ids
}

// NumRegions is the number of simulated regions, in address order; with
// RegionBase and EachSegmentOfRegions it lets a driver walk the state in
// parts at once (comparing a state of a million blocks on two cores).
func (a *Allocator) NumRegions() int { return len(a.regions.list) }

// RegionBase is the first address of region i.
func (a *Allocator) RegionBase(i int) uint64 { return a.regions.list[i].base }

// EachSegmentOfRegions is EachSegment over regions from..to-1. It only
// reads the allocator: calls on disjoint ranges may run at once.
func (a *Allocator) EachSegmentOfRegions(from, to int, buf []snapshot.Block, fn func(seg *snapshot.Segment)) {
	a.eachSegmentOf(a.regions.list[from:to], buf, fn)
}

// ResizeAllocated changes the size of the allocated (or pending-free)
// block at addr to size after the fact, taking the bytes from, or giving
// them to, the free block after it. A replay needs it where the recording
// shows that a block was split (a later allocation inside it) or was not
// (the final segments) although the replay decided otherwise, under a
// setting changed at runtime that the recording does not show
// (should_split depends on the current expandable_segments). Only the
// current figures change: the cumulative and peak figures of such a replay
// are bounds, not the simulator's.
func (a *Allocator) ResizeAllocated(addr uint64, size int64) error {
	b := a.allocated.get(addr)
	if b == nil {
		b = a.pending.get(addr)
	}
	if b == nil || b.addr != addr {
		return fmt.Errorf("allocator: no allocated block at %#x", addr)
	}
	if size <= 0 || size%MinBlockSize != 0 && !a.v.roundsUnitDivisionsRaw() {
		// (Before 2.4 a roundup_power2_divisions entry of 1 leaves
		// requests unrounded: blocks of any size.)
		return fmt.Errorf("allocator: block size %d", size)
	}
	d := size - b.size
	if d == 0 {
		return nil
	}
	pi := b.pool().statIndex()
	n := b.next
	nFree := n != nil && n.mapped && n.free()
	if d > 0 && (!nFree || n.end() < b.addr+uint64(size)) {
		return fmt.Errorf("allocator: %d bytes at %#x do not fit the block and the free block after it", size, addr)
	}
	var splitBlocks int64
	switch {
	case d > 0:
		n.pool().removeFree(n)
		if n.end() == b.addr+uint64(size) {
			b.next = n.next
			if n.next != nil {
				n.next.prev = b
			}
			a.recycle(n)
			splitBlocks = -1
		} else {
			n.addr += uint64(d)
			n.size -= d
			n.pool().insertFree(n)
		}
		b.size = size
	case nFree:
		// The freed tail joins the free block after it.
		n.pool().removeFree(n)
		n.addr -= uint64(-d)
		n.size += -d
		n.pool().insertFree(n)
		b.size = size
	default:
		rest := a.newBlock()
		*rest = block{addr: b.addr + uint64(size), size: -d, region: b.region, mapped: true}
		rest.prev, rest.next = b, b.next
		if b.next != nil {
			b.next.prev = rest
		}
		b.next = rest
		b.size = size
		rest.pool().insertFree(rest)
		splitBlocks = 1
	}
	shift := func(s *StatArray, x int64) {
		for _, p := range [2]int{PoolAll, pi} {
			s[p].Current += x
			s[p].Peak = max(s[p].Peak, s[p].Current)
		}
	}
	if b.allocated {
		shift(&a.stats.AllocatedBytes, d)
	}
	shift(&a.stats.ActiveBytes, d)
	if !b.expandable() {
		shift(&a.stats.InactiveSplit, splitBlocks)
		shift(&a.stats.InactiveSplitBytes, -d)
	}
	return nil
}
