package replay

import (
	"math/rand"
	"testing"
)

// TestSpansAgreeWithABitmap checks add, remove and missing against a
// bitmap of covered addresses over random operations.
func TestSpansAgreeWithABitmap(t *testing.T) {
	const size = 200
	r := rand.New(rand.NewSource(1))
	for round := range 200 {
		var s spans
		var covered [size]bool
		for op := range 60 {
			lo := uint64(r.Intn(size))
			hi := lo + uint64(r.Intn(size/4))
			hi = min(hi, size)
			if r.Intn(3) == 0 {
				s.remove(lo, hi)
				for a := lo; a < hi; a++ {
					covered[a] = false
				}
			} else {
				s.add(lo, hi)
				for a := lo; a < hi; a++ {
					covered[a] = true
				}
			}
			// The set is sorted, disjoint, and separated by gaps (touching
			// ranges merge).
			for i, x := range s {
				if x.lo >= x.hi || i > 0 && s[i-1].hi >= x.lo {
					t.Fatalf("round %d op %d: not sorted and disjoint: %v", round, op, s)
				}
			}
			var fromSpans [size]bool
			for _, x := range s {
				for a := x.lo; a < x.hi; a++ {
					fromSpans[a] = true
				}
			}
			if fromSpans != covered {
				t.Fatalf("round %d op %d: spans %v do not cover what was added", round, op, s)
			}
			qlo := uint64(r.Intn(size))
			qhi := min(qlo+uint64(r.Intn(size/2)), size)
			var want []span
			for a := qlo; a < qhi; a++ {
				if covered[a] {
					continue
				}
				if n := len(want); n > 0 && want[n-1].hi == a {
					want[n-1].hi++
				} else {
					want = append(want, span{a, a + 1})
				}
			}
			got := s.missing(qlo, qhi)
			if len(got) != len(want) {
				t.Fatalf("missing(%d, %d) of %v = %v, want %v", qlo, qhi, s, got, want)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("missing(%d, %d) of %v = %v, want %v", qlo, qhi, s, got, want)
				}
			}
		}
	}
}
