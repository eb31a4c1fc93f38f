package allocator

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestBTreeAgainstSortedSlice drives the B-tree and a sorted slice with the
// same random inserts, deletes and queries; any structural bug shows up as a
// different answer or a failed invariant check.
func TestBTreeAgainstSortedSlice(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4} {
		rng := rand.New(rand.NewPCG(seed, 99))
		var tr btree
		var ref []freeKey
		cmp := func(a, b freeKey) int {
			if a.less(b) {
				return -1
			}
			if b.less(a) {
				return 1
			}
			return 0
		}
		randKey := func() freeKey {
			// Few streams (including a "negative" one, which must sort as a
			// large unsigned value) and few sizes make ties likely.
			streams := []int64{0, 7, -3}
			return freeKey{
				stream: streams[rng.IntN(len(streams))],
				size:   int64(rng.IntN(40)) * 512,
				addr:   uint64(rng.IntN(4000)) * 512,
			}
		}
		for op := 0; op < 20000; op++ {
			k := randKey()
			i, found := slices.BinarySearchFunc(ref, k, cmp)
			switch r := rng.IntN(10); {
			case r < 5:
				if !found {
					tr.insert(freeItem{k: k})
					ref = slices.Insert(ref, i, k)
				}
			case r < 8:
				if got := tr.remove(k); got != found {
					t.Fatalf("seed %d op %d: remove(%v)=%v, want %v", seed, op, k, got, found)
				}
				if found {
					ref = slices.Delete(ref, i, i+1)
				}
			default:
				// Remove an existing key, to keep deletions frequent.
				if len(ref) > 0 {
					j := rng.IntN(len(ref))
					if !tr.remove(ref[j]) {
						t.Fatalf("seed %d op %d: existing key not removed", seed, op)
					}
					ref = slices.Delete(ref, j, j+1)
				}
			}
			if tr.len() != len(ref) {
				t.Fatalf("seed %d op %d: len %d, want %d", seed, op, tr.len(), len(ref))
			}
			q := randKey()
			j, qfound := slices.BinarySearchFunc(ref, q, cmp)
			lb, ok := tr.lowerBound(q)
			if ok != (j < len(ref)) || (ok && lb.k != ref[j]) {
				t.Fatalf("seed %d op %d: lowerBound(%v)=%v,%v want index %d of %d", seed, op, q, lb.k, ok, j, len(ref))
			}
			aj := j
			if qfound {
				aj++
			}
			af, ok := tr.after(q)
			if ok != (aj < len(ref)) || (ok && af.k != ref[aj]) {
				t.Fatalf("seed %d op %d: after(%v) wrong", seed, op, q)
			}
			bf, ok := tr.before(q)
			if ok != (j > 0) || (ok && bf.k != ref[j-1]) {
				t.Fatalf("seed %d op %d: before(%v) wrong", seed, op, q)
			}
			mn, ok := tr.min()
			if ok != (len(ref) > 0) || (ok && mn.k != ref[0]) {
				t.Fatalf("seed %d op %d: min wrong", seed, op)
			}
			if op%97 == 0 {
				if err := tr.check(); err != nil {
					t.Fatalf("seed %d op %d: %v", seed, op, err)
				}
				var walked []freeKey
				tr.ascend(func(it freeItem) bool { walked = append(walked, it.k); return true })
				if !slices.Equal(walked, ref) {
					t.Fatalf("seed %d op %d: ascend order differs", seed, op)
				}
			}
		}
		// Drain completely: the root must collapse back to an empty leaf.
		for len(ref) > 0 {
			if !tr.remove(ref[0]) {
				t.Fatal("drain failed")
			}
			ref = ref[1:]
		}
		if err := tr.check(); err != nil || tr.len() != 0 {
			t.Fatalf("after drain: %v len=%d", err, tr.len())
		}
	}
}
