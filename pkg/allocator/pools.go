package allocator

import (
	"fmt"
	"slices"

	"github.com/memstat/memstat/pkg/snapshot"
)

// Private pools (allocator model §2.2, §3.4, §6.2): CUDA-graph capture and
// torch.cuda.use_mem_pool route allocations into a pool of their own, a
// PrivatePool with its own small and large block sets. Blocks freed there
// stay there; empty_cache() returns a pool's segments only once no graph
// or MemPool uses it any more (use_count 0, "freeable"). Statistics count
// them like any block: memory_stats() aggregates every pool, by pool kind
// (get_stat_types_for_pool looks only at is_small).
//
// The functions follow DeviceCachingAllocator in c10/cuda/
// CUDACachingAllocator.cpp: beginAllocateToPool / endAllocateToPool /
// releasePool / create_or_incref_pool / get_pool / release_cached_blocks
// (2.9 source; 2.0 has the same rules under the names notifyCaptureBegin /
// notifyCaptureAboutToEnd / notifyCaptureDestroy, with a capture id → pool
// map instead of stream filters).

// PoolKind says what created a private pool, where memstat knows it.
type PoolKind uint8

const (
	// PoolKindUnknown: a pool seen only in a snapshot. Ids (n, 0) are a
	// graph's own pool; (0, n) come from graph_pool_handle() or
	// MemPool() alike.
	PoolKindUnknown PoolKind = iota
	// PoolKindGraph: made by a CUDA-graph capture (torch.cuda.graph,
	// reduce-overhead, graph_pool_handle()).
	PoolKindGraph
	// PoolKindMemPool: a torch.cuda.MemPool (use_mem_pool).
	PoolKindMemPool
)

func (k PoolKind) String() string {
	switch k {
	case PoolKindGraph:
		return "graph"
	case PoolKindMemPool:
		return "MemPool"
	}
	return ""
}

// KindOfPoolID is what a pool id alone tells: CUDAGraph::capture_begin
// without a pool argument makes {id, 0}; graph_pool_handle() and
// MemPool() make {0, n}, which can be either.
func KindOfPoolID(id snapshot.PoolID) PoolKind {
	if id[0] != 0 && id[1] == 0 {
		return PoolKindGraph
	}
	return PoolKindUnknown
}

// privatePool is PrivatePool.
type privatePool struct {
	id   snapshot.PoolID
	kind PoolKind
	// useCount is use_count: graphs and MemPools holding the pool. At 0
	// the pool is freeable.
	useCount int
	// cudaMallocCount is cudaMalloc_count: its live segments (and mapped
	// expandable ranges). A freeable pool is dropped when it reaches 0 in
	// release_cached_blocks.
	cudaMallocCount int
	freeable        bool
	small, large    blockPool
	// reserved and allocated are this pool's bytes (PyTorch keeps no
	// per-pool statistics; memstat does, for the per-pool figures).
	reserved, allocated Stat
}

func (pp *privatePool) poolFor(size int64) *blockPool {
	if size <= SmallSize {
		return &pp.small
	}
	return &pp.large
}

func newPrivatePool(id snapshot.PoolID, kind PoolKind) *privatePool {
	pp := &privatePool{id: id, kind: kind, useCount: 1}
	pp.small = blockPool{small: true, id: id, owner: pp}
	pp.large = blockPool{id: id, owner: pp}
	return pp
}

// StreamFilter is the filter of beginAllocateToPool: which allocations a
// pool receives. A graph capture routes its capturing stream
// (CUDAGraph::capture_begin's filter compares capture ids); use_mem_pool
// routes every allocation of the calling thread, which in the simulator
// is every stream.
type StreamFilter struct {
	Stream     int64
	AllStreams bool
}

func (f StreamFilter) match(stream int64) bool { return f.AllStreams || f.Stream == stream }

// capture is one entry of captures_underway.
type capture struct {
	pool   *privatePool
	filter StreamFilter
}

// poolByID is get_private_pool; nil if the pool does not exist.
func (a *Allocator) poolByID(id snapshot.PoolID) *privatePool {
	i, ok := slices.BinarySearchFunc(a.pools, id, comparePoolID)
	if !ok {
		return nil
	}
	return a.pools[i]
}

func comparePoolID(pp *privatePool, id snapshot.PoolID) int {
	switch {
	case pp.id[0] != id[0]:
		return cmpInt(pp.id[0], id[0])
	default:
		return cmpInt(pp.id[1], id[1])
	}
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// createOrIncrefPool is create_or_incref_pool: a new pool starts with
// use_count 1; an existing one must be live and gains a user.
func (a *Allocator) createOrIncrefPool(id snapshot.PoolID, kind PoolKind) (*privatePool, error) {
	if id.IsDefault() {
		return nil, fmt.Errorf("allocator: pool id (0, 0) names the default pools")
	}
	if pp := a.poolByID(id); pp != nil {
		if pp.useCount <= 0 {
			return nil, fmt.Errorf("allocator: pool (%d, %d) was released", id[0], id[1])
		}
		pp.useCount++
		if pp.kind == PoolKindUnknown {
			pp.kind = kind
		}
		return pp, nil
	}
	pp := newPrivatePool(id, kind)
	i, _ := slices.BinarySearchFunc(a.pools, id, comparePoolID)
	a.pools = slices.Insert(a.pools, i, pp)
	return pp, nil
}

// CreatePool is createOrIncrefPool, what the MemPool constructor calls:
// the pool exists (or gains a user) without receiving allocations yet.
func (a *Allocator) CreatePool(id snapshot.PoolID, kind PoolKind) error {
	if kind == PoolKindMemPool && !a.v.HasMemPool() {
		return fmt.Errorf("allocator: torch.cuda.MemPool does not exist in PyTorch %s", a.v)
	}
	_, err := a.createOrIncrefPool(id, kind)
	return err
}

// BeginAllocateToPool is beginAllocateToPool (CUDAGraph::capture_begin,
// use_mem_pool's __enter__): the pool is created or gains a user, and
// from now on the allocations the filter selects go to it. The newest
// capture wins where filters overlap (get_pool searches LIFO).
func (a *Allocator) BeginAllocateToPool(id snapshot.PoolID, kind PoolKind, filter StreamFilter) error {
	if kind == PoolKindMemPool && !a.v.HasMemPool() {
		return fmt.Errorf("allocator: torch.cuda.use_mem_pool does not exist in PyTorch %s", a.v)
	}
	for _, c := range a.captures {
		if c.pool.id == id {
			return fmt.Errorf("beginAllocateToPool: already recording to mempool_id (%d, %d)", id[0], id[1])
		}
	}
	pp, err := a.createOrIncrefPool(id, kind)
	if err != nil {
		return err
	}
	a.captures = append(a.captures, capture{pool: pp, filter: filter})
	return nil
}

// EndAllocateToPool is endAllocateToPool (CUDAGraph::capture_end,
// use_mem_pool's __exit__): the pool stops receiving allocations. Frees
// deferred during the capture get their events at the next Malloc with no
// capture underway (insert_events_deferred_until_no_capture).
func (a *Allocator) EndAllocateToPool(id snapshot.PoolID) error {
	for i, c := range a.captures {
		if c.pool.id == id {
			a.captures = slices.Delete(a.captures, i, i+1)
			return nil
		}
	}
	return fmt.Errorf("endAllocatePool: not currently recording to mempool_id (%d, %d)", id[0], id[1])
}

// ReleasePool is releasePool (CUDAGraph::reset / the graph's destructor,
// MemPool's destructor, use_mem_pool's __exit__): one user fewer; at 0 the
// pool becomes freeable and empty_cache may return its whole free
// segments.
func (a *Allocator) ReleasePool(id snapshot.PoolID) error {
	pp := a.poolByID(id)
	if pp == nil || pp.useCount <= 0 {
		return fmt.Errorf("allocator: no live pool (%d, %d)", id[0], id[1])
	}
	pp.useCount--
	if pp.useCount == 0 {
		pp.freeable = true
	}
	return nil
}

// PoolUseCount is getPoolUseCount (MemPool.use_count()); -1 if the pool
// does not exist.
func (a *Allocator) PoolUseCount(id snapshot.PoolID) int {
	if pp := a.poolByID(id); pp != nil {
		return pp.useCount
	}
	return -1
}

// Capturing reports whether some allocations are routed to a private pool
// (captures_underway is not empty).
func (a *Allocator) Capturing() bool { return len(a.captures) > 0 }

// capturing is malloc's captures_underway test. A request a replay driver
// routes to a private pool was made while some capture or use_mem_pool
// was underway, so it counts as one.
func (a *Allocator) capturing() bool {
	return len(a.captures) > 0 || a.routed && a.route != nil
}

// getPool is get_pool: the newest capture whose filter takes the stream
// routes the request to its pool; otherwise the default pools. A replay
// driver may override the choice (routeTo) with the pool the recording
// shows.
func (a *Allocator) getPool(size, stream int64) *blockPool {
	if a.routed {
		if a.route != nil {
			return a.route.poolFor(size)
		}
		return a.poolFor(size)
	}
	for i := len(a.captures) - 1; i >= 0; i-- {
		if a.captures[i].filter.match(stream) {
			return a.captures[i].pool.poolFor(size)
		}
	}
	return a.poolFor(size)
}

// releaseFreeablePools is the second half of release_cached_blocks: every
// freeable pool returns its whole free segments (small, then large), and
// a freeable pool left without segments is dropped. PyTorch walks
// graph_pools_freeable in hash-map order; the simulator walks pools by id.
func (a *Allocator) releaseFreeablePools(ctx snapshot.StackID) {
	kept := a.pools[:0]
	for _, pp := range a.pools {
		if pp.freeable {
			a.releaseBlocks(&pp.small, ctx)
			a.releaseBlocks(&pp.large, ctx)
			// cudaMalloc_count == 0: no segment (nor expandable
			// reservation) of the pool is left.
			if !a.hasRegionsOf(pp) {
				continue
			}
		}
		kept = append(kept, pp)
	}
	clear(a.pools[len(kept):])
	a.pools = kept
}

// noteReserved keeps the per-pool reserved figures: n bytes obtained (or,
// negative, returned) for a segment or mapped range of pool.
func (a *Allocator) noteReserved(pool *blockPool, n int64, segments int) {
	pp := pool.owner
	if pp == nil {
		return
	}
	pp.cudaMallocCount += segments
	if n > 0 {
		pp.reserved.increase(n)
		a.privateReserved.increase(n)
	} else {
		pp.reserved.decrease(-n)
		a.privateReserved.decrease(-n)
	}
}

// noteAllocated keeps the per-pool allocated figures.
func (a *Allocator) noteAllocated(pool *blockPool, n int64) {
	pp := pool.owner
	if pp == nil {
		return
	}
	if n > 0 {
		pp.allocated.increase(n)
		a.privateAllocated.increase(n)
	} else {
		pp.allocated.decrease(-n)
		a.privateAllocated.decrease(-n)
	}
}

// PoolUsage is one pool's memory at a moment.
type PoolUsage struct {
	ID   snapshot.PoolID
	Kind PoolKind
	// UseCount is use_count (-1 for the default pools); Freeable: it is 0.
	UseCount int
	Freeable bool
	// Segments counts segments as memory_snapshot() lists them (an
	// expandable segment's mapped ranges count one each).
	Segments  int
	Reserved  int64
	Allocated int64
	// Active includes blocks waiting for stream events.
	Active int64
	// LargestFree is the largest inactive block.
	LargestFree int64
	// PeakReserved and PeakAllocated are the pool's highest figures
	// since the last ResetPeakStats (default pools: not tracked, 0).
	PeakReserved, PeakAllocated int64
}

// PoolUsages returns the default pools (ID (0, 0)) followed by every
// private pool in id order, live or freeable, with their current figures.
// The default pools are listed even when empty; a private pool is listed
// while it exists (a freeable pool until its last segment is returned).
func (a *Allocator) PoolUsages() []PoolUsage {
	out := make([]PoolUsage, 1, 1+len(a.pools))
	out[0] = PoolUsage{UseCount: -1}
	index := map[*privatePool]int{}
	for _, pp := range a.pools {
		index[pp] = len(out)
		out = append(out, PoolUsage{ID: pp.id, Kind: pp.kind, UseCount: pp.useCount, Freeable: pp.freeable,
			PeakReserved: pp.reserved.Peak, PeakAllocated: pp.allocated.Peak})
	}
	for _, r := range a.regions.list {
		u := &out[0]
		if pp := r.pool.owner; pp != nil {
			u = &out[index[pp]]
		}
		inRange := false
		for b := r.head; b != nil; b = b.next {
			if !b.mapped {
				inRange = false
				continue
			}
			if !inRange {
				u.Segments++
			}
			inRange = true
			u.Reserved += b.size
			switch st := b.state(); {
			case st == snapshot.ActiveAllocated:
				u.Allocated += b.size
				u.Active += b.size
			case st.Active():
				u.Active += b.size
			default:
				u.LargestFree = max(u.LargestFree, b.size)
			}
		}
	}
	return out
}

// PrivatePoolStats are the private pools' totals: reserved and allocated
// bytes now and at their peak since the last ResetPeakStats.
func (a *Allocator) PrivatePoolStats() (reserved, allocated Stat) {
	return a.privateReserved, a.privateAllocated
}

// privatePoolFree is what PyTorch's OOM message calls "allocated in
// private pools": the bytes of the free blocks cached in private pools.
func (a *Allocator) privatePoolFree() int64 {
	var n int64
	for _, pp := range a.pools {
		for _, p := range [2]*blockPool{&pp.large, &pp.small} {
			p.blocks.ascend(func(it freeItem) bool {
				n += it.b.size
				return true
			})
		}
	}
	return n
}

// deferUntilNoCapture is free()'s capture branch: a block used on other
// streams cannot have its events queried during a capture, so its events
// are inserted after the capture ends (needs_events_deferred_until_no_
// capture, 2.9's deferred_blocks).
func (a *Allocator) deferUntilNoCapture(b *block) {
	a.deferred = append(a.deferred, b)
}

// insertDeferredEvents is insert_events_deferred_until_no_capture, run by
// process_events once no capture is underway.
func (a *Allocator) insertDeferredEvents() {
	for _, b := range a.deferred {
		a.insertEvents(b)
	}
	clear(a.deferred)
	a.deferred = a.deferred[:0]
}

// freeSafeBlocksInCapture models 2.9's free_safe_blocks_in_capture (with
// graph_capture_record_stream_reuse): a deferred block of the allocating
// stream becomes reusable during the capture once every stream it was
// used on is captured. PyTorch decides it from the captured graph's
// topology (its free markers precede every terminal node); the simulator
// has no graph and assumes the captured streams have joined the
// allocating stream by then.
func (a *Allocator) freeSafeBlocksInCapture(stream int64, ctx snapshot.StackID) {
	kept := a.deferred[:0]
	for _, b := range a.deferred {
		if b.stream() == stream && a.allCaptured(b) {
			b.setStreamUses(b.streamUses()[:0])
			a.freeBlock(b, ctx)
			continue
		}
		kept = append(kept, b)
	}
	clear(a.deferred[len(kept):])
	a.deferred = kept
}

func (a *Allocator) allCaptured(b *block) bool {
	captured := func(s int64) bool {
		for _, c := range a.captures {
			if c.filter.match(s) {
				return true
			}
		}
		return false
	}
	if !captured(b.stream()) {
		return false
	}
	for _, s := range b.streamUses() {
		if !captured(s) {
			return false
		}
	}
	return true
}

func (a *Allocator) hasRegionsOf(pp *privatePool) bool {
	for _, r := range a.regions.list {
		if r.pool.owner == pp {
			return true
		}
	}
	return false
}
