package allocator

import (
	"strings"
	"testing"

	"github.com/memstat/memstat/pkg/snapshot"
)

// TestSegmentAddressHook: the driver's hook places every new segment and
// reservation; it is asked only when one is really created.
func TestSegmentAddressHook(t *testing.T) {
	var reqs []SegmentRequest
	addrs := []uint64{0x7a0000000000, 0x790000000000, 0x780000000000}
	hook := func(r SegmentRequest) (uint64, bool) {
		reqs = append(reqs, r)
		if len(reqs) > len(addrs) {
			return 0, false // default placement
		}
		return addrs[len(reqs)-1], true
	}
	s := newSim(t, "", Latest, Options{Capacity: 100 * mib, SegmentAddress: hook})
	a := s.alloc(1000, s1)
	b := s.alloc(30*mib, s0)
	if a != addrs[0] || b != addrs[1] {
		t.Errorf("a=%#x b=%#x", a, b)
	}
	// A cudaMalloc that fails for capacity asks nothing.
	s.oom(90*mib, s0)
	if len(reqs) != 2 {
		t.Errorf("%d requests after a failed cudaMalloc", len(reqs))
	}
	if reqs[0] != (SegmentRequest{Size: SmallBuffer, Stream: s1, Pool: snapshot.SmallPool}) ||
		reqs[1] != (SegmentRequest{Size: 30 * mib, Stream: s0, Pool: snapshot.LargePool}) {
		t.Errorf("requests %+v", reqs)
	}
	// Lower addresses win best-fit ties, so dictated placement matters:
	// two equal free blocks, the one at the lower address is taken.
	s.alloc(mib, s0) // third segment at 0x78..., below the others
	if got := s.Regions()[0].Address; got != addrs[2] {
		t.Errorf("regions not sorted by address: first %#x", got)
	}

	bad := newSim(t, "", Latest, Options{SegmentAddress: func(SegmentRequest) (uint64, bool) { return 0x1000 + 3, true }})
	if _, err := bad.Malloc(1000, s0, 0); err == nil || !strings.Contains(err.Error(), "aligned") {
		t.Errorf("misaligned dictated address: %v", err)
	}
	dup := newSim(t, "", Latest, Options{SegmentAddress: func(SegmentRequest) (uint64, bool) { return 0x7f0000000000, true }})
	dup.alloc(1000, s0)
	if _, err := dup.Malloc(2*mib, s0, 0); err == nil || !strings.Contains(err.Error(), "overlaps") {
		t.Errorf("overlapping dictated address: %v", err)
	}
	// Expandable reservations are dictated too.
	var er SegmentRequest
	ex := newSim(t, "expandable_segments:True", Latest, Options{TotalMemory: 8 * GiB,
		SegmentAddress: func(r SegmentRequest) (uint64, bool) { er = r; return 0x600000000000, true }})
	if got := ex.alloc(mib, s0); got != 0x600000000000 {
		t.Errorf("expandable block at %#x", got)
	}
	// A 1 MiB request belongs to the small pool: 2 MiB pages, and 1 1/8 of
	// 8 GiB is a whole number of them.
	if !er.Expandable || er.Size != 9*GiB || er.Pool != snapshot.SmallPool {
		t.Errorf("reservation request %+v", er)
	}
}

func TestFreeDeferred(t *testing.T) {
	s := newSim(t, "", Latest, Options{})
	a := s.alloc(1000, s0)
	if err := s.FreeDeferred(a, 0); err != nil {
		t.Fatal(err)
	}
	s.check()
	if bi, _ := s.BlockAt(a); bi.State != snapshot.ActivePendingFree {
		t.Errorf("state %s", bi.State)
	}
	// Completing every stream's events does not free it: it waits on a
	// stream the simulator does not know.
	s.CompleteAllStreamEvents()
	if b := s.alloc(1000, s0); b == a {
		t.Error("deferred block reused before completion")
	}
	if err := s.CompletePendingFree(a, 0); err != nil {
		t.Fatal(err)
	}
	s.check()
	if got := traceString(s.Trace(), base); got != "segment_alloc(+0,2097152) alloc(+0,1000) free_requested(+0,1000) alloc(+1024,1000) free_completed(+0,1000)" {
		t.Errorf("trace %s", got)
	}
	if err := s.CompletePendingFree(a, 0); err == nil {
		t.Error("completing twice accepted")
	}
	// empty_cache synchronizes all streams, deferred frees included.
	c := s.alloc(1000, s0)
	s.FreeDeferred(c, 0)
	s.emptyCache()
	if bi, _ := s.BlockAt(c); bi.State != snapshot.Inactive {
		t.Errorf("after empty_cache: %s", bi.State)
	}
}

func TestForceOperations(t *testing.T) {
	s := newSim(t, "", Latest, Options{})
	seg := uint64(0x700000000000)
	if err := s.ForceSegment(seg, 20*mib, s0, snapshot.LargePool, 0); err != nil {
		t.Fatal(err)
	}
	s.check()
	// Forced placement inside the free segment, not at its start.
	if err := s.ForceMalloc(seg+4*mib, 3*mib, 0, s0, 0); err != nil {
		t.Fatal(err)
	}
	s.check()
	if got := layout(s.Segments(), seg); got != "[+0:4194304 inactive 0][+4194304:3145728 active_allocated 3145728][+7340032:13631488 inactive 0]" {
		t.Errorf("layout %s", got)
	}
	// Exact block size: no split of the 1 MiB rest that should_split
	// would keep anyway, and a forced size may exceed the rounded request.
	if err := s.ForceMalloc(seg, 1000, 4*mib, s0, 0); err != nil {
		t.Fatal(err)
	}
	s.check()
	if bi, _ := s.BlockAt(seg); bi.Size != 4*mib || bi.RequestedSize != 1000 {
		t.Errorf("exact forced block %+v", bi)
	}
	for _, bad := range []struct {
		addr          uint64
		size, block   int64
		stream        int64
		wantSubstring string
	}{
		{seg, 1000, 0, s0, "not in a free block"},
		{seg + 8*mib, 2 * mib, 0, s1, "stream"},
		{seg + 19*mib, 2 * mib, 0, s0, "do not fit"},
		{seg + 8*mib, 1000, 0, s0, "pool"},
		{0x100, 1000, 0, s0, "no segment"},
	} {
		if err := s.ForceMalloc(bad.addr, bad.size, bad.block, bad.stream, 0); err == nil || !strings.Contains(err.Error(), bad.wantSubstring) {
			t.Errorf("ForceMalloc(%#x, %d): %v, want %q", bad.addr, bad.size, err, bad.wantSubstring)
		}
	}
	if got := traceString(s.Trace(), seg); got != "segment_alloc(+0,20971520) alloc(+4194304,3145728) alloc(+0,1000)" {
		t.Errorf("trace %s", got)
	}
	if s.ForcedOperations() != 3 {
		t.Errorf("forced %d", s.ForcedOperations())
	}
	// Releasing: only a whole free segment.
	if err := s.ForceRelease(seg, 0, 0); err == nil {
		t.Error("released a segment in use")
	}
	s.free(seg)
	s.free(seg + 4*mib)
	if err := s.ForceRelease(seg, 20*mib, 0); err != nil {
		t.Fatal(err)
	}
	s.check()
	if len(s.Regions()) != 0 || s.Stats().NumDeviceFree != 1 {
		t.Errorf("after release: %+v", s.Regions())
	}
}

func TestForceExpandable(t *testing.T) {
	s := newSim(t, "expandable_segments:True", Latest, Options{TotalMemory: 8 * GiB})
	V := uint64(0x600000000000)
	if err := s.SeedReservation(V, s0, snapshot.LargePool, snapshot.PoolID{}); err != nil {
		t.Fatal(err)
	}
	// Map pages 2 and 3, leaving pages 0-1 unmapped.
	if err := s.ForceMap(V+40*mib, 40*mib, s0, snapshot.LargePool, 0); err != nil {
		t.Fatal(err)
	}
	s.check()
	segs := s.Segments()
	if len(segs) != 1 || segs[0].Address != V+40*mib || segs[0].TotalSize != 40*mib || !segs[0].Expandable {
		t.Fatalf("segments %+v", segs)
	}
	if err := s.ForceMap(V+50*mib, 20*mib, s0, snapshot.LargePool, 0); err == nil {
		t.Error("map at a non-page offset accepted")
	}
	if err := s.ForceMalloc(V+50*mib, 10*mib, 0, s0, 0); err != nil {
		t.Fatal(err)
	}
	s.check()
	// Unmap the free page after the block: page 3 is [60, 80) MiB.
	if err := s.ForceRelease(V+60*mib, 20*mib, 0); err != nil {
		t.Fatal(err)
	}
	s.check()
	if got := traceString(s.Trace(), V); got != "segment_map(+41943040,41943040) alloc(+52428800,10485760) segment_unmap(+62914560,20971520)" {
		t.Errorf("trace %s", got)
	}
	if st := s.Stats(); st.ReservedBytes[PoolAll].Current != 20*mib || st.NumDeviceAlloc != 1 || st.NumDeviceFree != 1 {
		t.Errorf("stats %+v", st)
	}
	// The simulator's own allocation of the next request fills the
	// unmapped gap at the reservation start (lowest address first).
	a := s.alloc(30*mib, s0)
	if a != V {
		t.Errorf("30 MiB at +%d MiB, want +0", (a-V)/mib)
	}
}

// TestSeedSegmentStates seeds a segment with every block state and checks
// the snapshot, the statistics and that nothing was traced.
func TestSeedSegmentStates(t *testing.T) {
	s := newSim(t, "", Latest, Options{})
	seg := snapshot.Segment{Address: 0x7e0000000000, TotalSize: 20 * mib, Stream: s1, Pool: snapshot.LargePool, Stack: 3,
		Blocks: []snapshot.Block{
			{Address: 0x7e0000000000, Size: 2 * mib, RequestedSize: 2*mib - 100, State: snapshot.ActiveAllocated, Stack: 4},
			{Address: 0x7e0000000000 + 2*mib, Size: 3 * mib, RequestedSize: 7 * mib, State: snapshot.Inactive},
			{Address: 0x7e0000000000 + 5*mib, Size: 5 * mib, RequestedSize: 5 * mib, State: snapshot.ActivePendingFree},
			{Address: 0x7e0000000000 + 10*mib, Size: 10 * mib, RequestedSize: 0, State: snapshot.Inactive},
		}}
	if err := s.SeedSegment(seg); err != nil {
		t.Fatal(err)
	}
	s.check()
	got := s.Segments()
	if len(got) != 1 || got[0].Stack != 3 || got[0].Stream != s1 {
		t.Fatalf("segments %+v", got)
	}
	if l, w := layout(got, seg.Address), layout([]snapshot.Segment{seg}, seg.Address); l != w {
		t.Errorf("layout %s\nwant %s", l, w)
	}
	if got[0].Blocks[0].Stack != 4 {
		t.Errorf("block stack %d", got[0].Blocks[0].Stack)
	}
	st := s.Stats()
	if st.Allocation[PoolAll].Current != 1 || st.Active[PoolAll].Current != 2 || st.ActiveBytes[PoolAll].Current != 7*mib ||
		st.Segment[PoolAll].Current != 1 || st.InactiveSplit[PoolAll].Current != 2 || st.InactiveSplitBytes[PoolAll].Current != 13*mib {
		t.Errorf("stats %+v", st)
	}
	if len(s.Trace()) != 0 {
		t.Errorf("seeding traced %d entries", len(s.Trace()))
	}
	// The seeded allocation is an ordinary one.
	s.free(seg.Address)
	if err := s.CompletePendingFree(seg.Address+5*mib, 0); err != nil {
		t.Fatal(err)
	}
	s.check()
	// The block freed last absorbs its neighbours and keeps its object, so
	// the merged segment shows the pending block's requested size.
	if got := layout(s.Segments(), seg.Address); got != "[+0:20971520 inactive 5242880]" {
		t.Errorf("after freeing everything: %s", got)
	}
	for _, bad := range []snapshot.Segment{
		{Address: 0x7e0000000000, TotalSize: 2 * mib}, // overlaps
		{Address: 0x7d0000000000, TotalSize: 0},
		{Address: 0x7d0000000000, TotalSize: 4 * mib, Blocks: []snapshot.Block{{Address: 0x7d0000000000, Size: mib}}},
	} {
		if err := s.SeedSegment(bad); err == nil {
			t.Errorf("bad seed accepted: %+v", bad)
		}
	}
}

// ResizeAllocated cuts an allocated block back (the tail becomes free,
// joining a free neighbour) or grows it into the free block after it, and
// changes only current figures; the invariants hold after each step.
func TestResizeAllocated(t *testing.T) {
	s := newSim(t, "", Latest, Options{})
	seg := uint64(0x700000000000)
	if err := s.ForceSegment(seg, 20*mib, s0, snapshot.LargePool, 0); err != nil {
		t.Fatal(err)
	}
	// Unsplit: the whole segment, as with expandable_segments off and a
	// remainder of at most 1 MiB.
	if err := s.ForceMalloc(seg, 19*mib+1000, 20*mib, s0, 0); err != nil {
		t.Fatal(err)
	}
	before := s.Stats()
	// The recording shows it was split after all.
	if err := s.ResizeAllocated(seg, 19*mib+1024); err != nil {
		t.Fatal(err)
	}
	s.check()
	if got := layout(s.Segments(), seg); got != "[+0:19923968 active_allocated 19923944][+19923968:1047552 inactive 0]" {
		t.Errorf("cut back: layout %s", got)
	}
	st := s.Stats()
	if st.AllocatedBytes[PoolAll].Current != 19*mib+1024 || st.InactiveSplit[PoolLarge].Current != 1 ||
		st.AllocatedBytes[PoolAll].Allocated != before.AllocatedBytes[PoolAll].Allocated {
		t.Errorf("cut back: allocated %+v inactive_split %+v", st.AllocatedBytes[PoolAll], st.InactiveSplit[PoolLarge])
	}
	// Grown back into the free tail: one block again.
	if err := s.ResizeAllocated(seg, 20*mib); err != nil {
		t.Fatal(err)
	}
	s.check()
	if got := layout(s.Segments(), seg); got != "[+0:20971520 active_allocated 19923944]" {
		t.Errorf("grown: layout %s", got)
	}
	if st := s.Stats(); st.InactiveSplit[PoolLarge].Current != 0 || st.InactiveSplitBytes[PoolLarge].Current != 0 {
		t.Errorf("grown: inactive_split %+v bytes %+v", st.InactiveSplit[PoolLarge], st.InactiveSplitBytes[PoolLarge])
	}
	for _, bad := range []struct {
		addr uint64
		size int64
	}{{seg + 512, mib}, {seg, 21 * mib}, {seg, 1000}} {
		if err := s.ResizeAllocated(bad.addr, bad.size); err == nil {
			t.Errorf("ResizeAllocated(%#x, %d): no error", bad.addr, bad.size)
		}
	}
}

// TestOverlapsOther: a guessed reservation moved to where the recording
// maps must not land on another region, even when its own old range is
// the lowest one in the way (graphs+MemPool+expandable, 2.6, seed 43 of
// the round-trip harness: two reservations overlapped and a forced map
// panicked on a duplicate unmapped block).
func TestOverlapsOther(t *testing.T) {
	self := &region{base: 0x1000000, size: 0x2000000}
	above := &region{base: 0x2800000, size: 0x2000000}
	var rs regions
	rs.add(self)
	rs.add(above)
	if !rs.overlapsOther(0x0c00000, 0x2000000, self) {
		t.Error("a move from 0x1000000 to 0xc00000 (+0x2000000) overlaps the region at 0x2800000")
	}
	if rs.overlapsOther(0x0800000, 0x2000000, self) {
		t.Error("a move to 0x800000 (+0x2000000) ends at the region above")
	}
	if !rs.overlapsOther(0x0800000, 0x2000000, nil) {
		t.Error("the region at 0x1000000 is in the way of a region that is not it")
	}
}
