package allocator

import "slices"

// This file gives the trace-replay driver two ways to know what the
// simulator would do before committing to it: a deep copy of the whole
// allocator (clone), on which a call can be tried and thrown away, and
// side-effect-free predictions of the two common outcomes of Malloc (a
// cache hit, or one new cudaMalloc'd segment), which avoid the copy on the
// hot path. Neither is used by the decision path itself.

// clone returns an independent deep copy of the allocator: the same
// blocks (block identities preserved one to one), free sets, address
// maps, event queues, statistics, device and history. The copy shares
// only immutable things: the configuration, the stack table, the clock
// and the segment-address hook.
func (a *Allocator) Clone() *Allocator {
	c := *a
	c.seedBatch = nil // a batch is never open while a driver clones
	dev := *a.dev
	c.dev = &dev
	c.small = blockPool{small: a.small.small, id: a.small.id, freeCalls: a.small.freeCalls, cached: a.small.cached}
	c.large = blockPool{small: a.large.small, id: a.large.id, freeCalls: a.large.freeCalls, cached: a.large.cached}
	// Private pools: new objects, their sets filled below.
	c.pools = make([]*privatePool, len(a.pools))
	ppCopy := make(map[*privatePool]*privatePool, len(a.pools))
	for i, pp := range a.pools {
		np := &privatePool{}
		*np = *pp
		np.small = blockPool{small: true, id: pp.id, owner: np, freeCalls: pp.small.freeCalls, cached: pp.small.cached}
		np.large = blockPool{id: pp.id, owner: np, freeCalls: pp.large.freeCalls, cached: pp.large.cached}
		c.pools[i] = np
		ppCopy[pp] = np
	}
	c.captures = slices.Clone(a.captures)
	for i := range c.captures {
		c.captures[i].pool = ppCopy[c.captures[i].pool]
	}
	if a.route != nil {
		c.route = ppCopy[a.route]
	}
	pools := func(p *blockPool) *blockPool {
		switch {
		case p == &a.small:
			return &c.small
		case p == &a.large:
			return &c.large
		case p.small:
			return &ppCopy[p.owner].small
		}
		return &ppCopy[p.owner].large
	}
	// Each region's blocks are copied into one slice, in address order.
	// While Clone runs, a block's prev link points to its copy: prev is
	// redundant with the next links, which stay intact, and is restored
	// from them at the end. (A pointer to the copy in every block cost 8
	// bytes a block for the whole life of the allocator; a map from old to
	// new blocks cost more than the copy itself on large states; a binary
	// search in the region's copies made Clone 30% slower.)
	c.regions = regions{list: make([]*region, len(a.regions.list)), bounds: slices.Clone(a.regions.bounds),
		granules: slices.Clone(a.regions.granules), granBase: a.regions.granBase, granOff: a.regions.granOff}
	copyOf := func(b *block) *block { return b.prev }
	for i, r := range a.regions.list {
		nr := new(region)
		*nr = *r
		nr.pool = pools(r.pool)
		n := 0
		for b := r.head; b != nil; b = b.next {
			n++
		}
		// One allocation per region for its blocks: the copy is made to
		// be thrown away or kept whole, and a block that later leaves the
		// region only pins its neighbours' memory.
		nbs := make([]block, n)
		var prev *block
		k := 0
		for b := r.head; b != nil; b = b.next {
			nb := &nbs[k]
			k++
			*nb = *b
			nb.region = nr
			if b.extra != nil {
				nb.extra = &blockExtra{streamUses: slices.Clone(b.extra.streamUses), hist: b.extra.hist}
			}
			nb.prev, nb.next = prev, nil
			if prev != nil {
				prev.next = nb
			} else {
				nr.head = nb
			}
			prev = nb
			b.prev = nb
		}
		c.regions.list[i] = nr
	}
	c.small.blocks = a.small.blocks.cloneWith(copyOf)
	c.small.unmapped = a.small.unmapped.cloneWith(copyOf)
	c.large.blocks = a.large.blocks.cloneWith(copyOf)
	c.large.unmapped = a.large.unmapped.cloneWith(copyOf)
	for i, pp := range a.pools {
		np := c.pools[i]
		np.small.blocks = pp.small.blocks.cloneWith(copyOf)
		np.small.unmapped = pp.small.unmapped.cloneWith(copyOf)
		np.large.blocks = pp.large.blocks.cloneWith(copyOf)
		np.large.unmapped = pp.large.unmapped.cloneWith(copyOf)
	}
	c.allocated = a.allocated.cloneWith(copyOf)
	c.pending = a.pending.cloneWith(copyOf)
	c.streams = make([]*streamQueue, len(a.streams))
	for i, q := range a.streams {
		nq := &streamQueue{stream: q.stream, done: q.done, events: make([]event, len(q.events))}
		for j, e := range q.events {
			nq.events[j] = event{b: copyOf(e.b), seq: e.seq}
		}
		c.streams[i] = nq
	}
	c.deferred = make([]*block, len(a.deferred))
	for i, b := range a.deferred {
		c.deferred[i] = copyOf(b)
	}
	c.hist.ring.buf = slices.Clone(a.hist.ring.buf)
	c.hist.contexts = *a.hist.contexts.Clone()
	c.spare = nil
	// The kept segments are never changed, only appended to (after a
	// Clip): sharing them is safe.
	c.outside.segs = slices.Clip(a.outside.segs)
	for _, r := range a.regions.list {
		var prev *block
		for b := r.head; b != nil; b = b.next {
			b.prev = prev
			prev = b
		}
	}
	return &c
}

// cloneWith copies the tree's shape, mapping every block to its copy.
func (t *btree) cloneWith(copyOf func(*block) *block) btree {
	var cp func(n *bnode) *bnode
	cp = func(n *bnode) *bnode {
		nn := &bnode{items: make([]freeItem, len(n.items), btreeMaxItems+1)}
		for i, it := range n.items {
			nn.items[i] = freeItem{k: it.k, b: copyOf(it.b)}
		}
		if n.children != nil {
			nn.children = make([]*bnode, len(n.children), btreeMaxItems+2)
			for i, ch := range n.children {
				nn.children[i] = cp(ch)
			}
		}
		return nn
	}
	out := btree{n: t.n}
	if t.root != nil {
		out.root = cp(t.root)
	}
	return out
}

// MallocOutcome is what a Malloc would do, as far as a prediction can
// tell without running it.
type MallocOutcome uint8

const (
	// OutcomeUnknown: a path the prediction does not model (fallbacks,
	// expandable segments, garbage collection, events to process); the
	// driver tries the call on a clone instead.
	OutcomeUnknown MallocOutcome = iota
	// OutcomeCacheHit: served from the cached block at addr.
	OutcomeCacheHit
	// OutcomeNewSegment: a cache miss served by one new cudaMalloc'd
	// segment of allocSize bytes, which the request takes from its start.
	OutcomeNewSegment
)

// PredictMalloc tells, without changing anything, what Malloc(size,
// stream) would do in the current state when that is one of the two
// common cases. For a cache hit addr is the block's address.
func (a *Allocator) PredictMalloc(size, stream int64) (out MallocOutcome, addr uint64, allocSize int64) {
	if size <= 0 || size >= OneEiB || a.gcEnabled() || a.nEvents > 0 && a.hasCompletedEvents() {
		return OutcomeUnknown, 0, 0
	}
	if len(a.captures) > 0 || len(a.deferred) > 0 {
		return OutcomeUnknown, 0, 0
	}
	rounded := roundSize(size, &a.cfg.RoundupPower2Divisions, a.v)
	pool := a.getPool(rounded, stream)
	allocSize = AllocationSize(rounded)
	it, ok := pool.blocks.lowerBound(freeKey{stream, rounded, 0})
	if ok && it.k.stream == stream {
		b := it.b
		if b.expandable() {
			return OutcomeUnknown, 0, 0
		}
		maxSplit := a.cfg.MaxSplitSize
		switch {
		case uint64(rounded) < maxSplit && uint64(b.size) >= maxSplit:
		case uint64(rounded) >= maxSplit && uint64(b.size) >= uint64(rounded)+a.cfg.nonSplitTolerance():
		default:
			return OutcomeCacheHit, b.addr, allocSize
		}
	}
	if a.expandableFor(pool) {
		return OutcomeUnknown, 0, 0
	}
	if a.fractionSet && a.dev.obtained+allocSize > a.allowedMax || !a.dev.fits(allocSize) {
		return OutcomeUnknown, 0, 0
	}
	return OutcomeNewSegment, 0, allocSize
}

// hasCompletedEvents reports whether the next Malloc's process_events
// would free anything.
func (a *Allocator) hasCompletedEvents() bool {
	for _, q := range a.streams {
		if len(q.events) > 0 && q.events[0].seq <= q.done {
			return true
		}
	}
	return false
}
