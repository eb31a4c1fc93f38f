// Package randworkload drives an allocator with seeded random operations:
// the allocator's property tests check every invariant after each one, and
// the replay's tests record the run and follow the recording. One generator
// for both keeps their seeds meaning the same workload. Test support only.
package randworkload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Workload drives an allocator with random operations. Everything random
// comes from one seeded generator, so a failure is reproducible from the
// seed in its message.
type Workload struct {
	T       testing.TB
	Rng     *rand.Rand
	A       *allocator.Allocator
	Live    []uint64 // allocated addresses
	Pending []uint64 // FreeDeferred addresses not yet completed
	Name    string   // names the run in failure messages
	// Scale bounds request sizes (a fraction of capacity keeps OOMs
	// occasional rather than constant).
	Scale   int64
	Streams []int64
	OOMs    int // allocations that ran out of memory
	// Pools: capture into private pools now and then (poolStep).
	Pools     bool
	livePools []snapshot.PoolID // pools with a user left
	capture   *snapshot.PoolID  // the capture underway
	memPool   bool              // ... is a use_mem_pool
	nextGraph int64
	nextMem   int64
}

// poolStep begins or ends a graph capture or use_mem_pool block (into a
// new pool, or into a live one as pool=g.pool() does), or releases a
// pool (graph reset, MemPool destructor).
func (w *Workload) poolStep() string {
	a := w.A
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
	if len(w.livePools) > 0 && w.Rng.IntN(3) == 0 {
		j := w.Rng.IntN(len(w.livePools))
		id := w.livePools[j]
		w.livePools = slices.Delete(w.livePools, j, j+1)
		if err := a.ReleasePool(id); err != nil {
			w.fail("release pool", err)
		}
		return "release_pool"
	}
	var id snapshot.PoolID
	reuse := len(w.livePools) > 0 && w.Rng.IntN(3) == 0
	if reuse {
		id = w.livePools[w.Rng.IntN(len(w.livePools))]
	}
	w.memPool = a.Version().HasMemPool() && w.Rng.IntN(2) == 0
	switch {
	case w.memPool:
		if !reuse || id[1] == 0 {
			w.nextMem++
			id = snapshot.PoolID{0, w.nextMem}
			if err := a.CreatePool(id, allocator.PoolKindMemPool); err != nil {
				w.fail("MemPool()", err)
			}
			w.livePools = append(w.livePools, id)
		}
		if err := a.BeginAllocateToPool(id, allocator.PoolKindMemPool, allocator.StreamFilter{AllStreams: true}); err != nil {
			w.fail("use_mem_pool", err)
		}
	default:
		if !reuse {
			w.nextGraph++
			id = snapshot.PoolID{w.nextGraph, 0}
		}
		stream := w.Streams[w.Rng.IntN(len(w.Streams))]
		if err := a.BeginAllocateToPool(id, allocator.PoolKindGraph, allocator.StreamFilter{Stream: stream}); err != nil {
			w.fail("capture_begin", err)
		}
		// Each capture holds a use until its graph is reset.
		w.livePools = append(w.livePools, id)
	}
	w.capture = &id
	return "begin_capture"
}

// Size draws a request: mostly small tensors, many medium ones, a few
// large ones, with odd sizes so that rounding matters.
func (w *Workload) Size() int64 {
	r := w.Rng.Float64()
	var lo, hi float64
	switch {
	case r < 0.4:
		lo, hi = 1, 1<<20
	case r < 0.85:
		lo, hi = 1<<20, 30<<20
	default:
		lo, hi = 30<<20, float64(w.Scale)
	}
	// Log-uniform between lo and hi.
	x := lo * math.Pow(hi/lo, w.Rng.Float64())
	n := int64(x)
	if w.Rng.IntN(4) == 0 {
		n = n &^ 511 // whole multiples of 512 are common in practice
	}
	return max(n, 1)
}

func (w *Workload) fail(op string, err error) {
	w.T.Helper()
	w.T.Fatalf("%s after %s: %v", w.Name, op, err)
}

// Step applies one random operation (an allocation, a free, a deferred
// free, record_stream, a stream synchronisation, empty_cache, a snapshot
// check, now and then a pool step) and names it for failure messages.
func (w *Workload) Step() string {
	a := w.A
	stack := snapshot.StackID(w.Rng.IntN(5))
	if w.Pools && w.Rng.IntN(100) < 3 {
		return w.poolStep()
	}
	switch r := w.Rng.IntN(100); {
	case r < 45 || len(w.Live) == 0:
		size := w.Size()
		stream := w.Streams[w.Rng.IntN(len(w.Streams))]
		addr, err := a.Malloc(size, stream, stack)
		var oom *allocator.OOMError
		switch {
		case errors.As(err, &oom):
			w.OOMs++
			if oom.Error() == "" || oom.AllocSize < size {
				w.fail("oom", fmt.Errorf("bad OOM error %+v", oom))
			}
		case err != nil:
			w.fail("malloc", err)
		default:
			if addr == 0 || slices.Contains(w.Live, addr) {
				w.fail("malloc", fmt.Errorf("address %#x handed out twice", addr))
			}
			w.Live = append(w.Live, addr)
		}
		return fmt.Sprintf("malloc(%d, s%d)", size, stream)
	case r < 80:
		j := w.Rng.IntN(len(w.Live))
		addr := w.Live[j]
		w.Live = slices.Delete(w.Live, j, j+1)
		if w.Rng.IntN(8) == 0 {
			if err := a.FreeDeferred(addr, stack); err != nil {
				w.fail("free deferred", err)
			}
			w.Pending = append(w.Pending, addr)
			return "free_deferred"
		}
		if err := a.Free(addr, stack); err != nil {
			w.fail("free", err)
		}
		return "free"
	case r < 88:
		addr := w.Live[w.Rng.IntN(len(w.Live))]
		if err := a.RecordStream(addr, w.Streams[w.Rng.IntN(len(w.Streams))]); err != nil {
			w.fail("record_stream", err)
		}
		return "record_stream"
	case r < 94:
		a.CompleteStreamEvents(w.Streams[w.Rng.IntN(len(w.Streams))])
		return "complete_events"
	case r < 96 && len(w.Pending) > 0:
		j := w.Rng.IntN(len(w.Pending))
		addr := w.Pending[j]
		w.Pending = slices.Delete(w.Pending, j, j+1)
		// The block may already have been completed by a synchronization.
		if a.PendingFree(addr) {
			if err := a.CompletePendingFree(addr, stack); err != nil {
				w.fail("complete pending", err)
			}
		}
		return "complete_pending"
	case r < 98:
		a.EmptyCache(stack)
		w.Pending = w.Pending[:0]
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
		if total != a.SimulatedStats().ReservedBytes[allocator.PoolAll].Current {
			w.fail("snapshot", fmt.Errorf("segments total %d, reserved %d", total, a.SimulatedStats().ReservedBytes[allocator.PoolAll].Current))
		}
		return "snapshot"
	}
}

// Case is one setting of the random workload: the allocator's
// configuration and release, the device, and what the workload may do.
type Case struct {
	Conf     string // PYTORCH_CUDA_ALLOC_CONF
	Version  allocator.Version
	Capacity int64   // device memory; 0: the allocator's default
	Fraction float64 // set_per_process_memory_fraction; 0: none
	Streams  []int64
	Scale    int64 // the largest request (Workload.Scale)
	Toggle   bool  // switch expandable segments on and off at runtime
	Pools    bool  // graph captures and MemPools (Workload.Pools)
}

// NewAllocator is an allocator with the case's settings and device
// memory (the memory fraction is the caller's to set: some tests leave it
// out).
func (c Case) NewAllocator(t testing.TB) *allocator.Allocator {
	t.Helper()
	cfg, err := allocator.ParseConfig(c.Conf, c.Version)
	if err != nil {
		t.Fatal(err)
	}
	a, err := allocator.New(cfg, allocator.Options{Capacity: c.Capacity})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// CommonCases are the settings that both the allocator's invariant tests
// and the replay's round trip run (each appends its own): one stream,
// three streams under a capacity, max_split_size, 2.6's
// max_non_split_rounding, and expandable segments with and without a
// capacity. The replay's tests name some of them by index.
func CommonCases() []Case {
	return []Case{
		{Conf: "", Version: allocator.Latest, Streams: []int64{0}, Scale: 200 << 20},
		{Conf: "", Version: allocator.Latest, Capacity: 1 << 30, Streams: []int64{0, 7, 9}, Scale: 300 << 20},
		{Conf: "max_split_size_mb:40", Version: allocator.Latest, Capacity: 2 << 30, Streams: []int64{0, 3}, Scale: 400 << 20},
		{Conf: "max_split_size_mb:64,max_non_split_rounding_mb:100", Version: allocator.V2_6, Capacity: 1 << 30, Streams: []int64{0}, Scale: 300 << 20},
		{Conf: "expandable_segments:True", Version: allocator.Latest, Streams: []int64{0, 5}, Scale: 200 << 20},
		{Conf: "expandable_segments:True", Version: allocator.Latest, Capacity: 600 << 20, Streams: []int64{0, 5}, Scale: 150 << 20},
	}
}
