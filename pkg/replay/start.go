package replay

import (
	"fmt"
	"slices"
	"sort"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// The starting state of a trace that begins mid-run (allocator model §16).
// PyTorch's trace is a ring buffer: once full it drops its oldest entries,
// and allocations made before recording started never appear in it. What
// existed before the first entry is rebuilt from the trace and the final
// segments:
//
//   - a cudaMalloc'd segment existed before if the final snapshot has it
//     and the trace never creates it, or if the trace frees it without
//     having created it (its size is the segment_free's);
//   - for expandable segments, mapped memory existed before if the trace
//     unmaps it without having mapped it, or if the final snapshot has it
//     mapped and the trace never maps it;
//   - the live blocks in those segments are the addresses whose first
//     event is a free (size: the request rounded as PyTorch rounds it,
//     grown by a rest too small to have been split off: < 512 bytes in the
//     small pool and in expandable segments, <= 1 MiB in the large pool),
//     plus the snapshot's active blocks the trace never touches; a first
//     event free_completed (its free_requested was dropped) means the block
//     was waiting for events;
//   - the gaps are free blocks.

// startState is what the replay seeds before the first entry.
type startState struct {
	// segments to seed (cudaMalloc'd ones, and the pre-existing mapped
	// ranges of expandable segments), in address order. A segment the
	// trace never touches shares its Blocks with the snapshot's: read
	// only.
	segments []snapshot.Segment
	// reservations to create first, for the expandable ranges.
	reservations []seedReservation
	// blocks counts the live (active) blocks seeded.
	blocks int
	// exact marks seeded segments whose layout is the snapshot's own (the
	// trace never touches them), stale requested sizes included.
	exact map[uint64]bool
	// unexplained counts first-event frees no pre-existing segment covers.
	unexplained int
	warnings    []string
	// freeStacksAreAllocStacks is true unless the recording captured
	// free-time stacks (context="all"); see freesCarryAllocationStacks.
	freeStacksAreAllocStacks bool
}

// Whether the trace's free entries carry the stack of the allocation they
// free: PyTorch records the free-time stack on free entries only with
// context="all"; otherwise a free repeats the allocation's stack. The
// trace does not say which context was used, so the touch scan looks at
// the allocations made and freed inside the window (touchScan.pair): only
// if every one of their free entries carries the alloc's own stack does a
// first-event free (a block allocated before recording) name where that
// block was allocated; otherwise its stack is where it was freed and must
// not be charged as an allocation site. (A strict test: with "all", a
// tensor freed in the function that made it repeats the stack too — 73%
// of the pairs in one published trace.) With no pairs to judge by, it
// assumes _record_memory_history's default context, "all": free entries
// hold free-time stacks.

type seedReservation struct {
	base   uint64
	stream int64
	pool   snapshot.Pool
	poolID snapshot.PoolID
}

// firstFree is an address whose first event in the trace is a free.
type firstFree struct {
	idx int
	e   snapshot.TraceEntry
}

// span is a half-open address range.
type span struct{ lo, hi uint64 }

// spans is a sorted set of disjoint ranges. Each operation finds its place
// by binary search and touches only the ranges it overlaps, so that
// starting states with 100,000 segments seed in linear time (rebuilding
// the whole set on every add was quadratic: 0.45 s for 8,000 segments).
type spans []span

// first returns the index of the first range that ends at or after lo.
func (s spans) first(lo uint64) int {
	return sort.Search(len(s), func(k int) bool { return s[k].hi >= lo })
}

// add inserts [lo, hi), merging it with the ranges it overlaps or touches.
func (s *spans) add(lo, hi uint64) {
	if lo >= hi {
		return
	}
	v := *s
	i := v.first(lo)
	j := i
	for j < len(v) && v[j].lo <= hi {
		lo, hi = min(lo, v[j].lo), max(hi, v[j].hi)
		j++
	}
	if i == j {
		v = slices.Insert(v, i, span{lo, hi})
	} else {
		v[i] = span{lo, hi}
		v = slices.Delete(v, i+1, j)
	}
	*s = v
}

// remove takes [lo, hi) out of the set, splitting a range it cuts.
func (s *spans) remove(lo, hi uint64) {
	if lo >= hi {
		return
	}
	v := *s
	i := v.first(lo)
	if i < len(v) && v[i].hi == lo {
		i++ // ends where the removal starts: untouched
	}
	j := i
	for j < len(v) && v[j].lo < hi {
		j++
	}
	if i == j {
		return
	}
	var keep [2]span
	n := 0
	if v[i].lo < lo {
		keep[n] = span{v[i].lo, lo}
		n++
	}
	if v[j-1].hi > hi {
		keep[n] = span{hi, v[j-1].hi}
		n++
	}
	*s = slices.Replace(v, i, j, keep[:n]...)
}

// missing returns the parts of [lo, hi) the set does not cover.
func (s spans) missing(lo, hi uint64) []span {
	var out []span
	at := lo
	for _, x := range s[s.first(lo):] {
		if x.lo >= hi {
			break
		}
		if x.hi <= at {
			continue
		}
		if x.lo > at {
			out = append(out, span{at, x.lo})
		}
		at = max(at, x.hi)
	}
	if at < hi {
		out = append(out, span{at, hi})
	}
	return out
}

// segmentPoolOfSize: a cudaMalloc'd segment of 2 MiB belongs to the small
// pool; large-pool segments are 20 MiB or at least 10 MiB.
func segmentPoolOfSize(size int64) snapshot.Pool {
	if size == allocator.SmallBuffer {
		return snapshot.SmallPool
	}
	return snapshot.LargePool
}

// touchScan is one half of the pass that finds the addresses the trace
// allocates or frees blocks at; the same pass pairs each half's
// allocations with their frees (which stacks free entries carry), and the
// first half also hands every segment event to a callback: one decode of
// the trace per core, not one per question.
type touchScan struct {
	set   addrMap
	freed []firstFree // frees that are their address's first event
	// allocStack holds the stack of each live allocation; same of pairs
	// allocation-free pairs carried the allocation's stack on the free.
	allocStack  addrMap
	same, pairs int
	// touched sums what scan's reads ahead found, so that they are made.
	touched uint64
}

// scan covers the addresses of the given shard (0 or 1): a hash bit
// independent of the one addrMap places keys by, so that each half's
// table fills evenly. An address's entries all fall in one shard, so
// the halves' pairs add up to the whole trace's. segment, if not nil, is
// called for each segment event in trace order.
// The entries from from on are scanned (those before, StartScan's).
func (t *touchScan) scan(tr *snapshot.Trace, from int, shard uint64, segment func(i int, e snapshot.TraceEntry)) {
	// Every address is new at most once per allocation at it (or first
	// freed): sizing the set for the allocations spares it the rehashing
	// of doubling, a third of the pass on a trace of millions. The hash
	// bit splits them about evenly: half the trace's allocations and a
	// margin (counting this shard's exactly cost a pass of its own).
	allocs := tr.Count(snapshot.ActionAlloc)
	t.set.reserve(allocs/2 + allocs/16)
	// Each note misses the cache in both tables, one miss after the
	// other. The entries are noted in batches of scanBatch instead: a
	// batch's table slots are read in one loop, many misses under way at
	// once, and its entries noted once the next batch is read, the
	// slots in the cache by then. The notes keep the trace's order (the
	// segment events, which the notes do not read, go by at once).
	var batches [2][scanBatch]waitingNote
	cur, n := 0, 0
	prev := 0 // entries waiting in batches[1-cur]
	flush := func() {
		b := &batches[cur]
		for k := range n {
			t.touched += t.set.touch(b[k].e.Addr) + t.allocStack.touch(b[k].e.Addr)
		}
		p := &batches[1-cur]
		for k := range prev {
			t.note(p[k].i, &p[k].e)
		}
		cur, prev, n = 1-cur, n, 0
	}
	for i, e := range tr.From(from) {
		switch e.Action {
		case snapshot.ActionAlloc, snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted, snapshot.ActionFree:
			if touchShard(e.Addr) != shard {
				continue
			}
			batches[cur][n] = waitingNote{i, e}
			if n++; n == scanBatch {
				flush()
			}
		case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentFree, snapshot.ActionSegmentMap, snapshot.ActionSegmentUnmap:
			if segment != nil {
				segment(i, e)
			}
		}
	}
	flush()
	flush()
}

// scanBatch is how many entries touchScan.scan reads the table slots of
// at once.
const scanBatch = 32

// waitingNote is an entry waiting in touchScan.scan's ring.
type waitingNote struct {
	i int
	e snapshot.TraceEntry
}

// touchShard is the half of the touch scan address addr falls in.
func touchShard(addr uint64) uint64 { return ((addr >> 9) * 0xC2B2AE3D27D4EB4F) >> 63 }

// note adds entry i, an allocation or a free, to the half.
func (t *touchScan) note(i int, e *snapshot.TraceEntry) {
	if t.set.put(e.Addr, 0) && e.Action != snapshot.ActionAlloc {
		t.freed = append(t.freed, firstFree{i, *e})
	}
	t.pair(e)
}

// sortedAddrs returns the addresses of the half's set in increasing
// order; the set is garbage from here on.
func (t *touchScan) sortedAddrs() []uint64 {
	out := make([]uint64, 0, t.set.len())
	t.set.each(func(addr uint64, _ uint32) { out = append(out, addr) })
	// The set's slots (at least twice as many) are the sort's scratch.
	scratch := t.set.keys
	t.set = addrMap{}
	sortAddrs(out, scratch)
	return out
}

// sortAddrs sorts a in increasing order, using scratch (of at least
// len(a) elements, overwritten) when it can: a radix sort, a pass per
// byte in which the addresses differ (five or so: one process's device
// addresses share their top bytes), each pass a count and a scatter,
// against pdqsort's 18 compare-and-swap levels for 200,000 addresses
// (a third of rebuilding the start once the scan runs beside the reading).
func sortAddrs(a, scratch []uint64) {
	if len(a) < 1024 || len(scratch) < len(a) {
		slices.Sort(a)
		return
	}
	or, and := uint64(0), ^uint64(0)
	for _, x := range a {
		or, and = or|x, and&x
	}
	differ := or ^ and
	src, dst := a, scratch[:len(a)]
	for shift := uint(0); shift < 64; shift += 8 {
		if differ>>shift&0xff == 0 {
			continue
		}
		var at [256]int
		for _, x := range src {
			at[x>>shift&0xff]++
		}
		sum := 0
		for d, n := range at {
			at[d], sum = sum, sum+n
		}
		for _, x := range src {
			d := x >> shift & 0xff
			dst[at[d]] = x
			at[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &a[0] {
		copy(a, src)
	}
}

// pair notes an allocation's stack, or compares a free's with the stack
// of the allocation it frees.
func (t *touchScan) pair(e *snapshot.TraceEntry) {
	switch e.Action {
	case snapshot.ActionAlloc:
		t.allocStack.put(e.Addr, uint32(e.Stack))
	case snapshot.ActionFreeRequested, snapshot.ActionFree:
		if st, ok := t.allocStack.get(e.Addr); ok {
			t.pairs++
			if snapshot.StackID(st) == e.Stack {
				t.same++
			}
			t.allocStack.del(e.Addr)
		}
	}
}

// reconstructStart rebuilds the state before the first trace entry.
// resSize gives an expandable reservation's size for a page size.
//
// pre, if not nil, is a scan begun while the trace was read: when tr
// continues what it scanned, the pass starts from its halves.
func reconstructStart(cfg allocator.Config, tr *snapshot.Trace, streams streamTable, final []*snapshot.Segment, resSize func(page int64) int64, pre *StartScan) startState {
	st := startState{exact: make(map[uint64]bool)}
	created := make(map[uint64]int64) // cudaMalloc'd in the trace and still live
	type freedSeg struct {
		seg     snapshot.Segment
		freedAt int
	}
	var preFreed []freedSeg
	var mapped spans
	type preRange struct {
		span
		stream int64
	}
	var preMapped []preRange
	segment := func(i int, e snapshot.TraceEntry) {
		switch e.Action {
		case snapshot.ActionSegmentAlloc:
			created[e.Addr] = e.Size
		case snapshot.ActionSegmentFree:
			if _, ok := created[e.Addr]; ok {
				delete(created, e.Addr)
			} else {
				preFreed = append(preFreed, freedSeg{snapshot.Segment{
					Address: e.Addr, TotalSize: e.Size, Stream: streams.of(&e), Pool: segmentPoolOfSize(e.Size),
				}, i})
			}
		case snapshot.ActionSegmentMap:
			mapped.add(e.Addr, e.Addr+uint64(e.Size))
		case snapshot.ActionSegmentUnmap:
			for _, g := range mapped.missing(e.Addr, e.Addr+uint64(e.Size)) {
				preMapped = append(preMapped, preRange{g, streams.of(&e)})
			}
			mapped.remove(e.Addr, e.Addr+uint64(e.Size))
		}
	}
	// The addresses blocks are allocated or freed at, the frees that are
	// an address's first event and the stacks free entries carry come
	// from a pass over the trace split in two by address, each half on
	// its own core (the lookups of millions of addresses are the bulk of
	// rebuilding the start); this core's half also follows the segments.
	// Each half also sorts its own addresses on its core; the halves
	// are searched side by side, never merged.
	var shards [2]touchScan
	var touchedSorted [2][]uint64
	from := 0
	if pre := pre.take(tr); pre != nil {
		shards, from = pre.shards, pre.n
		for _, x := range pre.segs {
			segment(x.idx, x.e)
		}
		pre.shards, pre.segs, pre.scanned = [2]touchScan{}, nil, nil
	}
	done := make(chan struct{})
	go func() {
		shards[1].scan(tr, from, 1, nil)
		touchedSorted[1] = shards[1].sortedAddrs()
		close(done)
	}()
	shards[0].scan(tr, from, 0, segment)
	touchedSorted[0] = shards[0].sortedAddrs()
	<-done
	pairs := shards[0].pairs + shards[1].pairs
	st.freeStacksAreAllocStacks = pairs > 0 && shards[0].same+shards[1].same == pairs
	shards[0].allocStack, shards[1].allocStack = addrMap{}, addrMap{} // garbage from here on
	freed := append(shards[0].freed, shards[1].freed...)
	sort.Slice(freed, func(i, j int) bool { return freed[i].e.Addr < freed[j].e.Addr })
	// touched reports whether a block at addr is allocated or freed in
	// the trace.
	touched := func(addr uint64) bool {
		for _, half := range touchedSorted {
			if _, ok := slices.BinarySearch(half, addr); ok {
				return true
			}
		}
		return false
	}
	// untouched reports whether no block in [lo, hi) is allocated or freed
	// in the trace: its layout then is the snapshot's from the start.
	untouched := func(lo, hi uint64) bool {
		for _, half := range touchedSorted {
			if i, _ := slices.BinarySearch(half, lo); i < len(half) && half[i] < hi {
				return false
			}
		}
		return true
	}
	used := make([]bool, len(freed))
	// inRange returns the first-event frees in [lo, hi) before entry limit.
	inRange := func(lo, hi uint64, limit int) []firstFree {
		i := sort.Search(len(freed), func(i int) bool { return freed[i].e.Addr >= lo })
		var out []firstFree
		for ; i < len(freed) && freed[i].e.Addr < hi; i++ {
			if freed[i].idx < limit {
				out = append(out, freed[i])
				used[i] = true
			}
		}
		return out
	}

	var expandable []*snapshot.Segment
	for _, s := range final {
		if s.Expandable {
			expandable = append(expandable, s)
			for _, g := range mapped.missing(s.Address, s.End()) {
				preMapped = append(preMapped, preRange{g, s.Stream})
			}
			continue
		}
		if size, ok := created[s.Address]; ok {
			if size != s.TotalSize {
				st.warnings = append(st.warnings, fmt.Sprintf("segment %#x: the trace creates it with %d bytes, the snapshot has %d", s.Address, size, s.TotalSize))
			}
			continue
		}
		// A segment the simulation cannot hold is seeded all the same:
		// seedStart keeps what fails outside the simulation, counted in
		// every figure. Private pools' segments go to their pool.
		seg := snapshot.Segment{Device: s.Device, Address: s.Address, TotalSize: s.TotalSize, Stream: s.Stream, Pool: s.Pool, PoolID: s.PoolID, Stack: s.Stack}
		if untouched(s.Address, s.End()) {
			// Nothing happened in it during the trace: the snapshot's
			// blocks, stale requested sizes of free blocks included. They
			// are shared, not copied: the snapshot is never changed, and
			// a copy of every block of a large snapshot was the live
			// heap's peak while the simulator was seeded from it (76 MB
			// on torch-1GB's 1.7 M blocks).
			seg.Blocks = s.Blocks
			st.exact[s.Address] = true
			for _, b := range s.Blocks {
				if b.State.Active() {
					st.blocks++
				}
			}
		} else {
			seg.Blocks = st.liveBlocks(cfg, &seg, s.Blocks, touched, inRange(s.Address, s.End(), tr.Len()))
		}
		st.segments = append(st.segments, seg)
	}
	for _, p := range preFreed {
		seg := p.seg
		seg.Blocks = st.liveBlocks(cfg, &seg, nil, touched, inRange(seg.Address, seg.End(), p.freedAt))
		st.segments = append(st.segments, seg)
	}

	// Pre-existing mapped ranges of expandable segments: contiguous ranges
	// of one stream become one seeded segment each.
	slices.SortFunc(preMapped, func(a, b preRange) int {
		if a.lo < b.lo {
			return -1
		}
		return 1
	})
	var merged []preRange
	for _, r := range preMapped {
		if n := len(merged); n > 0 && merged[n-1].stream == r.stream && merged[n-1].hi >= r.lo {
			merged[n-1].hi = max(merged[n-1].hi, r.hi)
			continue
		}
		merged = append(merged, r)
	}
	var expSeeds []snapshot.Segment
	for _, r := range merged {
		seg := snapshot.Segment{Address: r.lo, TotalSize: int64(r.hi - r.lo), Stream: r.stream, Expandable: true}
		var blocks []snapshot.Block
		seg.Pool = snapshot.SmallPool
		if seg.TotalSize%allocator.LargeBuffer == 0 {
			seg.Pool = snapshot.LargePool
		}
		for _, s := range expandable {
			if s.Address < r.hi && r.lo < s.End() {
				seg.Pool, seg.PoolID = s.Pool, s.PoolID
				for _, b := range s.Blocks {
					if b.Address >= r.lo && b.Address < r.hi {
						blocks = append(blocks, b)
					}
				}
			}
		}
		seg.Blocks = st.liveBlocks(cfg, &seg, blocks, touched, inRange(r.lo, r.hi, tr.Len()))
		expSeeds = append(expSeeds, seg)
	}
	// One reservation per cluster of ranges of a stream and pool. The true
	// base of a reservation mapped before recording started is recorded
	// nowhere; CUDA hands out reservations next to each other, so the
	// base is put where the reservation ends right before the next other
	// reservation's lowest known address, and at the cluster's lowest known
	// address when that does not fit.
	type known struct {
		addr   uint64
		stream int64
		pool   snapshot.Pool
	}
	var addrs []known
	for i, e := range tr.All() {
		if tr.Count(snapshot.ActionSegmentMap) == 0 {
			break
		}
		if e.Action != snapshot.ActionSegmentMap {
			continue
		}
		pool := snapshot.LargePool
		for _, f := range tr.From(i + 1) {
			if f.Action == snapshot.ActionAlloc || f.Action == snapshot.ActionOOM {
				if cfg.RoundSize(f.Size) <= allocator.SmallSize {
					pool = snapshot.SmallPool
				}
				break
			}
		}
		addrs = append(addrs, known{e.Addr, streams.of(&e), pool})
	}
	for _, s := range expandable {
		addrs = append(addrs, known{s.Address, s.Stream, s.Pool})
	}
	for _, s := range expSeeds {
		addrs = append(addrs, known{s.Address, s.Stream, s.Pool})
	}
	for _, s := range expSeeds {
		page := int64(allocator.LargeBuffer)
		if s.Pool == snapshot.SmallPool {
			page = allocator.SmallBuffer
		}
		res := uint64(resSize(page))
		inside := false
		for _, r := range st.reservations {
			if r.stream == s.Stream && r.pool == s.Pool && s.Address >= r.base && s.End() <= r.base+res {
				inside = true
			}
		}
		if inside {
			continue
		}
		lo := s.Address
		next := uint64(0)
		for _, k := range addrs {
			own := k.stream == s.Stream && k.pool == s.Pool
			switch {
			case own && k.addr < lo && k.addr+res > s.Address && (s.Address-k.addr)%uint64(page) == 0:
				lo = k.addr
			case !own && k.addr > s.Address && (next == 0 || k.addr < next):
				next = k.addr
			}
		}
		base := lo
		if next > res && next-res <= lo {
			base = lo - (lo-(next-res))/uint64(page)*uint64(page)
		}
		for _, r := range st.reservations {
			if base < r.base+res && r.base < base+res {
				base = lo // would overlap a reservation already placed
			}
		}
		st.reservations = append(st.reservations, seedReservation{base, s.Stream, s.Pool, s.PoolID})
	}
	st.segments = append(st.segments, expSeeds...)
	slices.SortFunc(st.segments, func(a, b snapshot.Segment) int {
		if a.Address < b.Address {
			return -1
		}
		return 1
	})
	for i, f := range freed {
		if !used[i] {
			st.unexplained++
			if st.unexplained <= 3 {
				st.warnings = append(st.warnings, fmt.Sprintf("entry %d: %s of %#x, which no segment covers before it", f.idx, f.e.Action, f.e.Addr))
			}
		}
	}
	if st.unexplained > 3 {
		st.warnings = append(st.warnings, fmt.Sprintf("%d more first-event frees of addresses no segment covers", st.unexplained-3))
	}
	return st
}

// liveBlocks lays out a pre-existing segment's blocks at the start of the
// trace: its live blocks (the snapshot's active blocks the trace never
// touches, which keep their recorded size, and the first-event frees) with
// free blocks in the gaps.
func (st *startState) liveBlocks(cfg allocator.Config, seg *snapshot.Segment, final []snapshot.Block, touched func(addr uint64) bool, freed []firstFree) []snapshot.Block {
	type live struct {
		b     snapshot.Block
		exact bool // size known from the snapshot
	}
	var blocks []live
	for _, b := range final {
		if b.State.Active() && !touched(b.Address) {
			blocks = append(blocks, live{b, true})
		}
	}
	for _, f := range freed {
		state := snapshot.ActiveAllocated
		if f.e.Action == snapshot.ActionFreeCompleted {
			state = snapshot.ActivePendingFree
		}
		stack := f.e.Stack
		if !st.freeStacksAreAllocStacks {
			stack = snapshot.NoStack
		}
		blocks = append(blocks, live{b: snapshot.Block{
			Address: f.e.Addr, Size: cfg.RoundSize(f.e.Size), RequestedSize: f.e.Size, State: state, Stack: stack,
		}})
	}
	slices.SortFunc(blocks, func(x, y live) int {
		if x.b.Address < y.b.Address {
			return -1
		}
		return 1
	})
	fineSplit := seg.Pool == snapshot.SmallPool || seg.Expandable
	var out []snapshot.Block
	at := seg.Address
	for i, lb := range blocks {
		b := lb.b
		end := seg.End()
		if i+1 < len(blocks) {
			end = blocks[i+1].b.Address
		}
		if b.Address < at || b.Address+uint64(b.Size) > end {
			st.warnings = append(st.warnings, fmt.Sprintf("segment %#x: live block %#x (%d bytes) at the start overlaps its neighbours; left out", seg.Address, b.Address, b.Size))
			continue
		}
		rest := int64(end - (b.Address + uint64(b.Size)))
		switch {
		case lb.exact:
		case fineSplit && rest < allocator.MinBlockSize, !fineSplit && rest <= allocator.SmallSize:
			b.Size += rest
		case !fineSplit && uint64(b.Size) >= cfg.MaxSplitSize:
			// Oversize blocks are never split: a free block of
			// max_split_size or more is always a whole segment.
			b.Size += rest
		}
		if b.Address > at {
			out = append(out, snapshot.Block{Address: at, Size: int64(b.Address - at)})
		}
		out = append(out, b)
		st.blocks++
		at = b.Address + uint64(b.Size)
	}
	if len(out) > 0 && at < seg.End() {
		out = append(out, snapshot.Block{Address: at, Size: int64(seg.End() - at)})
	}
	return out
}
