package allocator_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/memstat/memstat/internal/randworkload"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// TestLocateAndAllocatedAtAgreeWithBlockAt checks Locate and AllocatedAt,
// which look at the regions before the address table, against BlockAt
// (and HoldAt against PendingFree and Allocated)
// along the random workloads: at every block's start, inside it, at its
// last byte, and around every segment (below its base, at its end, far
// outside), after every few operations.
func TestLocateAndAllocatedAtAgreeWithBlockAt(t *testing.T) {
	ops := 600
	if testing.Short() {
		ops = 200
	}
	checked := 0
	for ci, pc := range propCases {
		name := fmt.Sprintf("%d-%s-%q", ci, pc.Version, pc.Conf)
		a := pc.NewAllocator(t)
		w := &randworkload.Workload{T: t, Rng: rand.New(rand.NewPCG(7, uint64(ci))), A: a, Name: name,
			Scale: pc.Scale, Streams: pc.Streams}
		for i := range ops {
			op := w.Step()
			if i%7 != 0 {
				continue
			}
			var probes []uint64
			a.Blocks(func(b allocator.BlockInfo) bool {
				probes = append(probes, b.Address, b.Address+uint64(b.Size)/2, b.Address+uint64(b.Size)-1)
				if b.Offset == 0 {
					probes = append(probes, b.RegionAddress-1, b.RegionAddress-512)
				}
				return true
			})
			for _, s := range a.Segments() {
				probes = append(probes, s.Address+uint64(s.TotalSize), s.Address+uint64(s.TotalSize)+1<<30)
			}
			probes = append(probes, 0, 1<<63)
			for _, p := range probes {
				b, ok := a.BlockAt(p)
				seg, off, lok := a.Locate(p)
				if lok != ok || ok && (seg != b.RegionAddress || off != b.Offset) {
					t.Fatalf("%s, op %d (%s): Locate(%#x) = %#x, %d, %v; BlockAt: %#x, %d, %v", name, i, op, p, seg, off, lok, b.RegionAddress, b.Offset, ok)
				}
				want := ok && b.Address == p && b.State == snapshot.ActiveAllocated
				got, gok := a.AllocatedAt(p)
				if gok != want || want && got != b {
					t.Fatalf("%s, op %d (%s): AllocatedAt(%#x) = %+v, %v; BlockAt: %+v, %v", name, i, op, p, got, gok, b, ok)
				}
				hold := allocator.HoldNone
				switch {
				case a.PendingFree(p):
					hold = allocator.HoldPending
				case a.Allocated(p):
					hold = allocator.HoldAllocated
				}
				if h := a.HoldAt(p); h != hold {
					t.Fatalf("%s, op %d (%s): HoldAt(%#x) = %d; PendingFree, Allocated: %v, %v", name, i, op, p, h, a.PendingFree(p), a.Allocated(p))
				}
				checked++
			}
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d addresses checked", checked)
	}
}
