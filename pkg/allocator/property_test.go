package allocator_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/memstat/memstat/internal/randworkload"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// The random workload itself is internal/randworkload (the replay's tests
// record the same one); these tests check the allocator's invariants along it.

var propCases = append(randworkload.CommonCases(), []randworkload.Case{
	{Conf: "expandable_segments:True,max_split_size_mb:64,garbage_collection_threshold:0.5", Version: allocator.Latest,
		Capacity: 1 << 30, Fraction: 0.8, Streams: []int64{0, 2}, Scale: 200 << 20},
	{Conf: "garbage_collection_threshold:0.6", Version: allocator.V2_3, Capacity: 1 << 30, Fraction: 0.7, Streams: []int64{0, 1}, Scale: 200 << 20},
	{Conf: "roundup_power2_divisions:[1:2,4:4,>:8]", Version: allocator.V2_9, Capacity: 1 << 30, Streams: []int64{0, 1}, Scale: 300 << 20},
	{Conf: "roundup_power2_divisions:1,max_split_size_mb:64", Version: allocator.V2_0, Capacity: 1 << 30, Streams: []int64{0}, Scale: 300 << 20},
	{Conf: "max_split_size_mb:64", Version: allocator.Latest, Capacity: 1 << 30, Streams: []int64{0, 1}, Scale: 300 << 20, Toggle: true},
}...)

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
			name := fmt.Sprintf("%d-%s-%q-seed%d", ci, pc.Version, pc.Conf, seed)
			t.Run(name, func(t *testing.T) {
				a := pc.NewAllocator(t)
				if pc.Fraction > 0 {
					if err := a.SetMemoryFraction(pc.Fraction); err != nil {
						t.Fatal(err)
					}
				}
				if err := a.RecordHistory(allocator.HistoryOptions{Enabled: allocator.HistoryAll, Context: allocator.ContextAll, MaxEntries: 1000}); err != nil {
					t.Fatal(err)
				}
				w := &randworkload.Workload{T: t, Rng: rand.New(rand.NewPCG(seed, uint64(ci))), A: a, Name: name,
					Scale: pc.Scale, Streams: pc.Streams}
				expandable := a.Config().ExpandableSegments
				for i := range ops {
					op := w.Step()
					if pc.Toggle && w.Rng.IntN(200) == 0 {
						expandable = !expandable
						conf := pc.Conf + ",expandable_segments:" + allocator.PyBool(expandable)
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
					w.OOMs, st0.NumDeviceAlloc, st0.NumDeviceFree, st0.NumAllocRetries, st0.NumSyncAllStreams,
					st0.ReservedBytes[allocator.PoolAll].Peak>>20, len(w.Live), len(a.Trace()))
				// Free everything and empty the cache: nothing may remain.
				a.CompleteAllStreamEvents()
				for _, addr := range w.Live {
					if err := a.Free(addr, 0); err != nil {
						t.Fatal(err)
					}
				}
				a.EmptyCache(0)
				if err := a.CheckInvariants(); err != nil {
					t.Fatal(err)
				}
				st := a.Stats()
				if st.ReservedBytes[allocator.PoolAll].Current != 0 || st.Active[allocator.PoolAll].Current != 0 || len(a.Regions()) != 0 {
					t.Errorf("after freeing everything: reserved %d, active %d, regions %d",
						st.ReservedBytes[allocator.PoolAll].Current, st.Active[allocator.PoolAll].Current, len(a.Regions()))
				}
				if pc.Capacity > 0 && w.OOMs == 0 && pc.Scale*4 > pc.Capacity {
					t.Logf("no OOM reached")
				}
			})
		}
	}
}

func checkPeaks(a *allocator.Allocator) error {
	st := a.Stats()
	for i, arr := range allocator.StatArrays(&st) {
		for p, x := range arr {
			if x.Peak < x.Current || x.Current < 0 || x.Allocated-x.Freed != x.Current {
				return fmt.Errorf("stat %d pool %d: %+v", i, p, x)
			}
		}
	}
	for _, x := range []allocator.Stat{st.OversizeAllocations, st.OversizeSegments} {
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
	for ci, pc := range []randworkload.Case{
		{Conf: "", Version: allocator.Latest, Streams: []int64{0, 4}, Scale: 200 << 20},
		{Conf: "max_split_size_mb:40", Version: allocator.Latest, Streams: []int64{0}, Scale: 300 << 20},
		{Conf: "expandable_segments:True", Version: allocator.Latest, Streams: []int64{0, 4}, Scale: 200 << 20},
	} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%d-%q-seed%d", ci, pc.Conf, seed), func(t *testing.T) {
				cfg, _ := allocator.ParseConfig(pc.Conf, pc.Version)
				// Both allocators draw segment addresses from the same
				// sequence, so equal decisions give equal addresses.
				gen := func(start int) func(allocator.SegmentRequest) (uint64, bool) {
					k := start
					return func(allocator.SegmentRequest) (uint64, bool) {
						k++
						return 0x100000000000 + uint64(k)<<37, true
					}
				}
				counter := 0
				counting := func(req allocator.SegmentRequest) (uint64, bool) {
					counter++
					return 0x100000000000 + uint64(counter)<<37, true
				}
				orig, _ := allocator.New(cfg, allocator.Options{SegmentAddress: counting})
				w := &randworkload.Workload{T: t, Rng: rand.New(rand.NewPCG(seed, 77)), A: orig, Scale: pc.Scale, Streams: pc.Streams}
				mallocsAndFrees := func(w *randworkload.Workload, n int) {
					for range n {
						if w.Rng.IntN(2) == 0 || len(w.Live) == 0 {
							addr, err := w.A.Malloc(w.Size(), w.Streams[w.Rng.IntN(len(w.Streams))], 0)
							if err != nil {
								t.Fatal(err)
							}
							w.Live = append(w.Live, addr)
						} else {
							j := w.Rng.IntN(len(w.Live))
							if err := w.A.Free(w.Live[j], 0); err != nil {
								t.Fatal(err)
							}
							w.Live = slices.Delete(w.Live, j, j+1)
						}
					}
				}
				mallocsAndFrees(w, 400)

				cp, _ := allocator.New(cfg, allocator.Options{SegmentAddress: gen(counter)})
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
				if got, want := allocator.Layout(cp.Segments(), 0), allocator.Layout(orig.Segments(), 0); got != want {
					t.Fatalf("seeded layout differs:\n got %s\nwant %s", got, want)
				}
				so, sc := orig.Stats(), cp.Stats()
				for i, arr := range allocator.StatArrays(&so) {
					for p := range arr {
						if arr[p].Current != allocator.StatArrays(&sc)[i][p].Current {
							t.Errorf("stat %d pool %d: seeded current %d, original %d", i, p, allocator.StatArrays(&sc)[i][p].Current, arr[p].Current)
						}
					}
				}
				if len(cp.Trace()) != 0 {
					t.Errorf("seeding recorded %d trace entries", len(cp.Trace()))
				}
				// Continue both with the same operations.
				w2 := &randworkload.Workload{T: t, Rng: rand.New(rand.NewPCG(seed, 99)), A: cp, Scale: pc.Scale, Streams: pc.Streams, Live: slices.Clone(w.Live)}
				w.Rng = rand.New(rand.NewPCG(seed, 99))
				for i := range 300 {
					mallocsAndFrees(w, 1)
					mallocsAndFrees(w2, 1)
					if !slices.Equal(w.Live, w2.Live) {
						t.Fatalf("op %d: seeded copy placed differently", i)
					}
				}
				if got, want := allocator.Layout(cp.Segments(), 0), allocator.Layout(orig.Segments(), 0); got != want {
					t.Fatalf("layouts diverged")
				}
			})
		}
	}
}

// TestPropertySeedBatchSame seeds random states (a share of their live
// blocks made pending frees) into two fresh allocators, one block at a
// time and in a seed batch, and checks that both hold the same state:
// the invariants (each block in the table of its state), layouts,
// statistics, every block's hold, and the same state again after every
// pending free completes and every handed-out block is freed.
func TestPropertySeedBatchSame(t *testing.T) {
	for ci, pc := range []randworkload.Case{
		{Conf: "", Version: allocator.Latest, Streams: []int64{0, 4}, Scale: 200 << 20},
		{Conf: "expandable_segments:True", Version: allocator.Latest, Streams: []int64{0, 4}, Scale: 200 << 20},
	} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%d-%q-seed%d", ci, pc.Conf, seed), func(t *testing.T) {
				cfg, _ := allocator.ParseConfig(pc.Conf, pc.Version)
				counter := 0
				counting := func(req allocator.SegmentRequest) (uint64, bool) {
					counter++
					return 0x100000000000 + uint64(counter)<<37, true
				}
				orig, _ := allocator.New(cfg, allocator.Options{SegmentAddress: counting})
				rng := rand.New(rand.NewPCG(seed, 5))
				w := &randworkload.Workload{T: t, Rng: rng, A: orig, Scale: pc.Scale, Streams: pc.Streams}
				var live []uint64
				// Enough live blocks that the batch puts them in its
				// parts (putAbsent), not one by one.
				for range 8000 {
					if rng.IntN(3) != 0 || len(live) == 0 {
						addr, err := orig.Malloc(w.Size(), pc.Streams[rng.IntN(len(pc.Streams))], 0)
						if err != nil {
							t.Fatal(err)
						}
						live = append(live, addr)
					} else {
						j := rng.IntN(len(live))
						if err := orig.Free(live[j], 0); err != nil {
							t.Fatal(err)
						}
						live = slices.Delete(live, j, j+1)
					}
				}
				segs := orig.Segments()
				for i := range segs {
					segs[i].Blocks = slices.Clone(segs[i].Blocks)
					for k := range segs[i].Blocks {
						if b := &segs[i].Blocks[k]; b.State == snapshot.ActiveAllocated && rng.IntN(3) == 0 {
							b.State = snapshot.ActivePendingFree
						}
					}
				}
				seeded := func(batch bool) *allocator.Allocator {
					a, _ := allocator.New(cfg, allocator.Options{SegmentAddress: counting})
					for _, r := range orig.Regions() {
						if r.Expandable {
							if err := a.SeedReservation(r.Address, r.Stream, r.Pool, snapshot.PoolID{}); err != nil {
								t.Fatal(err)
							}
						}
					}
					if batch {
						a.BeginSeedBatch(10, 0) // it grows past its sizes
					}
					for _, sg := range segs {
						if err := a.SeedSegment(sg); err != nil {
							t.Fatal(err)
						}
					}
					a.EndSeedBatch()
					if err := a.CheckInvariants(); err != nil {
						t.Fatal(err)
					}
					return a
				}
				one, bulk := seeded(false), seeded(true)
				same := func(when string) {
					t.Helper()
					if got, want := allocator.Layout(bulk.Segments(), 0), allocator.Layout(one.Segments(), 0); got != want {
						t.Fatalf("%s: layout differs:\n got %s\nwant %s", when, got, want)
					}
					if got, want := fmt.Sprint(bulk.Stats()), fmt.Sprint(one.Stats()); got != want {
						t.Fatalf("%s: stats differ:\n got %s\nwant %s", when, got, want)
					}
				}
				same("seeded")
				var pending, allocated int
				for _, sg := range segs {
					for _, b := range sg.Blocks {
						if got, want := bulk.HoldAt(b.Address), one.HoldAt(b.Address); got != want {
							t.Fatalf("%#x: hold %d, want %d", b.Address, got, want)
						}
						switch b.State {
						case snapshot.ActivePendingFree:
							pending++
							for _, a := range []*allocator.Allocator{one, bulk} {
								if err := a.CompletePendingFree(b.Address, 0); err != nil {
									t.Fatal(err)
								}
							}
						case snapshot.ActiveAllocated:
							allocated++
						}
					}
				}
				if pending == 0 || allocated < 1024 {
					t.Fatalf("%d pending and %d allocated blocks seeded: the test needs both, and 1,024 allocated", pending, allocated)
				}
				same("pending frees completed")
				for _, sg := range segs {
					for _, b := range sg.Blocks {
						if b.State == snapshot.ActiveAllocated {
							for _, a := range []*allocator.Allocator{one, bulk} {
								if err := a.Free(b.Address, 0); err != nil {
									t.Fatal(err)
								}
							}
						}
					}
				}
				same("everything freed")
				if err := bulk.CheckInvariants(); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
