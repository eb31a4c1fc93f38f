package allocator

import (
	"slices"

	"github.com/memstat/memstat/pkg/snapshot"
)

// block is PyTorch's Block: a contiguous range of a segment, linked to its
// neighbours in address order.
//
// Block objects have identity, as in PyTorch: splitting a free block hands
// out a new object for the front part and keeps the old object (moved
// forward) as the remainder, and merging keeps the object being freed. The
// stale requested_size values that snapshots show for free blocks depend on
// exactly this, so the simulator never copies blocks around.
type block struct {
	addr      uint64
	size      int64
	requested int64 // requested_size: set at allocation, never reset
	// region is the segment the block lies in; the block's stream and
	// pool are the region's (PyTorch gives every block of a segment the
	// segment's stream and pool, and splits and merges keep them).
	region *region
	prev   *block
	next   *block
	// extra holds what few blocks need: the streams of record_stream and
	// 2.0's history chain. nil for most blocks.
	extra *blockExtra
	// gcCountBase is the pool's get_free_blocks call count when the block
	// was last inserted into the free set; its age is the difference.
	gcCountBase int64

	stack    snapshot.StackID // context_when_allocated
	segStack snapshot.StackID // context_when_segment_allocated

	allocated  bool
	mapped     bool  // false only for unmapped VA of an expandable segment
	eventCount int32 // outstanding events before the block may be freed
}

// blockExtra is the rarely used part of a block, kept out of the block so
// that the millions of blocks of a large snapshot's seeded state stay in
// Go's 80-byte size class (they took 144 bytes with these fields inline).
type blockExtra struct {
	// streamUses are the streams the block was used on besides its own
	// (stream_uses), until the free records events on them.
	streamUses []int64
	// hist is 2.0's HistoryChain (newest first); nil from 2.1 on. Chains
	// are never changed in place, so clones may share them.
	hist []snapshot.HistoryItem
}

func (b *block) stream() int64    { return b.region.stream }
func (b *block) pool() *blockPool { return b.region.pool }

// streamUses returns the block's stream_uses (nil for most blocks).
func (b *block) streamUses() []int64 {
	if b.extra == nil {
		return nil
	}
	return b.extra.streamUses
}

// setStreamUses replaces the block's stream_uses; an emptied list keeps
// its storage for the block's next record_stream.
func (b *block) setStreamUses(u []int64) {
	if b.extra == nil {
		if len(u) == 0 {
			return
		}
		b.extra = &blockExtra{}
	}
	b.extra.streamUses = u
}

// hist returns the block's 2.0 history chain (nil from 2.1 on).
func (b *block) hist() []snapshot.HistoryItem {
	if b.extra == nil {
		return nil
	}
	return b.extra.hist
}

func (b *block) setHist(h []snapshot.HistoryItem) {
	if b.extra == nil {
		if len(h) == 0 {
			return
		}
		b.extra = &blockExtra{}
	}
	b.extra.hist = h
}

func (b *block) isSplit() bool    { return b.prev != nil || b.next != nil }
func (b *block) expandable() bool { return b.region.expandable }
func (b *block) end() uint64      { return b.addr + uint64(b.size) }

// free reports whether the block is free for reuse and merging: not handed
// out and not waiting for events of other streams.
func (b *block) free() bool {
	return !b.allocated && b.eventCount == 0 && (b.extra == nil || len(b.extra.streamUses) == 0)
}

func (b *block) key() freeKey         { return freeKey{b.region.stream, b.size, b.addr} }
func (b *block) unmappedKey() freeKey { return freeKey{b.region.stream, 0, b.addr} }

func (b *block) state() snapshot.BlockState {
	switch {
	case b.allocated:
		return snapshot.ActiveAllocated
	case b.eventCount > 0 || len(b.streamUses()) > 0:
		return snapshot.ActivePendingFree
	}
	return snapshot.Inactive
}

// blockPool is PyTorch's BlockPool: the cached free blocks of one pool kind.
type blockPool struct {
	small bool
	id    snapshot.PoolID
	// owner is the private pool this set belongs to (owner_PrivatePool);
	// nil for the default pools.
	owner *privatePool
	// blocks holds the free, mapped blocks ordered by (stream, size, addr).
	blocks btree
	// unmapped holds the unmapped blocks of expandable segments ordered by
	// (stream, addr).
	unmapped btree
	// freeCalls is get_free_blocks_call_count: advanced by every cache search
	// while garbage collection is enabled, the clock of block ages.
	freeCalls int64
	// seeding is set while SeedSegment lays out one segment: its free
	// blocks stay out of the free set until the layout is done, so that
	// seeding a block does not remove and re-insert the segment's tail
	// (two tree operations per block, most of the time of seeding a
	// million blocks). Nothing searches the free set meanwhile.
	seeding bool
	// cached is the memory of the free set that empty_cache() would hand
	// back to the device (see block.cached), kept as blocks enter and
	// leave the set: the unused memory at a peak splits into it and the
	// rest without a walk of the blocks.
	cached int64
}

func (p *blockPool) kind() snapshot.Pool {
	if p.small {
		return snapshot.SmallPool
	}
	return snapshot.LargePool
}

// statIndex is the per-pool slot of a StatArray.
func (p *blockPool) statIndex() int {
	if p.small {
		return PoolSmall
	}
	return PoolLarge
}

// insertFree puts a free mapped block into the cache; it restarts the
// block's garbage-collection age, like insert_into_blocks.
func (p *blockPool) insertFree(b *block) {
	b.gcCountBase = p.freeCalls
	if p.seeding {
		return
	}
	p.blocks.insert(freeItem{b.key(), b})
	p.cached += b.cached()
}

func (p *blockPool) removeFree(b *block) {
	if p.seeding {
		return
	}
	if !p.blocks.remove(b.key()) {
		panic("allocator: block missing from its free set")
	}
	p.cached -= b.cached()
}

// cached is what release_blocks would return of a free mapped block: a
// whole cudaMalloc'd segment when the block is all of it, the pages lying
// wholly inside it in an expandable segment (unmap_block). Neither changes
// while the block is in a free set: its neighbours change only by merges
// and splits, which take it out first.
func (b *block) cached() int64 {
	if b.region.expandable {
		off := int64(b.addr - b.region.base)
		first := (off + b.region.page - 1) / b.region.page
		end := (off + b.size) / b.region.page
		return max(end-first, 0) * b.region.page
	}
	if b.isSplit() {
		return 0
	}
	return b.size
}

func (p *blockPool) insertUnmapped(b *block) { p.unmapped.insert(freeItem{b.unmappedKey(), b}) }

func (p *blockPool) removeUnmapped(b *block) {
	if !p.unmapped.remove(b.unmappedKey()) {
		panic("allocator: block missing from its unmapped set")
	}
}

// region is the address range behind a list of blocks: one cudaMalloc'd
// segment, or one expandable segment's virtual-address reservation. PyTorch
// has no such object for cudaMalloc segments (it finds them from their
// blocks); the simulator keeps one so that address lookups, snapshots and
// invariant checks can walk a segment from its first block.
type region struct {
	base       uint64
	size       int64
	stream     int64
	pool       *blockPool
	expandable bool
	// guessedBase marks a reservation a replay's simulator made where the
	// recording shows no address for it (an allocation that ran out of
	// memory leaves its new reservation unmapped): its base is the bump
	// allocator's guess until the recording maps into it
	// (Allocator.PlaceGuessedReservation).
	guessedBase bool
	// page is the mapping granularity of an expandable segment (2 MiB small
	// pool, 20 MiB large pool).
	page int64
	// mappedBytes is the physical memory mapped into an expandable segment.
	mappedBytes int64
	// head is the first block of the region (prev == nil).
	head *block
}

func (r *region) end() uint64 { return r.base + uint64(r.size) }

// noteHead records b as the region's first block if it has no predecessor;
// called wherever a block's prev link may have become nil.
func (r *region) noteHead(b *block) {
	if b.prev == nil {
		r.head = b
	}
}

// regions keeps every live region sorted by base address. Regions are
// created and released far less often than blocks are allocated, so a
// sorted slice with binary search is enough.
type regions []*region

// find returns the region containing addr. A replay asks at nearly every
// entry, often for an address no region holds, so the search is written
// out: it reads one field of each region it passes (a closure per step
// cost twice as much), and the one region that may hold addr, the last
// that starts at or below it, is checked once at the end.
func (rs regions) find(addr uint64) *region {
	lo, hi := 0, len(rs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if rs[m].base <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo > 0 && addr < rs[lo-1].end() {
		return rs[lo-1]
	}
	return nil
}

// overlapping returns the lowest region intersecting [addr, addr+size), or
// nil.
func (rs regions) overlapping(addr uint64, size int64) *region {
	i, _ := slices.BinarySearchFunc(rs, addr, func(r *region, a uint64) int {
		if r.end() <= a {
			return -1
		}
		return 1
	})
	if i < len(rs) && rs[i].base < addr+uint64(size) {
		return rs[i]
	}
	return nil
}

// overlapsOther reports whether a region other than self intersects
// [addr, addr+size).
func (rs regions) overlapsOther(addr uint64, size int64, self *region) bool {
	i, _ := slices.BinarySearchFunc(rs, addr, func(r *region, a uint64) int {
		if r.end() <= a {
			return -1
		}
		return 1
	})
	for ; i < len(rs) && rs[i].base < addr+uint64(size); i++ {
		if rs[i] != self {
			return true
		}
	}
	return false
}

func (rs *regions) add(r *region) {
	i, _ := slices.BinarySearchFunc(*rs, r.base, func(x *region, a uint64) int {
		if x.base < a {
			return -1
		}
		if x.base > a {
			return 1
		}
		return 0
	})
	*rs = slices.Insert(*rs, i, r)
}

func (rs *regions) remove(r *region) {
	i, found := slices.BinarySearchFunc(*rs, r.base, func(x *region, a uint64) int {
		if x.base < a {
			return -1
		}
		if x.base > a {
			return 1
		}
		return 0
	})
	if !found || (*rs)[i] != r {
		panic("allocator: releasing an unknown region")
	}
	*rs = slices.Delete(*rs, i, i+1)
}

// blockAt returns the block of r that contains addr.
func (r *region) blockAt(addr uint64) *block {
	for b := r.head; b != nil; b = b.next {
		if b.addr <= addr && addr < b.end() {
			return b
		}
	}
	return nil
}
