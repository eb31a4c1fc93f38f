package allocator

import (
	"fmt"
	"slices"

	"github.com/memstat/memstat/pkg/snapshot"
)

// BlockInfo is a read-only view of one block.
type BlockInfo struct {
	Address       uint64
	Size          int64
	RequestedSize int64 // of the block's last allocation (stale when free)
	Stream        int64
	Pool          snapshot.Pool
	PoolID        snapshot.PoolID
	State         snapshot.BlockState
	// Mapped is false for unmapped address space of an expandable segment.
	Mapped     bool
	Expandable bool
	// RegionAddress is the base of the cudaMalloc'd segment or of the
	// expandable segment's reservation holding the block; Offset is the
	// block's distance from it.
	RegionAddress uint64
	Offset        int64
	Stack         snapshot.StackID
}

func (a *Allocator) blockInfo(b *block) BlockInfo {
	return BlockInfo{
		Address:       b.addr,
		Size:          b.size,
		RequestedSize: b.requested,
		Stream:        b.stream(),
		Pool:          b.pool().kind(),
		PoolID:        b.pool().id,
		State:         b.state(),
		Mapped:        b.mapped,
		Expandable:    b.region.expandable,
		RegionAddress: b.region.base,
		Offset:        int64(b.addr - b.region.base),
		Stack:         b.stack,
	}
}

// BlockAt returns the block containing addr (allocated, pending, free or
// unmapped), or false if no segment covers addr.
func (a *Allocator) BlockAt(addr uint64) (BlockInfo, bool) {
	if b := a.allocated.get(addr); b != nil {
		return a.blockInfo(b), true
	}
	r := a.regions.find(addr)
	if r == nil {
		return BlockInfo{}, false
	}
	b := r.blockAt(addr)
	return a.blockInfo(b), b != nil
}

// Locate returns BlockAt's RegionAddress and Offset for addr without the
// rest of the block's view: the base of the segment (or expandable
// reservation) holding addr and the offset there of the block containing
// it. An address no region holds is answered from the regions alone (a
// binary search of a few cached pages), before the address table: a
// miss there reads a slot and the blocks of its probe run, cache misses
// each, and a trace's listing asks at every allocation, including those
// a replay could not apply (a generated trace's addresses outside every
// segment). Every block lies in exactly one region (CheckInvariants), so
// the answer is BlockAt's.
func (a *Allocator) Locate(addr uint64) (region uint64, offset int64, ok bool) {
	r := a.regions.find(addr)
	if r == nil {
		return 0, 0, false
	}
	b := a.allocated.get(addr)
	if b == nil {
		if b = r.blockAt(addr); b == nil {
			return 0, 0, false
		}
	}
	return r.base, int64(b.addr - r.base), true
}

// AllocatedAt returns the handed-out block at addr: BlockAt's answer when
// it is a block starting at addr in state ActiveAllocated, which only the
// address table holds (CheckInvariants). As Locate, an address no region
// holds is answered from the regions alone.
func (a *Allocator) AllocatedAt(addr uint64) (BlockInfo, bool) {
	if a.regions.find(addr) == nil {
		return BlockInfo{}, false
	}
	if b := a.allocated.get(addr); b != nil {
		return a.blockInfo(b), true
	}
	return BlockInfo{}, false
}

// Hold says what a block starting at an address is to its owner:
// handed out, freed and waiting for its stream events, or neither.
type Hold uint8

const (
	// HoldNone: no handed-out or pending block starts at the address.
	HoldNone Hold = iota
	// HoldAllocated: Allocated(addr).
	HoldAllocated
	// HoldPending: PendingFree(addr).
	HoldPending
)

// HoldAt answers Allocated and PendingFree at once (a block is in at most
// one of the two tables). As Locate, an address no region holds is
// answered from the regions alone: a follow replay asks at every free
// entry, and a trace that disagrees with its snapshot (the generated
// benchmark files) frees addresses outside every segment at most of them,
// where each table's miss read a slot and the blocks of its probe run,
// cache misses each. Every handed-out or pending block lies in a region
// (CheckInvariants), so the answer is the tables'.
func (a *Allocator) HoldAt(addr uint64) Hold {
	if a.regions.find(addr) == nil {
		return HoldNone
	}
	if a.pending.get(addr) != nil {
		return HoldPending
	}
	if a.allocated.get(addr) != nil {
		return HoldAllocated
	}
	return HoldNone
}

// ReserveAllocated sizes the table of handed-out blocks for n of them, for
// a caller about to allocate that many at once (a what-if replay's
// starting state): the table is the size n allocations would grow it to,
// without the rehashing of each doubling on the way.
func (a *Allocator) ReserveAllocated(n int) { a.allocated.reserve(n) }

// ReservePending sizes the table of pending frees for n of them, as
// ReserveAllocated the handed-out blocks' (a follow replay about to seed
// a starting state with that many).
func (a *Allocator) ReservePending(n int) { a.pending.reserve(n) }

// Touch reads the table slot where a lookup of addr among the handed-out
// blocks starts (pending: among the blocks whose free awaits its events,
// and then the block's neighbours too, which completing the free merges
// with), and the block there, and returns what it read: a caller that
// knows which addresses it will free soon reads their memory in a batch,
// many cache misses under way at once, instead of one after the other as
// each free comes (the what-if replay's read ahead). It changes nothing.
func (a *Allocator) Touch(addr uint64, pending bool) uint64 {
	t := &a.allocated
	if pending {
		t = &a.pending
	}
	if len(t.slots) == 0 {
		return 0
	}
	b := t.slots[t.slot(addr)]
	if b == nil {
		return 0
	}
	sum := b.addr
	if pending {
		if p := b.prev; p != nil {
			sum += p.addr
		}
		if n := b.next; n != nil {
			sum += n.addr
		}
	}
	return sum
}

// Allocated reports whether addr is the address of a handed-out block.
func (a *Allocator) Allocated(addr uint64) bool {
	return a.allocated.get(addr) != nil
}

// Region is a read-only view of one address range: a cudaMalloc'd segment,
// or the whole address reservation of an expandable segment (whose mapped
// ranges Segments reports as separate snapshot segments).
type Region struct {
	Address    uint64
	Size       int64
	Stream     int64
	Pool       snapshot.Pool
	PoolID     snapshot.PoolID
	Expandable bool
	// Page is the mapping granularity of an expandable segment; MappedBytes
	// the physical memory mapped into it (Size for a cudaMalloc'd segment).
	Page        int64
	MappedBytes int64
}

// Regions lists every live region in address order.
func (a *Allocator) Regions() []Region {
	out := make([]Region, 0, len(a.regions.list))
	for _, r := range a.regions.list {
		mapped := r.size
		if r.expandable {
			mapped = r.mappedBytes
		}
		out = append(out, Region{
			Address: r.base, Size: r.size, Stream: r.stream, Pool: r.pool.kind(), PoolID: r.pool.id,
			Expandable: r.expandable, Page: r.page, MappedBytes: mapped,
		})
	}
	return out
}

// Blocks calls fn for every block in address order (regions in address
// order, each from its first block), including unmapped ones, until fn
// returns false.
func (a *Allocator) Blocks(fn func(BlockInfo) bool) {
	for _, r := range a.regions.list {
		for b := r.head; b != nil; b = b.next {
			if !fn(a.blockInfo(b)) {
				return
			}
		}
	}
}

// ForcedOperations counts the calls of the Force* methods that changed the
// state, for a replay driver's divergence report.
func (a *Allocator) ForcedOperations() int64 { return a.forced }

// CheckInvariants verifies the allocator's internal consistency: blocks tile
// every region; no two neighbouring blocks are both free in the same mapped
// state; the free sets hold exactly the free blocks; the device's obtained
// memory and every statistic's current value match a recount from the
// blocks; peaks are at least the current values. It costs O(blocks); tests
// and replay drivers call it after each operation.
func (a *Allocator) CheckInvariants() error {
	var want Stats
	var obtained int64
	freeMapped := map[*block]bool{}
	unmapped := map[*block]bool{}
	allocated := 0
	if len(a.regions.bounds) != len(a.regions.list) {
		return fmt.Errorf("%d regions, %d ranges in the list's bounds", len(a.regions.list), len(a.regions.bounds))
	}
	if err := a.regions.checkGranules(); err != nil {
		return err
	}
	for i, r := range a.regions.list {
		if i > 0 && a.regions.list[i-1].end() > r.base {
			return fmt.Errorf("regions %#x and %#x overlap", a.regions.list[i-1].base, r.base)
		}
		if a.regions.bounds[i] != (regionBounds{r.base, r.end()}) {
			return fmt.Errorf("region %#x: its range in the list's bounds is not its own", r.base)
		}
		if r.head == nil || r.head.prev != nil || r.head.addr != r.base {
			return fmt.Errorf("region %#x: bad head", r.base)
		}
		pi := r.pool.statIndex()
		if r.expandable {
			obtained += r.mappedBytes
		} else {
			obtained += r.size
			want.Segment.increase(pi, 1)
			if uint64(r.size) >= a.cfg.MaxSplitSize {
				want.OversizeSegments.increase(1)
			}
		}
		addr := r.base
		var mapped int64
		for b := r.head; b != nil; b = b.next {
			if b.region != r {
				return fmt.Errorf("block %#x: wrong region", b.addr)
			}
			if b.addr != addr || b.size <= 0 {
				return fmt.Errorf("region %#x: block at %#x (size %d) where %#x was expected", r.base, b.addr, b.size, addr)
			}
			if b.next != nil && b.next.prev != b {
				return fmt.Errorf("block %#x: broken links", b.addr)
			}
			if !r.expandable && !b.mapped {
				return fmt.Errorf("block %#x: unmapped block in a cudaMalloc'd segment", b.addr)
			}
			addr = b.end()
			if n := b.next; n != nil && b.free() && n.free() && b.mapped == n.mapped {
				return fmt.Errorf("blocks %#x and %#x are both free and neighbours", b.addr, n.addr)
			}
			if b.mapped {
				mapped += b.size
			}
			switch {
			case !b.mapped:
				unmapped[b] = true
				if b.allocated || b.eventCount > 0 {
					return fmt.Errorf("block %#x: unmapped but in use", b.addr)
				}
			case b.free():
				freeMapped[b] = true
				if b.isSplit() && !r.expandable {
					want.InactiveSplit.increase(pi, 1)
					want.InactiveSplitBytes.increase(pi, b.size)
				}
			default:
				want.Active.increase(pi, 1)
				want.ActiveBytes.increase(pi, b.size)
				want.RequestedBytes.increase(pi, b.requested)
				if b.allocated {
					allocated++
					if a.allocated.get(b.addr) != b {
						return fmt.Errorf("block %#x: allocated but not in the address map", b.addr)
					}
					want.Allocation.increase(pi, 1)
					want.AllocatedBytes.increase(pi, b.size)
					if uint64(b.size) >= a.cfg.MaxSplitSize {
						want.OversizeAllocations.increase(1)
					}
				} else if a.pending.get(b.addr) != b && !slices.Contains(a.deferred, b) {
					return fmt.Errorf("block %#x: pending but not in the pending map", b.addr)
				}
			}
		}
		if addr != r.end() {
			return fmt.Errorf("region %#x: blocks end at %#x, region at %#x", r.base, addr, r.end())
		}
		if r.expandable {
			if mapped != r.mappedBytes {
				return fmt.Errorf("region %#x: %d bytes mapped in blocks, %d recorded", r.base, mapped, r.mappedBytes)
			}
		}
		want.ReservedBytes.increase(pi, mapped)
	}
	if allocated != a.allocated.len() {
		return fmt.Errorf("%d allocated blocks, %d in the address map", allocated, a.allocated.len())
	}
	obtained += a.UnmodelledBytes()
	if obtained != a.dev.obtained {
		return fmt.Errorf("device obtained %d, segments and mapped pages add up to %d", a.dev.obtained, obtained)
	}
	type freeSet struct {
		name string
		t    *btree
		key  func(*block) freeKey
		free bool
		pool *blockPool
	}
	sets := []freeSet{
		{"small free", &a.small.blocks, (*block).key, true, &a.small},
		{"large free", &a.large.blocks, (*block).key, true, &a.large},
		{"small unmapped", &a.small.unmapped, (*block).unmappedKey, false, nil},
		{"large unmapped", &a.large.unmapped, (*block).unmappedKey, false, nil},
	}
	for _, pp := range a.pools {
		name := fmt.Sprintf("pool (%d, %d) ", pp.id[0], pp.id[1])
		sets = append(sets,
			freeSet{name + "small free", &pp.small.blocks, (*block).key, true, &pp.small},
			freeSet{name + "large free", &pp.large.blocks, (*block).key, true, &pp.large},
			freeSet{name + "small unmapped", &pp.small.unmapped, (*block).unmappedKey, false, nil},
			freeSet{name + "large unmapped", &pp.large.unmapped, (*block).unmappedKey, false, nil})
	}
	for _, set := range sets {
		if err := set.t.check(); err != nil {
			return fmt.Errorf("%s set: %w", set.name, err)
		}
		var err error
		var cached int64
		set.t.ascend(func(it freeItem) bool {
			if set.free {
				cached += it.b.cached()
			}
			switch {
			case it.k != set.key(it.b):
				err = fmt.Errorf("%s set: stale key for block %#x", set.name, it.b.addr)
			case set.free:
				if !freeMapped[it.b] {
					err = fmt.Errorf("%s set: block %#x is not a free mapped block", set.name, it.b.addr)
				}
				delete(freeMapped, it.b)
			default:
				if !unmapped[it.b] {
					err = fmt.Errorf("%s set: block %#x is not unmapped", set.name, it.b.addr)
				}
				delete(unmapped, it.b)
			}
			return err == nil
		})
		if err != nil {
			return err
		}
		if set.free && cached != set.pool.cached {
			return fmt.Errorf("%s set: %d bytes cached, recount %d", set.name, set.pool.cached, cached)
		}
	}
	if len(freeMapped) > 0 || len(unmapped) > 0 {
		return fmt.Errorf("%d free and %d unmapped blocks missing from the free sets", len(freeMapped), len(unmapped))
	}
	if err := a.checkPools(); err != nil {
		return err
	}
	got := &a.stats
	for i, pair := range [][2]*StatArray{
		{&got.Allocation, &want.Allocation}, {&got.Segment, &want.Segment}, {&got.Active, &want.Active},
		{&got.InactiveSplit, &want.InactiveSplit}, {&got.AllocatedBytes, &want.AllocatedBytes},
		{&got.ReservedBytes, &want.ReservedBytes}, {&got.ActiveBytes, &want.ActiveBytes},
		{&got.InactiveSplitBytes, &want.InactiveSplitBytes}, {&got.RequestedBytes, &want.RequestedBytes},
	} {
		for pool := range 3 {
			g, w := pair[0][pool], pair[1][pool]
			if g.Current != w.Current {
				return fmt.Errorf("stat %d pool %d: current %d, recount %d", i, pool, g.Current, w.Current)
			}
			if g.Peak < g.Current {
				return fmt.Errorf("stat %d pool %d: peak %d below current %d", i, pool, g.Peak, g.Current)
			}
		}
	}
	for _, pair := range [][2]*Stat{{&got.OversizeAllocations, &want.OversizeAllocations}, {&got.OversizeSegments, &want.OversizeSegments}} {
		if pair[0].Current != pair[1].Current || pair[0].Peak < pair[0].Current {
			return fmt.Errorf("oversize stat: current %d peak %d, recount %d", pair[0].Current, pair[0].Peak, pair[1].Current)
		}
	}
	return a.checkEvents()
}

// checkEvents verifies that the event queues account for every pending
// block's outstanding events.
func (a *Allocator) checkEvents() error {
	perBlock := map[*block]int32{}
	n := 0
	for i, q := range a.streams {
		if i > 0 && uint64(a.streams[i-1].stream) >= uint64(q.stream) {
			return fmt.Errorf("event queues out of order")
		}
		for _, e := range q.events {
			perBlock[e.b]++
			n++
		}
	}
	if n != a.nEvents {
		return fmt.Errorf("%d queued events, counter says %d", n, a.nEvents)
	}
	if len(perBlock) != a.pending.len() {
		return fmt.Errorf("%d blocks with events, %d pending blocks", len(perBlock), a.pending.len())
	}
	for b, k := range perBlock {
		if a.pending.get(b.addr) != b || b.eventCount != k || b.allocated {
			return fmt.Errorf("pending block %#x: %d events queued, count %d", b.addr, k, b.eventCount)
		}
	}
	return nil
}

// checkPools verifies the private pools' own figures against a recount of
// their blocks, and that every block sits in its region's pool.
func (a *Allocator) checkPools() error {
	var res, alloc int64
	for _, u := range a.PoolUsages()[1:] {
		pp := a.poolByID(u.ID)
		if pp.reserved.Current != u.Reserved || pp.allocated.Current != u.Allocated {
			return fmt.Errorf("pool (%d, %d): reserved %d allocated %d, recount %d and %d", u.ID[0], u.ID[1], pp.reserved.Current, pp.allocated.Current, u.Reserved, u.Allocated)
		}
		res += u.Reserved
		alloc += u.Allocated
	}
	if a.privateReserved.Current != res || a.privateAllocated.Current != alloc {
		return fmt.Errorf("private pools: reserved %d allocated %d, recount %d and %d", a.privateReserved.Current, a.privateAllocated.Current, res, alloc)
	}
	for _, r := range a.regions.list {
		if o := r.pool.owner; o != nil && a.poolByID(o.id) != o {
			return fmt.Errorf("segment %#x: its pool (%d, %d) is gone", r.base, o.id[0], o.id[1])
		}
	}
	return nil
}
