package replay

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

const maxMismatches = 20

// agree compares the replayed state with the snapshot's final segments.
func (r *Replay) agree() *Agreement {
	ag := &Agreement{}
	compareStates(r.a, r.modelledFinal(), r.start.exact, r.seeded, r.staleKnown(), ag)
	if kept := r.a.Unmodelled(); len(kept) > 0 {
		// Kept as the snapshot has them: equal by construction.
		for _, s := range kept {
			ag.Segments.Snapshot++
			ag.Segments.Replayed++
			ag.Segments.Matching++
			ag.Blocks.Snapshot += len(s.Blocks)
			ag.Blocks.Replayed += len(s.Blocks)
			ag.Blocks.Matching += len(s.Blocks)
		}
		ag.Note = fmt.Sprintf("%d segments the simulation could not place are kept as the snapshot has them", len(kept))
	}
	if r.tw.n == 0 {
		ag.Note = "no trace: the replayed state is the snapshot's own, so the two agree by construction"
	}
	return ag
}

// staleKnown says whether the replay can know the stale requested sizes of
// free blocks (the request of whichever block object survived each split
// and merge): not after it changed block sizes after the fact
// (runtime.go), nor after it forced a call that no pool it knew
// reproduced (tryPools: a pool released before the snapshot, before 2.9),
// whose blocks were then made from other block objects.
func (r *Replay) staleKnown() bool { return !r.toggled && !r.splitsUnknown && !r.poolUnknown }

// compareStates fills ag with the differences between a's segments and
// the snapshot's, snap (sorted by address, as New sorts r.final).
// Requested sizes are compared where the replay can know them: for active
// blocks, and for free blocks of segments the trace created or left
// untouched (free blocks of a rebuilt starting state keep stale values
// from before the recording).
//
// Both sides are walked once in address order, one replayed segment at a
// time (see EachSegment): a copy of the whole replayed state and maps of
// its segments and blocks cost a third of the memory of replaying a 1 GB
// snapshot. A large state is walked in two halves of the address space at
// once, on two cores. The differences are listed as they were when the
// comparison went through the snapshot's segments and then the replay's:
// the snapshot's first, then the replayed segments it lacks.
// staleKnown says whether the stale requested sizes of free blocks can be
// compared: not after a replay changed block sizes after the fact
// (runtime.go), which cannot know them.
func compareStates(a *allocator.Allocator, snap []*snapshot.Segment, exact map[uint64]bool, seeded spans, staleKnown bool, ag *Agreement) {
	ag.Segments.Snapshot = len(snap)
	for _, s := range snap {
		ag.Blocks.Snapshot += len(s.Blocks)
	}
	var parts []*rangeComparison
	n := a.NumRegions()
	if n < splitCompareRegions {
		parts = []*rangeComparison{compareRange(a, 0, n, snap, exact, seeded, staleKnown)}
	} else {
		// Every region below mid ends before regions[mid] begins, so the
		// snapshot's segments split at its base.
		mid := compareMid(a, snap, ag.Blocks.Snapshot)
		cut, _ := slices.BinarySearchFunc(snap, a.RegionBase(mid), func(s *snapshot.Segment, addr uint64) int { return cmp.Compare(s.Address, addr) })
		parts = make([]*rangeComparison, 2)
		done := make(chan struct{})
		go func() { parts[1] = compareRange(a, mid, n, snap[cut:], exact, seeded, staleKnown); close(done) }()
		parts[0] = compareRange(a, 0, mid, snap[:cut], exact, seeded, staleKnown)
		<-done
	}
	for _, p := range parts {
		ag.Segments.Replayed += p.Segments.Replayed
		ag.Segments.Matching += p.Segments.Matching
		ag.Blocks.Replayed += p.Blocks.Replayed
		ag.Blocks.Matching += p.Blocks.Matching
		ag.RequestedSizes.Snapshot += p.RequestedSizes.Snapshot
		ag.RequestedSizes.Replayed += p.RequestedSizes.Replayed
		ag.RequestedSizes.Matching += p.RequestedSizes.Matching
		ag.MismatchCount += p.MismatchCount + p.nExtra
		ag.Mismatches = appendUpTo(ag.Mismatches, p.Mismatches)
	}
	for _, p := range parts {
		ag.Mismatches = appendUpTo(ag.Mismatches, p.extra)
	}
}

// compareMid is the region compareStates' second half starts at: the
// first at or above the snapshot segment that holds the middle one of its
// blocks, so that each half compares about as many blocks. Half the
// regions was no half of the work: a replay that returned many free
// segments the snapshot no longer has (torch-1GB: 113,512 of 199,512
// regions, one block each) left one half with most blocks (profile:
// 0.21 s against 0.06 s). It is within [1, n-1].
func compareMid(a *allocator.Allocator, snap []*snapshot.Segment, blocks int) int {
	n := a.NumRegions()
	at := uint64(math.MaxUint64)
	seen := 0
	for _, s := range snap {
		seen += len(s.Blocks)
		if seen > blocks/2 {
			at = s.Address
			break
		}
	}
	mid := sort.Search(n, func(i int) bool { return a.RegionBase(i) >= at })
	return min(max(mid, 1), n-1)
}

// reconcileHalves walks the replay's segments (allocator.EachSegment) and
// returns what pick gathers of them, in their order: from
// splitReconcileRegions regions on, in two halves at once (split as
// compareStates splits them), each half on its own goroutine with its
// own lookup over sorted when that is not nil. pick may read the
// simulator and what no one writes meanwhile, nothing else. On torch-1GB
// reconcile's two walks of its 200,000 regions were 0.15 s of Result's
// serial path.
func reconcileHalves(a *allocator.Allocator, final []*snapshot.Segment, pick func(seg *snapshot.Segment, out []snapshot.Block, snapBlock func(uint64) (snapshot.Block, bool)) []snapshot.Block, sorted []*snapshot.Block) []snapshot.Block {
	lookup := func() func(uint64) (snapshot.Block, bool) {
		if sorted == nil {
			return nil
		}
		return blockLookup(sorted)
	}
	walk := func(from, to int) []snapshot.Block {
		var out []snapshot.Block
		look := lookup()
		a.EachSegmentOfRegions(from, to, nil, func(seg *snapshot.Segment) { out = pick(seg, out, look) })
		return out
	}
	n := a.NumRegions()
	if n < splitReconcileRegions {
		return walk(0, n)
	}
	blocks := 0
	for _, s := range final {
		blocks += len(s.Blocks)
	}
	mid := compareMid(a, final, blocks)
	var high []snapshot.Block
	done := make(chan struct{})
	go func() { high = walk(mid, n); close(done) }()
	low := walk(0, mid)
	<-done
	return append(low, high...)
}

// splitReconcileRegions is the number of regions from which reconcile
// walks them in two halves (a variable for the test that compares both
// ways).
var splitReconcileRegions = 1024

// splitCompareRegions is the number of regions from which compareStates
// works in two halves (a variable for the test that compares both ways).
var splitCompareRegions = 1024

func appendUpTo(list, more []string) []string {
	return append(list, more[:min(len(more), max(maxMismatches-len(list), 0))]...)
}

// rangeComparison is compareStates' finding over some regions and the
// snapshot segments in their address range; Agreement holds the
// differences found on the snapshot's side, extra and nExtra the replayed
// segments the snapshot lacks.
type rangeComparison struct {
	Agreement
	extra  []string
	nExtra int
}

func compareRange(a *allocator.Allocator, from, to int, snap []*snapshot.Segment, exact map[uint64]bool, seeded spans, staleKnown bool) *rangeComparison {
	rc := &rangeComparison{}
	ag := &rc.Agreement
	mismatch := func(format string, args ...any) {
		ag.MismatchCount++
		if len(ag.Mismatches) < maxMismatches {
			ag.Mismatches = append(ag.Mismatches, fmt.Sprintf(format, args...))
		}
	}
	notInReplay := func(s *snapshot.Segment) {
		mismatch("segment %#x (%d bytes, %s pool) is in the snapshot, not in the replay", s.Address, s.TotalSize, s.Pool)
	}
	k := 0 // the next snapshot segment
	a.EachSegmentOfRegions(from, to, nil, func(m *snapshot.Segment) {
		ag.Segments.Replayed++
		ag.Blocks.Replayed += len(m.Blocks)
		for ; k < len(snap) && snap[k].Address < m.Address; k++ {
			notInReplay(snap[k])
		}
		if k == len(snap) || snap[k].Address != m.Address {
			rc.nExtra++
			if len(rc.extra) < maxMismatches {
				rc.extra = append(rc.extra, fmt.Sprintf("segment %#x (%d bytes, %s pool) is in the replay, not in the snapshot", m.Address, m.TotalSize, m.Pool))
			}
			return
		}
		for ; k < len(snap) && snap[k].Address == m.Address; k++ {
			compareSegment(snap[k], m, exact, seeded, staleKnown, ag, mismatch)
		}
	})
	for ; k < len(snap); k++ {
		notInReplay(snap[k])
	}
	return rc
}

// compareSegment compares the snapshot's segment s with the replayed
// segment m at the same address. m's blocks are in address order, one per
// address; s's are in file order.
func compareSegment(s, m *snapshot.Segment, exact map[uint64]bool, seeded spans, staleKnown bool, ag *Agreement, mismatch func(string, ...any)) {
	if m.TotalSize != s.TotalSize {
		mismatch("segment %#x: %d bytes in the snapshot, %d in the replay", s.Address, s.TotalSize, m.TotalSize)
		return
	}
	ag.Segments.Matching++
	replayed := func(addr uint64) *snapshot.Block {
		i, ok := slices.BinarySearchFunc(m.Blocks, addr, func(b snapshot.Block, a uint64) int { return cmp.Compare(b.Address, a) })
		if !ok {
			return nil
		}
		return &m.Blocks[i]
	}
	knowable := staleKnown && exact[s.Address] || staleKnown && len(seeded.missing(s.Address, s.End())) == 1 && seeded.missing(s.Address, s.End())[0] == span{s.Address, s.End()}
	for _, b := range s.Blocks {
		sb := replayed(b.Address)
		switch {
		case sb == nil:
			mismatch("block %#x (%d bytes, %s) is in the snapshot, not in the replay", b.Address, b.Size, b.State)
			continue
		case sb.Size != b.Size || sb.State != b.State:
			mismatch("block %#x: %d bytes %s in the snapshot, %d bytes %s in the replay", b.Address, b.Size, b.State, sb.Size, sb.State)
			continue
		}
		ag.Blocks.Matching++
		if b.State.Active() || knowable {
			ag.RequestedSizes.Snapshot++
			ag.RequestedSizes.Replayed++
			if sb.RequestedSize == b.RequestedSize {
				ag.RequestedSizes.Matching++
			} else {
				mismatch("block %#x (%s): requested %d bytes in the snapshot, %d in the replay", b.Address, b.State, b.RequestedSize, sb.RequestedSize)
			}
		}
	}
	if len(m.Blocks) == len(s.Blocks) {
		return
	}
	// Replayed blocks the snapshot's segment lacks. Its blocks are in
	// address order in every file PyTorch writes: then a binary search,
	// else a scan (a segment listing a million blocks out of order would
	// otherwise cost a million scans).
	inSnap := func(addr uint64) bool {
		return slices.ContainsFunc(s.Blocks, func(b snapshot.Block) bool { return b.Address == addr })
	}
	if slices.IsSortedFunc(s.Blocks, func(x, y snapshot.Block) int { return cmp.Compare(x.Address, y.Address) }) {
		inSnap = func(addr uint64) bool {
			_, ok := slices.BinarySearchFunc(s.Blocks, addr, func(b snapshot.Block, a uint64) int { return cmp.Compare(b.Address, a) })
			return ok
		}
	}
	for _, sb := range m.Blocks {
		if !inSnap(sb.Address) {
			mismatch("block %#x (%d bytes, %s) is in the replay, not in the snapshot", sb.Address, sb.Size, sb.State)
		}
	}
}

// reconcile brings the replayed state to the snapshot's after the trace:
// it frees blocks the snapshot has free (a file whose trace stops before
// the snapshot was taken), returns segments the snapshot no longer has,
// and adds what the snapshot has and the replay does not. The statistics'
// current values then are the snapshot's.
// snapshotBlocks returns a lookup of the snapshot's blocks by address (the
// last one listed when an address repeats). A sorted array and binary
// search: a map of a million blocks cost more to build than the lookups.
func snapshotBlocks(segs []*snapshot.Segment) func(addr uint64) (snapshot.Block, bool) {
	return blockLookup(sortedBlocks(segs))
}

// sortedBlocks is the snapshot's blocks in address order (stable), for
// blockLookup: one array, which lookups on several goroutines may share.
func sortedBlocks(segs []*snapshot.Segment) []*snapshot.Block {
	n := 0
	for _, s := range segs {
		n += len(s.Blocks)
	}
	all := make([]*snapshot.Block, 0, n)
	for _, s := range segs {
		for i := range s.Blocks {
			all = append(all, &s.Blocks[i])
		}
	}
	byAddr := func(a, b *snapshot.Block) int { return cmp.Compare(a.Address, b.Address) }
	if !slices.IsSortedFunc(all, byAddr) {
		slices.SortStableFunc(all, byAddr)
	}
	return all
}

// blockLookup is snapshotBlocks' lookup over all (sortedBlocks); each
// lookup keeps its own place, so it is for one goroutine.
func blockLookup(all []*snapshot.Block) func(addr uint64) (snapshot.Block, bool) {
	// reconcile asks in rising address order (the replay's blocks, walked
	// in order): a search then starts where the last one ended and steps
	// on, instead of searching every block (129,110 binary searches, cache
	// misses each, 8 ms of Result on torch-100MB). next is the first
	// block past prev, the address asked last.
	next, prev := 0, uint64(0)
	return func(addr uint64) (snapshot.Block, bool) {
		// The last block at addr: the first past it, minus one.
		lo := 0
		if addr >= prev {
			lo = next // every block before next lies at or below addr
		}
		i := lo
		for i < len(all) && i < lo+lookupSteps && all[i].Address <= addr {
			i++
		}
		if i == lo+lookupSteps {
			from := i
			i += sort.Search(len(all)-from, func(j int) bool { return all[from+j].Address > addr })
		}
		next, prev = i, addr
		if i == 0 || all[i-1].Address != addr {
			return snapshot.Block{}, false
		}
		return *all[i-1], true
	}
}

// lookupSteps is how many blocks snapshotBlocks' lookup steps over before
// it searches the rest.
const lookupSteps = 8

// modelledFinal is the snapshot's final segments less those kept outside
// the simulation as they are (Allocator.AddUnmodelled), which agree with
// the snapshot by construction.
func (r *Replay) modelledFinal() []*snapshot.Segment {
	kept := r.a.Unmodelled()
	if len(kept) == 0 {
		return r.final
	}
	same := make(map[[2]uint64]bool, len(kept))
	for _, s := range kept {
		same[[2]uint64{s.Address, uint64(s.TotalSize)}] = true
	}
	out := make([]*snapshot.Segment, 0, len(r.final))
	for _, s := range r.final {
		if !same[[2]uint64{s.Address, uint64(s.TotalSize)}] {
			out = append(out, s)
		}
	}
	return out
}

func (r *Replay) reconcile() {
	ag := r.res.Agreement
	if ag.Exact() {
		return
	}
	a := r.a
	final := r.modelledFinal()
	snapSegs := make(map[uint64]*snapshot.Segment, len(final))
	for _, s := range final {
		snapSegs[s.Address] = s
	}
	sorted := sortedBlocks(final)
	snapBlock := blockLookup(sorted)
	var freed, completed, released, added, placed int
	// Live blocks the snapshot does not have live (with that size). Only
	// those are kept, then changed: a list of every live block cost as
	// much as the state itself on a large replay. The replay's blocks are
	// read in two halves of its regions at once (reconcileHalves).
	live := reconcileHalves(a, final, func(seg *snapshot.Segment, out []snapshot.Block, snapBlock func(uint64) (snapshot.Block, bool)) []snapshot.Block {
		for _, b := range seg.Blocks {
			if !b.State.Active() {
				continue
			}
			if sb, ok := snapBlock(b.Address); ok && sb.Size == b.Size && sb.State == b.State {
				continue
			}
			out = append(out, b)
		}
		return out
	}, sorted)
	for _, b := range live {
		sb, ok := snapBlock(b.Address)
		if ok && sb.Size == b.Size && sb.State == snapshot.ActivePendingFree && b.State == snapshot.ActiveAllocated {
			if a.FreeDeferred(b.Address, snapshot.NoStack) == nil {
				freed++
			}
			continue
		}
		if b.State == snapshot.ActivePendingFree {
			if a.CompletePendingFree(b.Address, snapshot.NoStack) == nil {
				completed++
			}
		} else if a.Free(b.Address, snapshot.NoStack) == nil {
			freed++
		}
	}
	// Whole free segments the snapshot does not have, from the highest
	// address down: each release removes its region from a sorted slice,
	// and going down leaves only the kept regions above it to move
	// (going up moved every later region, released ones included: a
	// second on a trace that released 100,000 segments).
	// (A free segment is listed as one inactive block: its address and
	// size.)
	unused := reconcileHalves(a, final, func(s *snapshot.Segment, out []snapshot.Block, _ func(uint64) (snapshot.Block, bool)) []snapshot.Block {
		if snapSegs[s.Address] == nil && len(s.Blocks) == 1 && s.Blocks[0].State == snapshot.Inactive {
			out = append(out, snapshot.Block{Address: s.Address, Size: s.TotalSize})
		}
		return out
	}, nil)
	for k := len(unused) - 1; k >= 0; k-- {
		if a.ForceRelease(unused[k].Address, unused[k].Size, snapshot.NoStack) == nil {
			released++
		}
	}
	// Segments and live blocks the replay does not have. What the
	// simulator holds at each of them is looked up first, on two cores
	// (finalLookups); the loop takes those answers until it changes
	// something, then asks the simulator itself.
	var kept int
	look := lookupFinal(a, final)
	changed := false
	// at numbers the blocks as finalLookups does: from the first of the
	// segment's half.
	at := 0
	for k, s := range final {
		if look != nil && k == look.mid {
			at = 0
		}
		first := at
		at += len(s.Blocks)
		var f uint8
		if look != nil && !changed {
			f = look.seg[k]
		} else {
			f = lookSegment(a, s)
		}
		if f&segFound == 0 {
			changed = true
			if a.SeedSegment(*s) == nil {
				added++
			} else {
				// Its memory still counts (AddUnmodelled).
				a.AddUnmodelled(*s)
				kept++
			}
			continue
		} else if f&segWalk == 0 {
			continue
		}
		if look == nil || changed {
			// Its blocks are looked up one by one below.
			r.touched += touchSegment(a, s)
		}
		for j, sb := range s.Blocks {
			if !sb.State.Active() {
				continue
			}
			if look != nil && !changed {
				if look.active(k, first+j) {
					continue
				}
			} else if cur, ok := a.BlockAt(sb.Address); ok && cur.State.Active() {
				continue
			}
			changed = true
			if a.ForceMalloc(sb.Address, sb.RequestedSize, sb.Size, s.Stream, sb.Stack) != nil {
				continue
			}
			placed++
			if sb.State == snapshot.ActivePendingFree {
				a.FreeDeferred(sb.Address, snapshot.NoStack)
			}
		}
	}
	a.ClearTrace()
	ag.Reconciled = freed + completed + released + added + placed + kept
	var notes []string
	if freed > 0 {
		notes = append(notes, fmt.Sprintf("freed %d blocks that are live at the end of the trace but free in the snapshot (the trace stops before the snapshot was taken: a cut-down or edited file)", freed))
	}
	if completed > 0 {
		notes = append(notes, fmt.Sprintf("completed %d pending frees", completed))
	}
	if released > 0 {
		notes = append(notes, fmt.Sprintf("returned %d free segments the snapshot no longer has", released))
	}
	if added > 0 {
		notes = append(notes, fmt.Sprintf("added %d segments only the snapshot has", added))
	}
	if placed > 0 {
		notes = append(notes, fmt.Sprintf("placed %d blocks only the snapshot has live", placed))
	}
	if kept > 0 {
		notes = append(notes, fmt.Sprintf("kept %d segments only the snapshot has, which the simulation could not place, as the snapshot has them (they count in the current figures)", kept))
	}
	ag.ReconcileNote = strings.Join(notes, "; ")
	after := &Agreement{}
	compareStates(a, r.modelledFinal(), r.start.exact, r.seeded, r.staleKnown(), after)
	ag.Remaining = after.MismatchCount
}

// finalLookups is what the simulator holds, before reconcile's last loop,
// at the final segments (seg: segFound, segWalk) and at their active
// blocks (whether each lies in an active block: a bit a block, numbered
// in final's order from the first block of its half, bits[0] for the
// segments before mid and bits[1] from mid on). A byte a segment and a
// bit a block: a snapshot of 1.3 M blocks is replayed within half its
// file's size, and 1.3 M BlockInfos or bools would cost RSS there.
type finalLookups struct {
	seg  []uint8
	mid  int
	bits [2][]uint64
	// touched sums what each half's reads ahead found (touchSegment),
	// so that they are made.
	touched [2]uint64
}

const (
	// segFound: a block lies at the segment's base.
	segFound uint8 = 1 << iota
	// segWalk: that block's segment or reservation starts there, or is
	// expandable: reconcile looks at the segment's blocks.
	segWalk
)

// lookSegment is what reconcile reads of BlockAt's answer at a final
// segment's base.
func lookSegment(a *allocator.Allocator, s *snapshot.Segment) uint8 {
	b, ok := a.BlockAt(s.Address)
	if !ok {
		return 0
	}
	if b.RegionAddress == s.Address || b.Expandable {
		return segFound | segWalk
	}
	return segFound
}

// active reports whether block i of its half (see finalLookups) of
// segment k's half lies in an active block.
func (l *finalLookups) active(k, i int) bool {
	h := 0
	if k >= l.mid {
		h = 1
	}
	return l.bits[h][i>>6]&(1<<(i&63)) != 0
}

// splitReconcileBlocks is the number of final blocks from which reconcile
// looks them up in two halves at once, on two cores (a variable for the
// test that compares both ways): on torch-100MB its 129,110 lookups, cache
// misses each, were some 10 ms of Result's serial path.
var splitReconcileBlocks = 1 << 13

// lookupFinal answers BlockAt for final's bases and blocks, the segments
// holding the first half of the blocks on this goroutine and the rest on
// another (reading the simulator only); nil when there are fewer than
// splitReconcileBlocks blocks.
// touchSegment reads, in one loop, the handed-out table's slot and block
// of each of a final segment's active blocks (allocator.Touch), which the
// lookups of its blocks then find in the cache: one BlockAt after another
// missed the table and then the block, one miss at a time, on the large
// tables of a long trace (torch-1GB: 0.33 s/op of CPU over both halves);
// read in a loop with nothing depending on them, a segment's misses are
// under way at once. A segment of one block has nothing to overlap. It
// changes nothing; off (touchAheadOn) in the test that holds the result
// to one without it.
func touchSegment(a *allocator.Allocator, s *snapshot.Segment) uint64 {
	if !touchAheadOn || len(s.Blocks) < 2 {
		return 0
	}
	var sum uint64
	for _, sb := range s.Blocks {
		if sb.State.Active() {
			sum += a.Touch(sb.Address, false)
		}
	}
	return sum
}

func lookupFinal(a *allocator.Allocator, final []*snapshot.Segment) *finalLookups {
	total := 0
	for _, s := range final {
		total += len(s.Blocks)
	}
	if total < splitReconcileBlocks {
		return nil
	}
	l := &finalLookups{seg: make([]uint8, len(final)), mid: len(final)}
	before := 0
	for k, s := range final {
		if before >= total/2 {
			l.mid = k
			break
		}
		before += len(s.Blocks)
	}
	l.bits = [2][]uint64{make([]uint64, (before+63)/64), make([]uint64, (total-before+63)/64)}
	lookup := func(from, to int, bits []uint64, touched *uint64) {
		i := 0
		for k := from; k < to; k++ {
			s := final[k]
			f := lookSegment(a, s)
			l.seg[k] = f
			if f != segFound|segWalk {
				// reconcile does not look at its blocks.
				i += len(s.Blocks)
				continue
			}
			*touched += touchSegment(a, s)
			for _, sb := range s.Blocks {
				if sb.State.Active() {
					if cur, ok := a.BlockAt(sb.Address); ok && cur.State.Active() {
						bits[i>>6] |= 1 << (i & 63)
					}
				}
				i++
			}
		}
	}
	done := make(chan struct{})
	go func() { lookup(l.mid, len(final), l.bits[1], &l.touched[1]); close(done) }()
	lookup(0, l.mid, l.bits[0], &l.touched[0])
	<-done
	return l
}
