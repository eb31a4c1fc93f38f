package replay

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

// The random workload of the allocator's property tests
// (pkg/allocator/property_test.go), on the exported API: the replay tests
// record it and follow the recording.

// workload drives an allocator with random operations. Everything random
// comes from one seeded generator, so a failure is reproducible from the
// seed in its message.
type workload struct {
	t       *testing.T
	rng     *rand.Rand
	a       *allocator.Allocator
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
	w.memPool = a.Version().HasMemPool() && w.rng.IntN(2) == 0
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
		stream := w.streams[w.rng.IntN(len(w.streams))]
		if err := a.BeginAllocateToPool(id, allocator.PoolKindGraph, allocator.StreamFilter{Stream: stream}); err != nil {
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
		var oom *allocator.OOMError
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
		if a.PendingFree(addr) {
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
		if total != a.SimulatedStats().ReservedBytes[allocator.PoolAll].Current {
			w.fail("snapshot", fmt.Errorf("segments total %d, reserved %d", total, a.SimulatedStats().ReservedBytes[allocator.PoolAll].Current))
		}
		return "snapshot"
	}
}

type propCase struct {
	conf     string
	v        allocator.Version
	capacity int64
	fraction float64
	streams  []int64
	scale    int64
	toggle   bool // switch expandable segments on and off at runtime
	pools    bool // graph captures and MemPools (workload.poolStep)
}
