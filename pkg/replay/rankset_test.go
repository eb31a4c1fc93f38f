package replay

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRankSetMatchesSortedSlice holds rankSet to the sorted slice it
// replaced (slices.Insert/Delete/BinarySearch, duplicates kept) along
// random adds, removes and queries, over universes from 1 to 300,000
// addresses (three levels of bitmaps).
func TestRankSetMatchesSortedSlice(t *testing.T) {
	for _, n := range []int{1, 2, 63, 64, 65, 4097, 300_000} {
		rng := rand.New(rand.NewPCG(uint64(n), 7))
		universe := make([]uint64, n)
		for i := range universe {
			universe[i] = uint64(rng.IntN(4*n+1)) * 512
		}
		s := newRankSet(universe)
		var model []uint64
		ops := min(20*n, 200_000)
		for range ops {
			a := universe[rng.IntN(n)]
			switch rng.IntN(4) {
			case 0, 1:
				i, _ := slices.BinarySearch(model, a)
				model = slices.Insert(model, i, a)
				s.add(a)
			case 2:
				if i, ok := slices.BinarySearch(model, a); ok {
					model = slices.Delete(model, i, i+1)
				}
				s.remove(a)
			}
			q := uint64(rng.IntN(4*n+3)) * 256 // on and off the universe
			if rng.IntN(2) == 0 {
				q = a
			}
			k, _ := slices.BinarySearch(model, q+1)
			got, ok := s.after(q)
			if want := k < len(model); ok != want || ok && got != model[k] {
				t.Fatalf("n=%d after(%d) = %d,%v; want %v", n, q, got, ok, want)
			}
			k, _ = slices.BinarySearch(model, q)
			got, ok = s.before(q)
			if want := k > 0; ok != want || ok && got != model[k-1] {
				t.Fatalf("n=%d before(%d) = %d,%v; want %v", n, q, got, ok, want)
			}
		}
	}
}
