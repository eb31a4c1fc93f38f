package allocator

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/memstat/memstat/pkg/snapshot"
)

// workload drives an allocator with random operations. Everything random
// comes from one seeded generator, so a failure is reproducible from the
// seed in its message.
type workload struct {
	t       *testing.T
	rng     *rand.Rand
	a       *Allocator
	live    []uint64 // allocated addresses
	pending []uint64 // FreeDeferred addresses not yet completed
	conf    string
	// scale bounds request sizes (a fraction of capacity keeps OOMs
	// occasional rather than constant).
	scale     int64
	streams   []int64
	recording bool
	ooms      int
	// pools: capture into private pools now and then (poolStep).
	pools     bool
	livePools []snapshot.PoolID // pools with a user left
	capture   *snapshot.PoolID  // the capture underway
	memPool   bool              // ... is a use_mem_pool
	nextGraph int64
	nextMem   int64
}

// poolStep begins or ends a graph capture or use_mem_pool block (into a
// new pool, or into a live one as pool=g.pool() does), or releases a
// pool (graph reset, MemPool destructor).
func (w *workload) poolStep() string {
	a := w.a
	if w.capture != nil {
		id := *w.capture
		if err := a.EndAllocateToPool(id); err != nil {
			w.fail("end capture", err)
		}
		if w.memPool {
			// use_mem_pool's __exit__ releases the use its __enter__ took.
			if err := a.ReleasePool(id); err != nil {
				w.fail("use_mem_pool exit", err)
			}
		}
		w.capture = nil
		return "end_capture"
	}
	if len(w.livePools) > 0 && w.rng.IntN(3) == 0 {
		j := w.rng.IntN(len(w.livePools))
		id := w.livePools[j]
		w.livePools = slices.Delete(w.livePools, j, j+1)
		if err := a.ReleasePool(id); err != nil {
			w.fail("release pool", err)
		}
		return "release_pool"
	}
	var id snapshot.PoolID
	reuse := len(w.livePools) > 0 && w.rng.IntN(3) == 0
	if reuse {
		id = w.livePools[w.rng.IntN(len(w.livePools))]
	}
	w.memPool = a.v.HasMemPool() && w.rng.IntN(2) == 0
	switch {
	case w.memPool:
		if !reuse || id[1] == 0 {
			w.nextMem++
			id = snapshot.PoolID{0, w.nextMem}
			if err := a.CreatePool(id, PoolKindMemPool); err != nil {
				w.fail("MemPool()", err)
			}
			w.livePools = append(w.livePools, id)
		}
		if err := a.BeginAllocateToPool(id, PoolKindMemPool, StreamFilter{AllStreams: true}); err != nil {
			w.fail("use_mem_pool", err)
		}
	default:
		if !reuse {
			w.nextGraph++
			id = snapshot.PoolID{w.nextGraph, 0}
		}
		stream := w.streams[w.rng.IntN(len(w.streams))]
		if err := a.BeginAllocateToPool(id, PoolKindGraph, StreamFilter{Stream: stream}); err != nil {
			w.fail("capture_begin", err)
		}
		// Each capture holds a use until its graph is reset.
		w.livePools = append(w.livePools, id)
	}
	w.capture = &id
	return "begin_capture"
}

// size draws a request: mostly small tensors, many medium ones, a few
// large ones, with odd sizes so that rounding matters.
func (w *workload) size() int64 {
	r := w.rng.Float64()
	var lo, hi float64
	switch {
	case r < 0.4:
		lo, hi = 1, 1<<20
	case r < 0.85:
		lo, hi = 1<<20, 30<<20
	default:
		lo, hi = 30<<20, float64(w.scale)
	}
	// Log-uniform between lo and hi.
	x := lo * math.Pow(hi/lo, w.rng.Float64())
	n := int64(x)
	if w.rng.IntN(4) == 0 {
		n = n &^ 511 // whole multiples of 512 are common in practice
	}
	return max(n, 1)
}

func (w *workload) fail(op string, err error) {
	w.t.Helper()
	w.t.Fatalf("%s after %s: %v", w.conf, op, err)
}

func (w *workload) step(i int) string {
	a := w.a
	stack := snapshot.StackID(w.rng.IntN(5))
	if w.pools && w.rng.IntN(100) < 3 {
		return w.poolStep()
	}
	switch r := w.rng.IntN(100); {
	case r < 45 || len(w.live) == 0:
		size := w.size()
		stream := w.streams[w.rng.IntN(len(w.streams))]
		addr, err := a.Malloc(size, stream, stack)
		var oom *OOMError
		switch {
		case errors.As(err, &oom):
			w.ooms++
			if oom.Error() == "" || oom.AllocSize < size {
				w.fail("oom", fmt.Errorf("bad OOM error %+v", oom))
			}
		case err != nil:
			w.fail("malloc", err)
		default:
			if addr == 0 || slices.Contains(w.live, addr) {
				w.fail("malloc", fmt.Errorf("address %#x handed out twice", addr))
			}
			w.live = append(w.live, addr)
		}
		return fmt.Sprintf("malloc(%d, s%d)", size, stream)
	case r < 80:
		j := w.rng.IntN(len(w.live))
		addr := w.live[j]
		w.live = slices.Delete(w.live, j, j+1)
		if w.rng.IntN(8) == 0 {
			if err := a.FreeDeferred(addr, stack); err != nil {
				w.fail("free deferred", err)
			}
			w.pending = append(w.pending, addr)
			return "free_deferred"
		}
		if err := a.Free(addr, stack); err != nil {
			w.fail("free", err)
		}
		return "free"
	case r < 88:
		addr := w.live[w.rng.IntN(len(w.live))]
		if err := a.RecordStream(addr, w.streams[w.rng.IntN(len(w.streams))]); err != nil {
			w.fail("record_stream", err)
		}
		return "record_stream"
	case r < 94:
		a.CompleteStreamEvents(w.streams[w.rng.IntN(len(w.streams))])
		return "complete_events"
	case r < 96 && len(w.pending) > 0:
		j := w.rng.IntN(len(w.pending))
		addr := w.pending[j]
		w.pending = slices.Delete(w.pending, j, j+1)
		// The block may already have been completed by a synchronization.
		if a.pending.get(addr) != nil {
			if err := a.CompletePendingFree(addr, stack); err != nil {
				w.fail("complete pending", err)
			}
		}
		return "complete_pending"
	case r < 98:
		a.EmptyCache(stack)
		w.pending = w.pending[:0]
		return "empty_cache"
	default:
		segs := a.Segments()
		var total int64
		for _, s := range segs {
			total += s.TotalSize
			var sum int64
			for _, b := range s.Blocks {
				sum += b.Size
			}
			if sum != s.TotalSize {
				w.fail("snapshot", fmt.Errorf("segment %#x blocks add up to %d of %d", s.Address, sum, s.TotalSize))
			}
		}
		if total != a.stats.ReservedBytes[PoolAll].Current {
			w.fail("snapshot", fmt.Errorf("segments total %d, reserved %d", total, a.stats.ReservedBytes[PoolAll].Current))
		}
		return "snapshot"
	}
}

type propCase struct {
	conf     string
	v        Version
	capacity int64
	fraction float64
	streams  []int64
	scale    int64
	toggle   bool // switch expandable segments on and off at runtime
	pools    bool // graph captures and MemPools (workload.poolStep)
}

var propCases = []propCase{
	{conf: "", v: Latest, streams: []int64{0}, scale: 200 << 20},
	{conf: "", v: Latest, capacity: 1 << 30, streams: []int64{0, 7, 9}, scale: 300 << 20},
	{conf: "max_split_size_mb:40", v: Latest, capacity: 2 << 30, streams: []int64{0, 3}, scale: 400 << 20},
	{conf: "max_split_size_mb:64,max_non_split_rounding_mb:100", v: V2_6, capacity: 1 << 30, streams: []int64{0}, scale: 300 << 20},
	{conf: "expandable_segments:True", v: Latest, streams: []int64{0, 5}, scale: 200 << 20},
	{conf: "expandable_segments:True", v: Latest, capacity: 600 << 20, streams: []int64{0, 5}, scale: 150 << 20},
	{conf: "expandable_segments:True,max_split_size_mb:64,garbage_collection_threshold:0.5", v: Latest,
		capacity: 1 << 30, fraction: 0.8, streams: []int64{0, 2}, scale: 200 << 20},
	{conf: "garbage_collection_threshold:0.6", v: V2_3, capacity: 1 << 30, fraction: 0.7, streams: []int64{0, 1}, scale: 200 << 20},
	{conf: "roundup_power2_divisions:[1:2,4:4,>:8]", v: V2_9, capacity: 1 << 30, streams: []int64{0, 1}, scale: 300 << 20},
	{conf: "roundup_power2_divisions:1,max_split_size_mb:64", v: V2_0, capacity: 1 << 30, streams: []int64{0}, scale: 300 << 20},
	{conf: "max_split_size_mb:64", v: Latest, capacity: 1 << 30, streams: []int64{0, 1}, scale: 300 << 20, toggle: true},
}

// TestPropertyInvariants runs seeded random workloads over several
// configurations and checks every invariant after every operation:
// reserved memory equals the segments (mapped pages for expandable ones),
// blocks tile their segments, no two free neighbours, the free sets hold
// exactly the free blocks, every statistic's current value matches a
// recount and no peak is below its current value.
func TestPropertyInvariants(t *testing.T) {
	ops := 3000
	if testing.Short() {
		ops = 500
	}
	for ci, pc := range propCases {
		for seed := uint64(1); seed <= 3; seed++ {
			name := fmt.Sprintf("%d-%s-%q-seed%d", ci, pc.v, pc.conf, seed)
			t.Run(name, func(t *testing.T) {
				cfg, err := ParseConfig(pc.conf, pc.v)
				if err != nil {
					t.Fatal(err)
				}
				a, err := New(cfg, Options{Capacity: pc.capacity})
				if err != nil {
					t.Fatal(err)
				}
				if pc.fraction > 0 {
					if err := a.SetMemoryFraction(pc.fraction); err != nil {
						t.Fatal(err)
					}
				}
				if err := a.RecordHistory(HistoryOptions{Enabled: HistoryAll, Context: ContextAll, MaxEntries: 1000}); err != nil {
					t.Fatal(err)
				}
				w := &workload{t: t, rng: rand.New(rand.NewPCG(seed, uint64(ci))), a: a, conf: name,
					scale: pc.scale, streams: pc.streams}
				expandable := cfg.ExpandableSegments
				for i := range ops {
					op := w.step(i)
					if pc.toggle && w.rng.IntN(200) == 0 {
						expandable = !expandable
						conf := pc.conf + ",expandable_segments:" + pyBool(expandable)
						if err := a.SetAllocatorSettings(conf); err != nil {
							t.Fatal(err)
						}
						op += " + toggle expandable"
					}
					if err := a.CheckInvariants(); err != nil {
						t.Fatalf("op %d (%s): %v", i, op, err)
					}
					if err := checkPeaks(a); err != nil {
						t.Fatalf("op %d (%s): %v", i, op, err)
					}
				}
				st0 := a.Stats()
				t.Logf("ooms %d, device allocs %d frees %d, retries %d, syncs %d, peak reserved %d MiB, live %d, trace %d",
					w.ooms, st0.NumDeviceAlloc, st0.NumDeviceFree, st0.NumAllocRetries, st0.NumSyncAllStreams,
					st0.ReservedBytes[PoolAll].Peak>>20, len(w.live), len(a.Trace()))
				// Free everything and empty the cache: nothing may remain.
				a.CompleteAllStreamEvents()
				for _, addr := range w.live {
					if err := a.Free(addr, 0); err != nil {
						t.Fatal(err)
					}
				}
				a.EmptyCache(0)
				if err := a.CheckInvariants(); err != nil {
					t.Fatal(err)
				}
				st := a.Stats()
				if st.ReservedBytes[PoolAll].Current != 0 || st.Active[PoolAll].Current != 0 || len(a.Regions()) != 0 {
					t.Errorf("after freeing everything: reserved %d, active %d, regions %d",
						st.ReservedBytes[PoolAll].Current, st.Active[PoolAll].Current, len(a.Regions()))
				}
				if pc.capacity > 0 && w.ooms == 0 && pc.scale*4 > pc.capacity {
					t.Logf("no OOM reached")
				}
			})
		}
	}
}

func checkPeaks(a *Allocator) error {
	st := a.Stats()
	for i, arr := range st.arrays() {
		for p, x := range arr {
			if x.Peak < x.Current || x.Current < 0 || x.Allocated-x.Freed != x.Current {
				return fmt.Errorf("stat %d pool %d: %+v", i, p, x)
			}
		}
	}
	for _, x := range []Stat{st.OversizeAllocations, st.OversizeSegments} {
		if x.Peak < x.Current || x.Allocated-x.Freed != x.Current {
			return fmt.Errorf("oversize stat %+v", x)
		}
	}
	return nil
}

// TestPropertySeedReproducesState copies a random state into a fresh
// allocator with SeedSegment and checks that the copy has the same
// segments, blocks and current statistics, and then makes the same
// decisions as the original for the rest of the workload.
func TestPropertySeedReproducesState(t *testing.T) {
	for ci, pc := range []propCase{
		{conf: "", v: Latest, streams: []int64{0, 4}, scale: 200 << 20},
		{conf: "max_split_size_mb:40", v: Latest, streams: []int64{0}, scale: 300 << 20},
		{conf: "expandable_segments:True", v: Latest, streams: []int64{0, 4}, scale: 200 << 20},
	} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%d-%q-seed%d", ci, pc.conf, seed), func(t *testing.T) {
				cfg, _ := ParseConfig(pc.conf, pc.v)
				// Both allocators draw segment addresses from the same
				// sequence, so equal decisions give equal addresses.
				gen := func(start int) func(SegmentRequest) (uint64, bool) {
					k := start
					return func(SegmentRequest) (uint64, bool) {
						k++
						return 0x100000000000 + uint64(k)<<37, true
					}
				}
				counter := 0
				counting := func(req SegmentRequest) (uint64, bool) {
					counter++
					return 0x100000000000 + uint64(counter)<<37, true
				}
				orig, _ := New(cfg, Options{SegmentAddress: counting})
				w := &workload{t: t, rng: rand.New(rand.NewPCG(seed, 77)), a: orig, scale: pc.scale, streams: pc.streams}
				mallocsAndFrees := func(w *workload, n int) {
					for range n {
						if w.rng.IntN(2) == 0 || len(w.live) == 0 {
							addr, err := w.a.Malloc(w.size(), w.streams[w.rng.IntN(len(w.streams))], 0)
							if err != nil {
								t.Fatal(err)
							}
							w.live = append(w.live, addr)
						} else {
							j := w.rng.IntN(len(w.live))
							if err := w.a.Free(w.live[j], 0); err != nil {
								t.Fatal(err)
							}
							w.live = slices.Delete(w.live, j, j+1)
						}
					}
				}
				mallocsAndFrees(w, 400)

				cp, _ := New(cfg, Options{SegmentAddress: gen(counter)})
				for _, r := range orig.Regions() {
					if r.Expandable {
						if err := cp.SeedReservation(r.Address, r.Stream, r.Pool, snapshot.PoolID{}); err != nil {
							t.Fatal(err)
						}
					}
				}
				for _, sg := range orig.Segments() {
					if err := cp.SeedSegment(sg); err != nil {
						t.Fatal(err)
					}
				}
				if err := cp.CheckInvariants(); err != nil {
					t.Fatal(err)
				}
				if got, want := layout(cp.Segments(), 0), layout(orig.Segments(), 0); got != want {
					t.Fatalf("seeded layout differs:\n got %s\nwant %s", got, want)
				}
				so, sc := orig.Stats(), cp.Stats()
				for i, arr := range so.arrays() {
					for p := range arr {
						if arr[p].Current != sc.arrays()[i][p].Current {
							t.Errorf("stat %d pool %d: seeded current %d, original %d", i, p, sc.arrays()[i][p].Current, arr[p].Current)
						}
					}
				}
				if len(cp.Trace()) != 0 {
					t.Errorf("seeding recorded %d trace entries", len(cp.Trace()))
				}
				// Continue both with the same operations.
				w2 := &workload{t: t, rng: rand.New(rand.NewPCG(seed, 99)), a: cp, scale: pc.scale, streams: pc.streams, live: slices.Clone(w.live)}
				w.rng = rand.New(rand.NewPCG(seed, 99))
				for i := range 300 {
					mallocsAndFrees(w, 1)
					mallocsAndFrees(w2, 1)
					if !slices.Equal(w.live, w2.live) {
						t.Fatalf("op %d: seeded copy placed differently", i)
					}
				}
				if got, want := layout(cp.Segments(), 0), layout(orig.Segments(), 0); got != want {
					t.Fatalf("layouts diverged")
				}
			})
		}
	}
}
