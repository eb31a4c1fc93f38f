package allocator

import (
	"strings"
	"testing"

	"github.com/memstat/memstat/pkg/snapshot"
)

// Private-pool rules, each test naming the DeviceCachingAllocator function
// (c10/cuda/CUDACachingAllocator.cpp) and release it follows.

var (
	g1 = snapshot.PoolID{1, 0} // a graph's own pool (capture_begin without pool)
	m1 = snapshot.PoolID{0, 1} // graph_pool_handle() / MemPool()
)

func (s *sim) begin(id snapshot.PoolID, kind PoolKind, f StreamFilter) {
	s.t.Helper()
	if err := s.BeginAllocateToPool(id, kind, f); err != nil {
		s.t.Fatal(err)
	}
}

func (s *sim) end(id snapshot.PoolID) {
	s.t.Helper()
	if err := s.EndAllocateToPool(id); err != nil {
		s.t.Fatal(err)
	}
}

func (s *sim) release(id snapshot.PoolID) {
	s.t.Helper()
	if err := s.ReleasePool(id); err != nil {
		s.t.Fatal(err)
	}
	s.check()
}

func (s *sim) usage(id snapshot.PoolID) PoolUsage {
	for _, u := range s.PoolUsages() {
		if u.ID == id {
			return u
		}
	}
	return PoolUsage{UseCount: -2}
}

func segmentPools(segs []snapshot.Segment) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteString(s.Pool.String()[:1])
		b.WriteString(formatInts([]int64{s.PoolID[0], s.PoolID[1]}))
		b.WriteString(" ")
	}
	return strings.TrimSpace(b.String())
}

// get_pool (2.9): during a capture the capturing stream's requests go to
// the pool's own small/large sets; other streams stay in the default
// pools. The snapshot's segment_pool_id shows it.
func TestGetPoolRoutesCapturedStream(t *testing.T) {
	s := newSim(t, "", V2_9, Options{})
	s.begin(g1, PoolKindGraph, StreamFilter{Stream: s1})
	s.alloc(1000, s1)  // small, pool
	s.alloc(4<<20, s1) // large, pool
	s.alloc(1000, s0)  // default small
	s.end(g1)
	s.alloc(2000, s1) // after the capture: default pools
	s.check()
	if got, want := segmentPools(s.Segments()), "s1 0 l1 0 s0 0 s0 0"; got != want {
		t.Errorf("segments %s, want %s", got, want)
	}
	u := s.usage(g1)
	if u.Segments != 2 || u.Reserved != 2<<20+20<<20 || u.Allocated != 512*2+4<<20 || u.Kind != PoolKindGraph || u.UseCount != 1 {
		t.Errorf("pool usage %+v", u)
	}
	// memory_stats aggregates every pool by kind (get_stat_types_for_pool).
	st := s.Stats()
	if st.Segment[PoolAll].Current != 4 || st.Segment[PoolSmall].Current != 3 || st.Segment[PoolLarge].Current != 1 {
		t.Errorf("segment stats %+v", st.Segment)
	}
	res, alloc := s.PrivatePoolStats()
	if res.Current != u.Reserved || alloc.Current != u.Allocated {
		t.Errorf("private totals %d/%d, pool %d/%d", res.Current, alloc.Current, u.Reserved, u.Allocated)
	}
}

// get_pool searches captures_underway newest first (LIFO); use_mem_pool's
// filter takes every stream of the thread.
func TestGetPoolNewestCaptureWins(t *testing.T) {
	s := newSim(t, "", V2_9, Options{})
	s.begin(m1, PoolKindMemPool, StreamFilter{AllStreams: true})
	s.begin(g1, PoolKindGraph, StreamFilter{Stream: s1})
	a := s.alloc(1000, s1)
	b := s.alloc(1000, s0)
	s.end(g1)
	s.end(m1)
	if s.regions.find(a).pool.owner.id != g1 || s.regions.find(b).pool.owner.id != m1 {
		t.Errorf("pools: %v %v", s.regions.find(a).pool.owner.id, s.regions.find(b).pool.owner.id)
	}
}

// free_block: a block freed in a private pool goes back to that pool and
// is never handed to a default-pool request; the next capture into the
// same pool (pool=g.pool(), create_or_incref_pool) reuses it.
func TestFreedPoolBlockStaysInPool(t *testing.T) {
	s := newSim(t, "", V2_9, Options{})
	s.begin(m1, PoolKindGraph, StreamFilter{Stream: s0})
	x := s.alloc(8<<20, s0)
	s.end(m1)
	s.free(x)
	y := s.alloc(8<<20, s0) // default pool: a new segment
	if s.regions.find(y).pool.owner != nil || s.Stats().Segment[PoolAll].Current != 2 {
		t.Fatalf("default request used the private pool's block")
	}
	s.begin(m1, PoolKindGraph, StreamFilter{Stream: s0}) // shares the pool
	if u := s.PoolUseCount(m1); u != 2 {
		t.Errorf("use_count %d after a second capture, want 2", u)
	}
	z := s.alloc(8<<20, s0)
	s.end(m1)
	if z != x {
		t.Errorf("second capture got %#x, want the pool's cached block %#x", z, x)
	}
}

// release_cached_blocks: empty_cache leaves a live pool's free segments
// alone; after releasePool brings use_count to 0 the pool is freeable and
// the next empty_cache returns its segments and drops the pool.
func TestEmptyCacheKeepsLivePool(t *testing.T) {
	s := newSim(t, "", V2_9, Options{})
	s.begin(g1, PoolKindGraph, StreamFilter{Stream: s0})
	x := s.alloc(8<<20, s0)
	s.end(g1)
	s.free(x)
	d := s.alloc(8<<20, s0)
	s.free(d)
	s.emptyCache()
	if u := s.usage(g1); u.Segments != 1 || u.Reserved != 20<<20 || u.LargestFree != 20<<20 {
		t.Fatalf("live pool after empty_cache: %+v", u)
	}
	if s.usage(snapshot.PoolID{}).Segments != 0 {
		t.Fatalf("default pool kept a free segment")
	}
	s.release(g1)
	if u := s.usage(g1); !u.Freeable || u.UseCount != 0 {
		t.Fatalf("after releasePool: %+v", u)
	}
	s.emptyCache()
	if u := s.usage(g1); u.UseCount != -2 {
		t.Fatalf("freeable pool not dropped: %+v", u)
	}
	if st := s.Stats(); st.ReservedBytes[PoolAll].Current != 0 {
		t.Fatalf("reserved %d after emptying a freeable pool", st.ReservedBytes[PoolAll].Current)
	}
	if err := s.ReleasePool(g1); err == nil {
		t.Errorf("releasing a dropped pool succeeded")
	}
}

// release_cached_blocks: a freeable pool whose segment is still partly
// allocated (cudaMalloc_count > 0) stays in graph_pools; its segment goes
// at the empty_cache after the last block is freed.
func TestFreeablePoolWithLiveBlock(t *testing.T) {
	s := newSim(t, "", V2_9, Options{})
	s.begin(g1, PoolKindGraph, StreamFilter{Stream: s0})
	x := s.alloc(8<<20, s0)
	s.end(g1)
	s.release(g1)
	s.emptyCache()
	if u := s.usage(g1); u.Segments != 1 || !u.Freeable {
		t.Fatalf("pool with a live block: %+v", u)
	}
	s.free(x)
	s.emptyCache()
	if u := s.usage(g1); u.UseCount != -2 {
		t.Fatalf("pool not dropped: %+v", u)
	}
}

// beginAllocateToPool refuses a second capture into the same pool;
// endAllocateToPool one that is not recording; releasePool asserts
// use_count > 0.
func TestPoolCallErrors(t *testing.T) {
	s := newSim(t, "", V2_9, Options{})
	s.begin(g1, PoolKindGraph, StreamFilter{Stream: s0})
	if err := s.BeginAllocateToPool(g1, PoolKindGraph, StreamFilter{Stream: s1}); err == nil || !strings.Contains(err.Error(), "already recording") {
		t.Errorf("second begin: %v", err)
	}
	s.end(g1)
	if err := s.EndAllocateToPool(g1); err == nil {
		t.Errorf("second end succeeded")
	}
	s.release(g1)
	if err := s.ReleasePool(g1); err == nil {
		t.Errorf("release below 0 succeeded")
	}
	if err := s.BeginAllocateToPool(snapshot.PoolID{}, PoolKindGraph, StreamFilter{}); err == nil {
		t.Errorf("pool (0, 0) accepted")
	}
}

// MemPool and use_mem_pool appear in 2.5; 2.0-2.4 have graph pools only.
func TestMemPoolVersions(t *testing.T) {
	s := newSim(t, "", V2_4, Options{})
	if err := s.CreatePool(m1, PoolKindMemPool); err == nil {
		t.Errorf("MemPool in 2.4 accepted")
	}
	if err := s.BeginAllocateToPool(m1, PoolKindGraph, StreamFilter{}); err != nil {
		t.Errorf("graph pool in 2.4: %v", err)
	}
	s = newSim(t, "", V2_5, Options{})
	if err := s.CreatePool(m1, PoolKindMemPool); err != nil {
		t.Fatal(err)
	}
	s.begin(m1, PoolKindMemPool, StreamFilter{AllStreams: true})
	if u := s.PoolUseCount(m1); u != 2 {
		t.Errorf("use_count %d inside use_mem_pool, want 2", u)
	}
	s.end(m1)
	s.release(m1)
	if u := s.PoolUseCount(m1); u != 1 {
		t.Errorf("use_count %d after use_mem_pool, want 1 (the MemPool object)", u)
	}
}

// malloc: while a capture is underway process_events is skipped and a
// cross-stream free is deferred until no capture is underway
// (needs_events_deferred_until_no_capture / deferred_blocks); the last
// fallback (release_cached_blocks and retry) is skipped too.
func TestCaptureDefersEventsAndFallback(t *testing.T) {
	s := newSim(t, "", V2_9, Options{Capacity: 64 << 20})
	x := s.alloc(8<<20, s0)
	if err := s.RecordStream(x, s1); err != nil {
		t.Fatal(err)
	}
	d := s.alloc(20<<20, s0)
	s.free(d) // a cached default segment
	s.begin(g1, PoolKindGraph, StreamFilter{Stream: s2})
	s.free(x)
	s.CompleteAllStreamEvents()
	if len(s.deferred) != 1 || s.nEvents != 0 {
		t.Fatalf("free during capture: %d deferred, %d events", len(s.deferred), s.nEvents)
	}
	// 40 MiB: the cached 20 MiB default segment would have to go; during
	// the capture it is not released, so the request fails.
	s.oom(40<<20, s2)
	if s.Stats().NumAllocRetries != 0 {
		t.Errorf("release-and-retry ran during a capture")
	}
	s.end(g1)
	s.alloc(1000, s0) // inserts the deferred events
	if s.nEvents != 1 {
		t.Fatalf("%d events after the capture, want 1", s.nEvents)
	}
}

// free_safe_blocks_in_capture (2.9, graph_capture_record_stream_reuse):
// a block freed during the capture on captured streams is reused during
// the same capture.
func TestRecordStreamReuseInCapture(t *testing.T) {
	for _, on := range []bool{false, true} {
		conf := ""
		if on {
			conf = "graph_capture_record_stream_reuse:True"
		}
		s := newSim(t, conf, V2_9, Options{})
		s.begin(g1, PoolKindGraph, StreamFilter{AllStreams: true})
		x := s.alloc(8<<20, s0)
		if err := s.RecordStream(x, s1); err != nil {
			t.Fatal(err)
		}
		s.free(x)
		y := s.alloc(8<<20, s0)
		s.end(g1)
		if (y == x) != on {
			t.Errorf("record_stream_reuse=%v: reused=%v", on, y == x)
		}
	}
}

// release_cached_blocks (2.9) keeps the default pools while a capture is
// underway; 2.0-2.8 release them anyway.
func TestEmptyCacheDuringCapture(t *testing.T) {
	for _, v := range []Version{V2_8, V2_9} {
		s := newSim(t, "", v, Options{})
		s.free(s.alloc(8<<20, s0))
		s.begin(g1, PoolKindGraph, StreamFilter{Stream: s1})
		s.emptyCache()
		s.end(g1)
		kept := s.Stats().Segment[PoolAll].Current == 1
		if kept != (v >= V2_9) {
			t.Errorf("%s: default segment kept=%v", v, kept)
		}
	}
}

// alloc_block: before 2.4 private pools cudaMalloc even with expandable
// segments on; from 2.4 they map expandable segments of their own.
func TestPrivatePoolExpandable(t *testing.T) {
	for _, v := range []Version{V2_3, V2_4} {
		s := newSim(t, "expandable_segments:True", v, Options{})
		s.begin(g1, PoolKindGraph, StreamFilter{Stream: s0})
		x := s.alloc(8<<20, s0)
		s.end(g1)
		exp := s.regions.find(x).expandable
		if exp != (v >= V2_4) {
			t.Errorf("%s: private segment expandable=%v", v, exp)
		}
		s.free(x)
		s.release(g1)
		s.emptyCache()
		if r := s.Stats().ReservedBytes[PoolAll].Current; r != 0 {
			t.Errorf("%s: %d reserved after releasing the pool", v, r)
		}
	}
}

// should_split (2.1 to 2.10) tests the global expandable_segments flag
// (CUDAAllocatorConfig::expandable_segments()), not the block's pool: in
// 2.3 a private pool's cudaMalloc'd block splits off a 512 KiB remainder
// while the option is on, and keeps it (more than 1 MiB needed) while off.
func TestPrivatePoolSplitFollowsGlobalFlag(t *testing.T) {
	const want = 20<<20 - 512<<10
	for _, c := range []struct {
		conf  string
		block int64
	}{{"expandable_segments:True", want}, {"", 20 << 20}} {
		s := newSim(t, c.conf, V2_3, Options{})
		s.begin(g1, PoolKindGraph, StreamFilter{Stream: s0})
		s.free(s.alloc(8<<20, s0)) // a 20 MiB cudaMalloc'd segment of g1, cached whole
		x := s.alloc(want, s0)
		s.end(g1)
		if s.regions.find(x).expandable {
			t.Fatalf("%q: 2.3 mapped a private pool's segment", c.conf)
		}
		if got := s.Stats().AllocatedBytes[PoolAll].Current; got != c.block {
			t.Errorf("%q: block of %d bytes, want %d", c.conf, got, c.block)
		}
	}
}

// malloc's OOM message counts the free blocks of private pools as
// "allocated in private pools" (2.4+ wording).
func TestOOMMessagePrivatePools(t *testing.T) {
	s := newSim(t, "", V2_9, Options{Capacity: 40 << 20})
	s.begin(g1, PoolKindGraph, StreamFilter{Stream: s0})
	s.free(s.alloc(20<<20, s0))
	s.end(g1)
	e := s.oom(30<<20, s0)
	if e.PrivatePools != 20<<20 || !strings.Contains(e.Error(), "with 20.00 MiB allocated in private pools") {
		t.Errorf("private %d, message %q", e.PrivatePools, e.Error())
	}
}

// A clone copies the pools, captures and deferred blocks: running on the
// copy leaves the original alone.
func TestClonePools(t *testing.T) {
	s := newSim(t, "", V2_9, Options{})
	s.begin(g1, PoolKindGraph, StreamFilter{Stream: s0})
	x := s.alloc(8<<20, s0)
	s.free(x)
	c := &sim{t, s.Clone()}
	y := c.alloc(8<<20, s0)
	c.end(g1)
	if y != x || s.usage(g1).Allocated != 0 || c.usage(g1).Allocated != 8<<20 {
		t.Errorf("clone: %#x vs %#x, original %+v", y, x, s.usage(g1))
	}
	s.check()
	if !s.Capturing() || c.Capturing() {
		t.Errorf("captures shared between clone and original")
	}
}

// SeedSegment puts a segment with a segment_pool_id into that pool,
// created alive (use_count 1): a default-pool request does not use its
// free block, a request routed there does, and empty_cache keeps it.
func TestSeedPrivatePoolSegment(t *testing.T) {
	s := newSim(t, "", V2_9, Options{})
	seg := snapshot.Segment{Address: base, TotalSize: 20 << 20, Pool: snapshot.LargePool, PoolID: m1,
		Blocks: []snapshot.Block{{Address: base, Size: 8 << 20, RequestedSize: 8 << 20, State: snapshot.ActiveAllocated},
			{Address: base + 8<<20, Size: 12 << 20}}}
	if err := s.SeedSegment(seg); err != nil {
		t.Fatal(err)
	}
	s.check()
	if u := s.usage(m1); u.Segments != 1 || u.Allocated != 8<<20 || u.LargestFree != 12<<20 || u.UseCount != 1 {
		t.Fatalf("seeded pool %+v", u)
	}
	if x := s.alloc(4<<20, s0); x == base+8<<20 {
		t.Errorf("default request took the private pool's block")
	}
	s.RouteToPool(m1)
	if x := s.alloc(4<<20, s0); x != base+8<<20 {
		t.Errorf("routed request at %#x, want the pool's free block", x)
	}
	s.EndRoute()
	s.emptyCache()
	if u := s.usage(m1); u.Segments != 1 {
		t.Errorf("empty_cache returned a live pool's segment")
	}
	if got := s.Segments()[0].PoolID; got != m1 {
		t.Errorf("snapshot segment_pool_id %v", got)
	}
}
