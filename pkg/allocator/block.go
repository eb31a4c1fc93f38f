package allocator

import (
	"fmt"
	"math/bits"
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

// regions keeps every live region sorted by base address, each one's
// range beside it in one array (bounds): find, which a replay calls at
// nearly every entry (often for an address no region holds), then
// binary-searches contiguous memory instead of reading a region struct
// at each step, cache misses on a state of thousands of segments.
// Regions are created and released far less often than blocks are
// allocated, so sorted slices with binary search are enough. A region's
// range changes only while it is out of the list (remove, then add).
//
// Most addresses a replay asks about in no region lie far from every
// region (torch-1GB: 4.5 M of the step loop's 5.1 M frees of no region's
// address), yet the search's last steps missed the cache for each. A
// bitmap of the 2 MiB granules regions touch (granules: 110 KB for
// torch-1GB's 1.9 TB of address range, up to twice that as it grows)
// answers those first, in cache.
type regions struct {
	list   []*region
	bounds []regionBounds // bounds[i] is list[i]'s range
	// granules has bit k set if a region overlaps the 2 MiB granule
	// granBase + k<<granShift; granOff: the regions lie too far apart
	// for the bitmap (more than maxGranules), so find searches always.
	granules []uint64
	granBase uint64
	granOff  bool
}

type regionBounds struct{ base, end uint64 }

// granShift: a granule is 2 MiB, a small pool's segment; maxGranules
// bounds the bitmap to 1 MiB (16 TiB of address range): its copies as it
// grows are the bitmap's size, not the regions'.
const (
	granShift   = 21
	maxGranules = 1 << 23
)

// mayHold reports whether a region may hold addr: false if none touches
// its granule.
func (rs *regions) mayHold(addr uint64) bool {
	if rs.granOff {
		return true
	}
	// Below granBase the difference wraps around past every granule.
	k := (addr - rs.granBase) >> granShift
	return k < uint64(len(rs.granules))*64 && rs.granules[k>>6]&(1<<(k&63)) != 0
}

// markGranules sets the bits of r's granules, first making the bitmap
// cover them: it grows by at least its own span at a time, so that
// regions added in falling (or rising) address order copy it a few times,
// not once each.
func (rs *regions) markGranules(r *region) {
	if rs.granOff || r.size <= 0 {
		return
	}
	lo, hi := r.base>>granShift, (r.end()-1)>>granShift
	base, n := rs.granBase>>granShift, uint64(len(rs.granules))*64 // covered: [base, base+n)
	if n == 0 {
		base = lo
	}
	newBase, newEnd := base, base+n
	if lo < base {
		newBase = base - min(max(base-lo, n), base)
	}
	if hi >= newEnd {
		newEnd = max(hi+1, newBase+2*(newEnd-newBase))
		if newEnd-newBase > maxGranules {
			newEnd = hi + 1
		}
	}
	if newEnd-newBase > maxGranules {
		rs.granOff, rs.granules = true, nil
		return
	}
	if newBase == base && newEnd > base+n {
		rs.granules = append(rs.granules, make([]uint64, (newEnd-newBase+63)/64-uint64(len(rs.granules)))...)
	} else if newBase != base {
		words := make([]uint64, (newEnd-newBase+63)/64)
		for k := range n {
			if rs.granules[k>>6]&(1<<(k&63)) != 0 {
				j := k + base - newBase
				words[j>>6] |= 1 << (j & 63)
			}
		}
		rs.granules = words
	}
	rs.granBase = newBase << granShift
	for k := lo - newBase; k <= hi-newBase; k++ {
		rs.granules[k>>6] |= 1 << (k & 63)
	}
}

// clearGranules clears the bits of r's granules, once r is out of the
// list, but for its first and last granule where another region touches
// them (its inner ones are r's alone: regions do not overlap).
func (rs *regions) clearGranules(r *region) {
	if rs.granOff {
		return
	}
	if r.size <= 0 {
		return
	}
	lo, hi := r.base>>granShift, (r.end()-1)>>granShift
	base := rs.granBase >> granShift
	for g := lo; g <= hi; g++ {
		if g == lo || g == hi {
			start := g << granShift
			if i := rs.firstEndingAbove(start); i < len(rs.bounds) && rs.bounds[i].base < start+1<<granShift {
				continue
			}
		}
		k := g - base
		rs.granules[k>>6] &^= 1 << (k & 63)
	}
}

// checkGranules reports a granule bit that is not the regions': each
// region's granules set, and no other.
func (rs *regions) checkGranules() error {
	if rs.granOff {
		return nil
	}
	base := rs.granBase >> granShift
	n := uint64(len(rs.granules)) * 64
	set, last, counted := 0, uint64(0), false
	for _, r := range rs.list {
		if r.size <= 0 {
			continue
		}
		lo, hi := r.base>>granShift, (r.end()-1)>>granShift
		if lo < base || hi-base >= n {
			return fmt.Errorf("region %#x: outside the granule bitmap", r.base)
		}
		for g := lo; g <= hi; g++ {
			k := g - base
			if rs.granules[k>>6]&(1<<(k&63)) == 0 {
				return fmt.Errorf("region %#x: granule %#x not marked", r.base, g<<granShift)
			}
			if !counted || g > last {
				set++
			}
			last, counted = g, true
		}
	}
	total := 0
	for _, w := range rs.granules {
		total += bits.OnesCount64(w)
	}
	if total != set {
		return fmt.Errorf("%d granules marked, the regions touch %d", total, set)
	}
	return nil
}

// find returns the region containing addr: the last one that starts at or
// below it, if it ends above it.
func (rs *regions) find(addr uint64) *region {
	if !rs.mayHold(addr) {
		return nil
	}
	b := rs.bounds
	lo, hi := 0, len(b)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if b[m].base <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo > 0 && addr < b[lo-1].end {
		return rs.list[lo-1]
	}
	return nil
}

// firstEndingAbove returns the index of the first region that ends above
// addr (len when none does).
func (rs *regions) firstEndingAbove(addr uint64) int {
	b := rs.bounds
	lo, hi := 0, len(b)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if b[m].end <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// overlapping returns the lowest region intersecting [addr, addr+size), or
// nil.
func (rs *regions) overlapping(addr uint64, size int64) *region {
	if i := rs.firstEndingAbove(addr); i < len(rs.list) && rs.bounds[i].base < addr+uint64(size) {
		return rs.list[i]
	}
	return nil
}

// overlapsOther reports whether a region other than self intersects
// [addr, addr+size).
func (rs *regions) overlapsOther(addr uint64, size int64, self *region) bool {
	for i := rs.firstEndingAbove(addr); i < len(rs.list) && rs.bounds[i].base < addr+uint64(size); i++ {
		if rs.list[i] != self {
			return true
		}
	}
	return false
}

// index returns the position of the first region whose base is at or
// above base, and whether it starts at base.
func (rs *regions) index(base uint64) (int, bool) {
	return slices.BinarySearchFunc(rs.bounds, base, func(x regionBounds, a uint64) int {
		switch {
		case x.base < a:
			return -1
		case x.base > a:
			return 1
		}
		return 0
	})
}

func (rs *regions) add(r *region) {
	i, _ := rs.index(r.base)
	rs.list = slices.Insert(rs.list, i, r)
	rs.bounds = slices.Insert(rs.bounds, i, regionBounds{r.base, r.end()})
	rs.markGranules(r)
}

func (rs *regions) remove(r *region) {
	i, found := rs.index(r.base)
	if !found || rs.list[i] != r {
		panic("allocator: releasing an unknown region")
	}
	rs.list = slices.Delete(rs.list, i, i+1)
	rs.bounds = slices.Delete(rs.bounds, i, i+1)
	rs.clearGranules(r)
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
