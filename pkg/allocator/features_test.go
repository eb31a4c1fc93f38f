package allocator

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/memstat/memstat/pkg/snapshot"
)

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]Version{
		"2.3": V2_3, "2.3.1": V2_3, "v2.4": V2_4, "2.9.0+cu128": V2_9, "2.10.0a0": V2_10, "2.11": Version(211),
	} {
		if got, err := ParseVersion(in); err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "2", "1.13", "3.0", "x.y", "2.x"} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q) accepted", bad)
		}
	}
	if Latest.String() != "2.10" {
		t.Errorf("Latest = %s", Latest)
	}
}

func TestRequestGuards(t *testing.T) {
	s := newSim(t, "", Latest, Options{})
	if addr, err := s.Malloc(0, s0, 0); addr != 0 || err != nil {
		t.Errorf("Malloc(0) = %#x, %v; want 0, nil", addr, err)
	}
	_, err := s.Malloc(OneEiB, s0, 0)
	var oom *OOMError
	if !errors.As(err, &oom) || !oom.OverOneEiB || oom.Error() != "CUDA out of memory. Tried to allocate more than 1EB memory." {
		t.Errorf("1 EiB request: %v", err)
	}
	if _, err := s.Malloc(-1, s0, 0); err == nil {
		t.Error("negative size accepted")
	}
	// Neither guard touches the allocator.
	st := s.Stats()
	if st.NumOOMs != 0 || st.Allocation[PoolAll].Allocated != 0 || len(s.Trace()) != 0 {
		t.Errorf("guards changed state: %+v, trace %d", st, len(s.Trace()))
	}
	if err := s.Free(base, 0); err == nil || !strings.Contains(err.Error(), "invalid device pointer") {
		t.Errorf("free of an unknown address: %v", err)
	}
	if err := s.RecordStream(base, s1); err == nil {
		t.Error("record_stream of an unknown address accepted")
	}
	if err := s.SetMemoryFraction(1.5); err == nil || err.Error() != "Invalid fraction value: 1.5. Allowed range: 0~1" {
		t.Errorf("fraction 1.5: %v", err)
	}
}

// TestContextLevels checks which stacks the trace and the snapshot keep at
// each _record_memory_history context level.
func TestContextLevels(t *testing.T) {
	const allocStack, freeStack snapshot.StackID = 7, 9
	for _, tc := range []struct {
		level                 ContextLevel
		block, alloc, freeReq snapshot.StackID
		segmentFrames         snapshot.StackID
	}{
		{ContextNever, 0, 0, 0, 0},
		{ContextState, allocStack, 0, 0, allocStack},
		{ContextAlloc, allocStack, allocStack, allocStack, allocStack}, // frees carry the allocation stack
		{ContextAll, allocStack, allocStack, freeStack, allocStack},
	} {
		s := newSim(t, "", Latest, Options{})
		if err := s.RecordHistory(HistoryOptions{Enabled: HistoryAll, Context: tc.level}); err != nil {
			t.Fatal(err)
		}
		a, _ := s.Malloc(10*mib, s0, allocStack)
		b, _ := s.Malloc(10*mib, s0, allocStack)
		segs := s.Segments()
		if got := segs[0].Blocks[0].Stack; got != tc.block {
			t.Errorf("level %d: block stack %d, want %d", tc.level, got, tc.block)
		}
		// Each 10 MiB request got its own unsplit segment, which keeps the
		// stack of its cudaMalloc.
		if got := segs[1].Stack; got != tc.segmentFrames {
			t.Errorf("level %d: segment stack %d, want %d", tc.level, got, tc.segmentFrames)
		}
		if err := s.Free(a, freeStack); err != nil {
			t.Fatal(err)
		}
		tr := s.Trace()
		if tc.level == ContextNever {
			continue
		}
		// segment_alloc, alloc, segment_alloc, alloc, free_requested, free_completed
		if tr[1].Stack != tc.alloc || tr[0].Stack != tc.alloc || tr[4].Stack != tc.freeReq || tr[5].Stack != tc.freeReq {
			t.Errorf("level %d: trace stacks %d %d %d %d", tc.level, tr[0].Stack, tr[1].Stack, tr[4].Stack, tr[5].Stack)
		}
		// A freed block forgets its allocation stack.
		if got := s.Segments()[0].Blocks[0].Stack; got != 0 {
			t.Errorf("level %d: freed block keeps stack %d", tc.level, got)
		}
		_ = b
	}
}

// TestSplitSegmentLosesFrames: splitting hands the front of a segment to a
// new block that has no segment stack, so split segments report no frames
// (as in every real snapshot examined), while unsplit ones keep them.
func TestSplitSegmentLosesFrames(t *testing.T) {
	s := newSim(t, "", Latest, Options{})
	a, _ := s.Malloc(1000, s0, 5)
	if got := s.Segments()[0].Stack; got != 0 {
		t.Errorf("split segment has stack %d", got)
	}
	s.free(a)
	if got := s.Segments()[0].Stack; got != 0 {
		t.Errorf("merged segment regained stack %d", got)
	}
	// The rest of a split segment is the original block object, which did
	// keep the stack. Taking it whole and freeing it last makes it absorb
	// the front block, whose (empty) segment stack moves with the segment
	// start: the frames stay lost.
	s2 := newSim(t, "", Latest, Options{})
	x, err1 := s2.Malloc(5*mib, s0, 5)
	y, err2 := s2.Malloc(15*mib, s0, 6)
	if bi, _ := s2.BlockAt(y); err1 != nil || err2 != nil || bi.Size != 15*mib || y != x+5*mib {
		t.Fatalf("y is not the whole rest of x's segment: %+v", bi)
	}
	s2.free(x)
	s2.free(y)
	if sg := s2.Segments()[0]; len(sg.Blocks) != 1 || sg.Stack != 0 {
		t.Errorf("re-merged segment: %d blocks, stack %d; want 1 block, no stack", len(sg.Blocks), sg.Stack)
	}
	// An unsplit segment keeps the stack of its cudaMalloc.
	s3 := newSim(t, "", Latest, Options{})
	s3.Malloc(12*mib, s0, 8)
	if got := s3.Segments()[0].Stack; got != 8 {
		t.Errorf("unsplit segment stack %d, want 8", got)
	}
}

func TestTraceFieldsPerVersion(t *testing.T) {
	for _, tc := range []struct {
		v                     Version
		time, compile, userMD bool
		settings, annotations bool
	}{
		{V2_0, false, false, false, false, false},
		{V2_2, true, false, false, false, false},
		{V2_3, true, false, false, true, false},
		{V2_8, true, true, false, true, true},
		{V2_10, true, true, true, true, true},
	} {
		clock := int64(1700000000000000)
		s := newSim(t, "max_split_size_mb:300", tc.v, Options{Clock: func() int64 { clock += 10; return clock }, Device: 1})
		s.alloc(1000, s0)
		snap := s.Snapshot()
		if len(snap.Traces) != 2 || snap.Traces[0].Len() != 0 {
			t.Fatalf("%s: traces %d, want device 1's trace at index 1", tc.v, len(snap.Traces))
		}
		e := snap.Traces[1].At(1)
		if (e.TimeUS == 1700000000000020) != tc.time || (e.TimeUS == 0) == tc.time {
			t.Errorf("%s: time_us %d", tc.v, e.TimeUS)
		}
		if got := snap.String(snap.Context(&e).CompileContext); (got == "N/A") != tc.compile {
			t.Errorf("%s: compile_context %q", tc.v, got)
		}
		f := snap.Features
		if f.TimeUS != tc.time || f.CompileContext != tc.compile || f.UserMetadata != tc.userMD ||
			f.AllocatorSetting != tc.settings || f.Annotations != tc.annotations || f.BlockAddresses != (tc.v >= V2_1) {
			t.Errorf("%s: features %+v", tc.v, f)
		}
		if (snap.Settings != nil) != tc.settings {
			t.Errorf("%s: settings %v", tc.v, snap.Settings)
		} else if snap.Settings != nil && (snap.Settings.MaxSplitSize != 300*MiB || snap.Settings.AllocConf != "max_split_size_mb:300") {
			t.Errorf("%s: settings %+v", tc.v, snap.Settings)
		}
		if snap.Segments[0].Device != 1 {
			t.Errorf("%s: segment device %d", tc.v, snap.Segments[0].Device)
		}
	}
}

func TestSkipActionsAndClearHistory(t *testing.T) {
	s := newSim(t, "", Latest, Options{})
	err := s.RecordHistory(HistoryOptions{Enabled: HistoryAll, Context: ContextAll,
		SkipActions: []snapshot.Action{snapshot.ActionFreeRequested, snapshot.ActionSegmentMap}})
	if err != nil {
		t.Fatal(err)
	}
	a := s.alloc(1000, s0)
	s.free(a)
	if got := traceString(s.Trace(), base); got != "segment_alloc(+0,2097152) alloc(+0,1000) free_completed(+0,1000)" {
		t.Errorf("trace with skip_actions: %s", got)
	}
	if err := s.RecordHistory(HistoryOptions{Enabled: HistoryAll, Context: ContextAll, ClearHistory: true}); err != nil {
		t.Fatal(err)
	}
	if len(s.Trace()) != 0 {
		t.Error("clear_history kept entries")
	}
	old := newSim(t, "", V2_5, Options{})
	if err := old.RecordHistory(HistoryOptions{Enabled: HistoryAll, ClearHistory: true}); err == nil {
		t.Error("clear_history accepted by 2.5")
	}
	// 2.0 cleared the trace on every call, later versions only when
	// recording stops.
	for _, v := range []Version{V2_0, V2_1} {
		s := newSim(t, "", v, Options{})
		s.alloc(1000, s0)
		s.RecordHistory(HistoryOptions{Enabled: HistoryAll, Context: ContextAll, MaxEntries: 10})
		if kept := len(s.Trace()) > 0; kept != (v >= V2_1) {
			t.Errorf("%s: entries kept after re-enabling = %v", v, kept)
		}
	}
}

// TestExpandableBestFitWalk: a fitting free tail next to unmapped space has
// a huge "expandable size", so best fit moves on to the next larger
// interior block (allocator model §7.3).
func TestExpandableBestFitWalk(t *testing.T) {
	s := newSim(t, "expandable_segments:True", Latest, Options{})
	x1 := s.alloc(8*mib, s0)
	V := x1
	s.alloc(4*mib+mib/2, s0)
	s.free(x1) // [free 8][x2 4.5][free 7.5 | unmapped]
	if got := s.alloc(7*mib, s0); got != V {
		t.Errorf("7 MiB placed at +%d, want the interior 8 MiB block at +0", got-V)
	}
	// With expandable segments switched off at runtime, no expandable
	// block may be used: a cudaMalloc'd segment is created instead.
	if err := s.SetAllocatorSettings("expandable_segments:False"); err != nil {
		t.Fatal(err)
	}
	addr := s.alloc(mib+mib/2, s0)
	if r, _ := s.BlockAt(addr); r.Expandable {
		t.Errorf("allocation went into an expandable segment after switching them off")
	}
	if st := s.Stats(); st.Segment[PoolAll].Current != 1 {
		t.Errorf("segment.current %d, want 1 cudaMalloc'd segment", st.Segment[PoolAll].Current)
	}
}

// TestExpandableSmallPoolPages: small-pool expandable segments map 2 MiB
// pages and reserve 1 1/8 of the device memory.
func TestExpandableSmallPoolPages(t *testing.T) {
	s := newSim(t, "expandable_segments:True", Latest, Options{TotalMemory: 16 * GiB})
	a := s.alloc(1000, s0)
	rs := s.Regions()
	if len(rs) != 1 || rs[0].Page != SmallBuffer || rs[0].MappedBytes != SmallBuffer || rs[0].Size != 18*GiB || rs[0].Pool != snapshot.SmallPool {
		t.Errorf("regions %+v", rs)
	}
	if got := traceString(s.Trace(), a); got != "segment_map(+0,2097152) alloc(+0,1000)" {
		t.Errorf("trace %s", got)
	}
}

// TestExpandablePartialMapStays: when the second map of one attempt fails,
// the first stays mapped (with its segment_map, reserved bytes and
// num_device_alloc) until the last-resort fallback unmaps it (§7.2).
func TestExpandablePartialMapStays(t *testing.T) {
	s := newSim(t, "expandable_segments:True", Latest, Options{Capacity: 70 * mib})
	x := s.alloc(20*mib, s0)
	V := x
	y := s.alloc(20*mib, s0)
	z := s.alloc(10*mib, s0)
	s.free(y)
	s.emptyCache() // unmaps page 1: [x][unmapped 20][z][free 10][unmapped...]
	s.free(z)      // [x][unmapped 20][free 20][unmapped...]
	before := len(s.Trace())
	devAlloc := s.Stats().NumDeviceAlloc
	s.oom(50*mib, s0)
	if got, want := traceString(s.Trace()[before:], V),
		"segment_map(+20971520,20971520) segment_unmap(+20971520,41943040) oom(free=52428800,52428800)"; got != want {
		t.Errorf("trace:\n got %s\nwant %s", got, want)
	}
	st := s.Stats()
	if st.NumDeviceAlloc != devAlloc+1 || st.NumAllocRetries != 1 || st.ReservedBytes[PoolAll].Peak != 60*mib {
		t.Errorf("stats %+v", st)
	}
}

// TestExpandableReleaseBefore25: before 2.5, release_available_cached_blocks
// could pick an expandable block and trip an internal assert; 2.5 skips it
// and ends in an ordinary OOM.
func TestExpandableReleaseBefore25(t *testing.T) {
	for _, v := range []Version{V2_4, V2_5} {
		s := newSim(t, "expandable_segments:True,max_split_size_mb:21", v, Options{Capacity: 70 * mib})
		a := s.alloc(60*mib, s0)
		s.free(a)
		_, err := s.Malloc(70*mib, s0, 0)
		var ia *InternalAssertError
		var oom *OOMError
		switch {
		case v < V2_5 && !errors.As(err, &ia):
			t.Errorf("%s: %v, want an internal assert", v, err)
		case v >= V2_5 && !errors.As(err, &oom):
			t.Errorf("%s: %v, want an OOM", v, err)
		}
		if err := s.CheckInvariants(); err != nil {
			t.Errorf("%s: %v", v, err)
		}
	}
}

// TestAddrTableAgainstMap checks the table against a Go map, grown from
// empty and reserved ahead (reserve: the size puts would grow it to).
func TestAddrTableAgainstMap(t *testing.T) {
	for _, reserved := range []int{0, 1000, 3000} {
		testAddrTable(t, reserved)
	}
	var tab addrTable
	tab.reserve(3000)
	size := len(tab.slots)
	var grown addrTable
	for k := range 3000 {
		tab.put(&block{addr: uint64(k+1) << 9})
		grown.put(&block{addr: uint64(k+1) << 9})
	}
	if len(tab.slots) != size || size != len(grown.slots) {
		t.Errorf("reserved for 3000: %d slots, %d after 3000 puts; grown by the puts: %d", size, len(tab.slots), len(grown.slots))
	}
}

func testAddrTable(t *testing.T, reserved int) {
	rng := rand.New(rand.NewPCG(5, 5))
	var tab addrTable
	tab.reserve(reserved)
	ref := map[uint64]*block{}
	for op := 0; op < 200000; op++ {
		k := uint64(rng.IntN(3000)+1) << 9
		switch rng.IntN(3) {
		case 0:
			// A new block replaces the one at its address.
			b := &block{addr: k}
			tab.put(b)
			ref[k] = b
		case 1:
			if got := tab.take(k); got != ref[k] {
				t.Fatalf("op %d: take(%#x) = %p, want %p", op, k, got, ref[k])
			}
			delete(ref, k)
		default:
			if got := tab.get(k); got != ref[k] {
				t.Fatalf("op %d: get(%#x) = %p, want %p", op, k, got, ref[k])
			}
		}
		if tab.len() != len(ref) {
			t.Fatalf("op %d: len %d, want %d", op, tab.len(), len(ref))
		}
	}
	n := 0
	tab.each(func(k uint64, b *block) {
		if ref[k] != b {
			t.Errorf("each: %#x", k)
		}
		n++
	})
	if n != len(ref) {
		t.Errorf("each visited %d of %d", n, len(ref))
	}
}

func TestInspection(t *testing.T) {
	s := newSim(t, "", Latest, Options{})
	a := s.alloc(3000, s1)
	bi, ok := s.BlockAt(a + 100)
	if !ok || bi.Address != a || bi.Size != 3072 || bi.RequestedSize != 3000 || bi.State != snapshot.ActiveAllocated ||
		bi.Stream != s1 || bi.Pool != snapshot.SmallPool || bi.RegionAddress != base || bi.Offset != 0 {
		t.Errorf("BlockAt: %+v", bi)
	}
	if bi, ok := s.BlockAt(a + 4000); !ok || bi.State != snapshot.Inactive || bi.Offset != 3072 {
		t.Errorf("BlockAt(free): %+v", bi)
	}
	if _, ok := s.BlockAt(base - 1); ok {
		t.Error("BlockAt outside every segment")
	}
	if !s.Allocated(a) || s.Allocated(a+3072) {
		t.Error("Allocated")
	}
	n := 0
	s.Blocks(func(BlockInfo) bool { n++; return true })
	if n != 2 {
		t.Errorf("Blocks visited %d", n)
	}
	if rs := s.Regions(); len(rs) != 1 || rs[0].Size != SmallBuffer || rs[0].Stream != s1 || rs[0].MappedBytes != SmallBuffer {
		t.Errorf("Regions %+v", rs)
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	if _, err := New(Config{}, Options{}); err == nil {
		t.Error("zero Config accepted")
	}
	bad := DefaultConfig(Latest)
	bad.RoundupPower2Divisions[3] = 3
	if _, err := New(bad, Options{}); err == nil {
		t.Error("divisions of 3 accepted")
	}
	bad = DefaultConfig(Latest)
	bad.GarbageCollectionThreshold = 1
	if _, err := New(bad, Options{}); err == nil {
		t.Error("GC threshold 1 accepted")
	}
	if _, err := New(DefaultConfig(Latest), Options{Capacity: -1}); err == nil {
		t.Error("negative capacity accepted")
	}
	// 2.10 applies per_process_memory_fraction when the allocator is made.
	cfg, err := ParseConfig("per_process_memory_fraction:0.25", Latest)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg, Options{Capacity: 1000 * mib})
	if err != nil || a.MemoryFraction() != 0.25 {
		t.Errorf("fraction %v, %v", a.MemoryFraction(), err)
	}
}

// The streams of recorded entries are in the trace's context table, and a
// snapshot carries a copy of it that later recording does not change.
func TestTraceEntryStreams(t *testing.T) {
	s := newSim(t, "", Latest, Options{})
	if err := s.RecordHistory(HistoryOptions{Enabled: HistoryAll, Context: ContextAll}); err != nil {
		t.Fatal(err)
	}
	const s7 = 7
	s.alloc(1000, s7)
	s.alloc(3<<20, 0)
	var streams []int64
	for _, e := range s.Trace() {
		streams = append(streams, s.TraceContexts().Get(e.Context).Stream)
	}
	// segment_alloc and alloc on stream 7, then on stream 0.
	if fmt.Sprint(streams) != "[7 7 0 0]" {
		t.Errorf("streams %v", streams)
	}
	snap := s.Snapshot()
	s.alloc(1000, 9)
	for i, e := range snap.Trace(0).All() {
		if got := snap.Stream(&e); got != streams[i] {
			t.Errorf("snapshot entry %d: stream %d, want %d", i, got, streams[i])
		}
		if c := snap.Context(&e); snap.String(c.CompileContext) != "N/A" {
			t.Errorf("snapshot entry %d: compile_context %q", i, snap.String(c.CompileContext))
		}
	}
}
