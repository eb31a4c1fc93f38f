package replay

import (
	"math/bits"
	"slices"
)

// rankSet is a multiset of addresses drawn from a universe known in
// advance (every address that will ever be added), with insert, delete
// and strict successor/predecessor queries in a few word operations
// each. runtimeBounds keeps the live large blocks in one: a sorted slice
// with slices.Insert/Delete cost a memmove of the whole slice per entry,
// quadratic on a trace with hundreds of thousands of live blocks.
type rankSet struct {
	universe []uint64   // sorted, distinct
	count    []int32    // multiplicity per rank
	levels   [][]uint64 // levels[0]: a bit per rank; levels[i+1]: a bit per non-zero word of levels[i]
}

func newRankSet(addrs []uint64) *rankSet {
	u := slices.Clone(addrs)
	slices.Sort(u)
	u = slices.Compact(u)
	s := &rankSet{universe: u, count: make([]int32, len(u))}
	n := len(u)
	for {
		words := (n + 63) / 64
		s.levels = append(s.levels, make([]uint64, max(words, 1)))
		if words <= 1 {
			break
		}
		n = words
	}
	return s
}

// rank is the index of a in the universe (a must be in it).
func (s *rankSet) rank(a uint64) (int, bool) { return slices.BinarySearch(s.universe, a) }

func (s *rankSet) add(a uint64) {
	r, ok := s.rank(a)
	if !ok {
		panic("rankSet: address outside the universe")
	}
	s.count[r]++
	if s.count[r] > 1 {
		return
	}
	for _, l := range s.levels {
		w := r / 64
		was := l[w]
		l[w] |= 1 << (r % 64)
		if was != 0 {
			return
		}
		r = w
	}
}

// remove takes one a out; absent addresses are ignored.
func (s *rankSet) remove(a uint64) {
	r, ok := s.rank(a)
	if !ok || s.count[r] == 0 {
		return
	}
	s.count[r]--
	if s.count[r] > 0 {
		return
	}
	for _, l := range s.levels {
		w := r / 64
		l[w] &^= 1 << (r % 64)
		if l[w] != 0 {
			return
		}
		r = w
	}
}

// next is the smallest member of rank r or more (-1: none).
func (s *rankSet) next(r int) int {
	for lv := 0; lv < len(s.levels); lv++ {
		l := s.levels[lv]
		w := r / 64
		if w >= len(l) {
			return -1
		}
		if m := l[w] >> (r % 64) << (r % 64); m != 0 {
			r = w*64 + bits.TrailingZeros64(m)
			// Descend: the lowest set bit of each word below.
			for lv--; lv >= 0; lv-- {
				r = r*64 + bits.TrailingZeros64(s.levels[lv][r])
			}
			return r
		}
		r = w + 1
	}
	return -1
}

// prev is the largest member of rank r or less (-1: none).
func (s *rankSet) prev(r int) int {
	if r < 0 {
		return -1
	}
	for lv := 0; lv < len(s.levels); lv++ {
		l := s.levels[lv]
		w := r / 64
		if w >= len(l) {
			w, r = len(l)-1, len(l)*64-1
		}
		sh := 63 - r%64
		if m := l[w] << sh >> sh; m != 0 {
			r = w*64 + 63 - bits.LeadingZeros64(m)
			for lv--; lv >= 0; lv-- {
				r = r*64 + 63 - bits.LeadingZeros64(s.levels[lv][r])
			}
			return r
		}
		if w == 0 {
			return -1
		}
		r = w - 1
	}
	return -1
}

// after is the smallest member greater than a.
func (s *rankSet) after(a uint64) (uint64, bool) {
	r, ok := s.rank(a)
	if ok {
		r++
	}
	if k := s.next(r); k >= 0 {
		return s.universe[k], true
	}
	return 0, false
}

// before is the largest member less than a.
func (s *rankSet) before(a uint64) (uint64, bool) {
	r, _ := s.rank(a)
	if k := s.prev(r - 1); k >= 0 {
		return s.universe[k], true
	}
	return 0, false
}
