package allocator

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRegionsGranules adds and removes regions at random (small ones that
// share granules, large ones, runs in rising and in falling address
// order, and one far away that turns the bitmap off) and checks after
// each change that the granule bitmap is the regions' (checkGranules) and
// that find answers as a binary search of the bounds at the regions'
// edges, inside, between and far from them.
func TestRegionsGranules(t *testing.T) {
	for _, far := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(7, 21))
		var rs regions
		var live []*region
		ref := func(addr uint64) *region {
			i, _ := slices.BinarySearchFunc(rs.list, addr, func(r *region, a uint64) int {
				if r.base <= a {
					return -1
				}
				return 1
			})
			if i > 0 && addr < rs.list[i-1].end() {
				return rs.list[i-1]
			}
			return nil
		}
		free := func(base uint64, size int64) bool {
			for _, r := range live {
				if base < r.end() && r.base < base+uint64(size) {
					return false
				}
			}
			return true
		}
		add := func(base uint64, size int64) {
			if free(base, size) {
				r := &region{base: base, size: size}
				rs.add(r)
				live = append(live, r)
			}
		}
		const at = 0x7f0000000000
		for step := range 600 {
			if far && step == 300 {
				add(1<<60, 2<<20) // 2^39 granules away: bitmap off
			}
			switch k := rng.IntN(12); {
			case k == 0:
				// A run going up, then one going down.
				b := at + rng.Uint64N(1<<12)<<21
				for i := range 20 {
					add(b+uint64(i)*(3<<20), 3<<20)
				}
				for i := range 20 {
					add(b-uint64(i+1)*(5<<20), 1<<20)
				}
			case k < 6 || len(live) == 0:
				// Sizes from 512 bytes (several in a granule) to 40 MiB.
				size := int64(512) << rng.IntN(17)
				add(at+rng.Uint64N(1<<24)*512*uint64(1+rng.IntN(64)), size)
			default:
				j := rng.IntN(len(live))
				rs.remove(live[j])
				live = slices.Delete(live, j, j+1)
			}
			if err := rs.checkGranules(); err != nil {
				t.Fatalf("far %v, step %d: %v", far, step, err)
			}
			probes := []uint64{0, 1, at - 1, 1 << 60, 1<<60 + 1<<20, ^uint64(0)}
			for range 40 {
				probes = append(probes, at+rng.Uint64N(1<<40))
			}
			for _, r := range rs.list {
				probes = append(probes, r.base-1, r.base, r.end()-1, r.end(), r.end()+1<<21)
			}
			for _, a := range probes {
				if got, want := rs.find(a), ref(a); got != want {
					t.Fatalf("far %v, step %d, %d regions: find(%#x) = %p, want %p", far, step, len(rs.list), a, got, want)
				}
			}
		}
		if len(rs.list) < 50 || rs.granOff != far {
			t.Fatalf("far %v: %d regions at the end, bitmap off %v", far, len(rs.list), rs.granOff)
		}
	}
}
