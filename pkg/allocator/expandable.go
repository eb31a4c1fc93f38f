package allocator

import "github.com/memstat/memstat/pkg/snapshot"

// Expandable segments (allocator model §7). Per stream and pool kind the
// allocator reserves a large virtual-address range and maps physical pages
// into it on demand: 2 MiB pages for the small pool, 20 MiB for the large
// pool. The range is a list of blocks like any segment; unmapped ones sit
// in the pool's unmapped set.

// tryAllocateExpandable is try_allocate_expandable_block: find the lowest
// place (free or unmapped address space) with room for the request, map
// what is missing page by page, and take the resulting free block.
//
// A map that fails leaves earlier successful maps of the same attempt in
// place, as in PyTorch; the OOM fallback that follows unmaps them.
func (a *Allocator) tryAllocateExpandable(p *allocParams, ctx snapshot.StackID) (*block, error) {
	c, err := a.findExpandableBlock(p)
	if err != nil {
		return nil, err
	}
	if !hasRoom(c, p.size) {
		// A request larger than a whole new reservation (1 1/8 of the
		// device memory): PyTorch's map_block fails on it (the device
		// cannot back that many pages), so it is an OOM here too, never a
		// walk past the reservation's end.
		return nil, nil
	}
	if !c.mapped && !a.mapBlock(c, min(c.size, p.size), ctx, true) {
		return nil, nil
	}
	for c.size < p.size {
		// Invariant: c is free and mapped, c.next is unmapped.
		next := c.next
		if !a.mapBlock(next, min(p.size-c.size, next.size), ctx, true) {
			return nil, nil
		}
		c = next // next absorbed c
	}
	p.pool.removeFree(c)
	return c, nil
}

// findExpandableBlock is find_expandable_block: walk the stream's unmapped
// blocks by address; a candidate starts at the unmapped block or at the
// free block just before it, and is taken if free and unmapped space from
// there adds up to the request. Without one, a new reservation is made.
func (a *Allocator) findExpandableBlock(p *allocParams) (*block, error) {
	pool := p.pool
	for it, ok := pool.unmapped.lowerBound(freeKey{stream: p.stream}); ok && it.k.stream == p.stream; it, ok = pool.unmapped.after(it.k) {
		c := it.b
		if allocatable(c.prev) {
			c = c.prev
		}
		if hasRoom(c, p.size) {
			return c, nil
		}
	}
	page := int64(LargeBuffer)
	if pool.small {
		page = SmallBuffer
	}
	return a.createReservation(0, p.stream, pool, page, false)
}

func allocatable(b *block) bool { return b != nil && b.free() }

// hasRoom says whether the free and unmapped blocks from b on add up to
// size bytes.
func hasRoom(b *block, size int64) bool {
	n := int64(0)
	for ; n < size && allocatable(b); b = b.next {
		n += b.size
	}
	return n >= size
}

// createReservation reserves the address range of a new expandable segment
// (at addr if addr != 0, else where the device places it). The reservation
// is one unmapped block; reserving costs no physical memory.
func (a *Allocator) createReservation(addr uint64, stream int64, pool *blockPool, page int64, dictated bool) (*block, error) {
	size := a.dev.reservationSize(page)
	guessed := false
	if !dictated {
		var err error
		addr, dictated, err = a.dev.placeAt(SegmentRequest{Size: size, Stream: stream, Pool: pool.kind(), Expandable: true}, &a.regions)
		if err != nil {
			return nil, err
		}
		guessed = !dictated && a.dev.place != nil
	}
	r := &region{base: addr, size: size, stream: stream, pool: pool, expandable: true, page: page, guessedBase: guessed}
	b := a.newBlock()
	*b = block{addr: addr, size: size, region: r}
	r.head = b
	a.regions.add(r)
	pool.insertUnmapped(b)
	return b, nil
}

// mapBlock is map_block: map the pages covering the first size bytes of an
// unmapped block (all or nothing; without checkCapacity the device's
// capacity is ignored, for forced maps). The mapped part keeps the block
// object and merges with free mapped neighbours; the rest stays an unmapped
// block.
func (a *Allocator) mapBlock(b *block, size int64, ctx snapshot.StackID, checkCapacity bool) bool {
	r := b.region
	off := int64(b.addr - r.base)
	first := off / r.page
	end := (off + size + r.page - 1) / r.page
	n := (end - first) * r.page
	if n == 0 || (checkCapacity && !a.dev.fits(n)) {
		return false
	}
	mappedAt := b.addr
	pool := b.pool()
	r.guessedBase = false
	pool.removeUnmapped(b)
	b.mapped = true
	if n < b.size {
		rest := a.newBlock()
		*rest = block{addr: b.addr + uint64(n), size: b.size - n, region: r}
		rest.prev, rest.next = b, b.next
		if b.next != nil {
			b.next.prev = rest
		}
		b.next = rest
		pool.insertUnmapped(rest)
		b.size = n
	}
	a.tryMerge(b, b.prev)
	a.tryMerge(b, b.next)
	pool.insertFree(b)

	a.dev.obtained += n
	r.mappedBytes += n
	a.stats.ReservedBytes.increase(pool.statIndex(), n)
	a.noteReserved(pool, n, 1)
	a.stats.NumDeviceAlloc++
	a.record(snapshot.ActionSegmentMap, mappedAt, n, b.stream(), pool, ctx)
	if b.prev == nil && b.segStack == snapshot.NoStack {
		b.segStack = ctx
	}
	return true
}

// unmapBlock is unmap_block: unmap the pages lying entirely inside a free
// block. The block object becomes the unmapped middle (merged with
// unmapped neighbours); new free blocks keep the partial pages before and
// after it.
func (a *Allocator) unmapBlock(b *block, ctx snapshot.StackID) {
	r := b.region
	off := int64(b.addr - r.base)
	first := (off + r.page - 1) / r.page
	end := (off + b.size) / r.page
	if first >= end {
		return
	}
	at := r.base + uint64(first*r.page)
	n := (end - first) * r.page
	pool := b.pool()
	pool.removeFree(b)
	if before := int64(at - b.addr); before > 0 {
		h := a.newBlock()
		*h = block{addr: b.addr, size: before, region: r, mapped: true}
		h.prev, h.next = b.prev, b
		if b.prev != nil {
			b.prev.next = h
		}
		b.prev = h
		r.noteHead(h)
		pool.insertFree(h)
	}
	if after := int64(b.end() - (at + uint64(n))); after > 0 {
		t := a.newBlock()
		*t = block{addr: at + uint64(n), size: after, region: r, mapped: true}
		t.prev, t.next = b, b.next
		if b.next != nil {
			b.next.prev = t
		}
		b.next = t
		pool.insertFree(t)
	}
	b.addr, b.size, b.mapped = at, n, false
	a.tryMerge(b, b.prev)
	a.tryMerge(b, b.next)
	pool.insertUnmapped(b)

	a.dev.obtained -= n
	r.mappedBytes -= n
	a.stats.ReservedBytes.decrease(pool.statIndex(), n)
	a.noteReserved(pool, -n, -1)
	a.stats.NumDeviceFree++
	a.record(snapshot.ActionSegmentUnmap, at, n, b.stream(), pool, orStack(ctx, b.segStack))
}

// releaseReservation frees the address range of an expandable segment that
// is entirely unmapped again.
func (a *Allocator) releaseReservation(b *block) {
	b.pool().removeUnmapped(b)
	a.regions.remove(b.region)
	a.recycle(b)
}
