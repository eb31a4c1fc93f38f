package allocator

import (
	"math/rand/v2"
	"testing"

	"github.com/memstat/memstat/pkg/snapshot"
)

// benchOp is one precomputed operation: a Malloc of size into slot, or a
// Free of the address held in slot.
type benchOp struct {
	malloc bool
	slot   int32
	size   int64
	stream int64
}

// mixedWorkload precomputes a training-like operation sequence: tensor
// sizes drawn from a fixed set (activations, weights, gradients, small
// scalars), a live set that grows and shrinks around a few hundred
// tensors, frees in random order, two streams. The sequence ends with
// every tensor freed, so it can be replayed in a loop.
func mixedWorkload(n int) []benchOp {
	rng := rand.New(rand.NewPCG(42, 7))
	sizes := []int64{
		4, 512, 2048, 4096, 65536, 262144, 786432, 1048576, // small pool
		1572864, 2359296, 4194304, 6291456, 8388608, 9437184, // 20 MiB segments
		12582912, 16777216, 25165824, 33554432, 50331648, 67108864, 134217728, // rounded segments
	}
	weights := []int{4, 6, 6, 6, 5, 5, 4, 4, 6, 6, 6, 5, 5, 4, 4, 4, 3, 3, 2, 2, 1}
	total := 0
	for _, w := range weights {
		total += w
	}
	pick := func() int64 {
		r := rng.IntN(total)
		for i, w := range weights {
			if r < w {
				// Odd sizes exercise rounding and splitting.
				return sizes[i] + int64(rng.IntN(4))*256
			}
			r -= w
		}
		return sizes[0]
	}
	var ops []benchOp
	var live []int32
	free := []int32{}
	next := int32(0)
	target := 300
	for len(ops) < n {
		if len(live) < target && (rng.IntN(2) == 0 || len(live) < target/3) {
			var slot int32
			if len(free) > 0 {
				slot, free = free[len(free)-1], free[:len(free)-1]
			} else {
				slot, next = next, next+1
			}
			ops = append(ops, benchOp{malloc: true, slot: slot, size: pick(), stream: int64(rng.IntN(8) / 7)})
			live = append(live, slot)
		} else {
			j := rng.IntN(len(live))
			ops = append(ops, benchOp{slot: live[j]})
			free = append(free, live[j])
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
		}
		if rng.IntN(2000) == 0 {
			target = 100 + rng.IntN(500)
		}
	}
	for _, s := range live {
		ops = append(ops, benchOp{slot: s})
	}
	return ops
}

func runMixed(b *testing.B, conf string) {
	ops := mixedWorkload(1 << 16)
	slots := make([]uint64, len(ops))
	cfg, err := ParseConfig(conf, Latest)
	if err != nil {
		b.Fatal(err)
	}
	a, err := New(cfg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		op := &ops[i%len(ops)]
		if op.malloc {
			addr, err := a.Malloc(op.size, op.stream, 0)
			if err != nil {
				b.Fatal(err)
			}
			slots[op.slot] = addr
		} else if err := a.Free(slots[op.slot], 0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkMixed measures Malloc/Free operations per second on the mixed
// workload with the default configuration.
func BenchmarkMixed(b *testing.B) { runMixed(b, "") }

// BenchmarkMixedExpandable is the same workload with expandable segments.
func BenchmarkMixedExpandable(b *testing.B) { runMixed(b, "expandable_segments:True") }

// BenchmarkMixedMaxSplit is the same workload with max_split_size_mb.
func BenchmarkMixedMaxSplit(b *testing.B) { runMixed(b, "max_split_size_mb:64") }

// BenchmarkClone measures Clone (the replay's what-if copy) of a state of
// 100,000 blocks, half of them free: 4 KiB tensors fill small-pool
// segments, every other one is freed.
func BenchmarkClone(b *testing.B) {
	a, err := New(DefaultConfig(Latest), Options{})
	if err != nil {
		b.Fatal(err)
	}
	addrs := make([]uint64, 100_000)
	for i := range addrs {
		if addrs[i], err = a.Malloc(4096, int64(i%2), 0); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < len(addrs); i += 2 {
		if err := a.Free(addrs[i], 0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		a.Clone()
	}
}

// BenchmarkSeedSegment seeds one segment of 20,000 blocks, every other
// one allocated (the start state of a snapshot with a large expandable
// or long-lived segment).
func BenchmarkSeedSegment(b *testing.B) {
	const n, size = 20_000, 2 << 20
	seg := snapshot.Segment{Address: DefaultBaseAddress, TotalSize: n * size, Pool: snapshot.LargePool}
	for i := range n {
		st := snapshot.Inactive
		if i%2 == 0 {
			st = snapshot.ActiveAllocated
		}
		seg.Blocks = append(seg.Blocks, snapshot.Block{Address: seg.Address + uint64(i*size), Size: size, RequestedSize: size - 512, State: st})
	}
	b.ReportAllocs()
	for range b.N {
		a, err := New(DefaultConfig(Latest), Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := a.SeedSegment(seg); err != nil {
			b.Fatal(err)
		}
	}
}
