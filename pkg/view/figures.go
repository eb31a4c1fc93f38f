package view

import (
	"math"
	"slices"
)

// figures is one byte count per trace entry (allocated or reserved
// memory after it), kept in the largest unit up to 512 bytes that divides
// every value, as a uint32 when every value fits: PyTorch rounds blocks to
// 512 bytes and segments to 2 MiB (round_size, get_allocation_size in
// c10/cuda/CUDACachingAllocator.cpp), so a trace's figures are multiples of
// 512 and take 4 bytes an entry instead of 8, exactly. A series with a
// negative value or one past 2^32 units (2 TiB) keeps its int64s.
type figures struct {
	units []uint32
	shift uint8
	wide  []int64
}

// maxShift is the largest unit, 512 bytes.
const maxShift = 9

func newFigures(v []int64) figures {
	var bits, hi int64
	for _, x := range v {
		if x < 0 {
			return figures{wide: v}
		}
		bits |= x
		hi = max(hi, x)
	}
	shift := 0
	for shift < maxShift && bits&(1<<shift) == 0 {
		shift++
	}
	if hi>>shift > math.MaxUint32 {
		return figures{wide: v}
	}
	u := make([]uint32, len(v))
	for i, x := range v {
		u[i] = uint32(x >> shift)
	}
	return figures{units: u, shift: uint8(shift)}
}

// newFiguresCap is an empty series for appending n values (add).
func newFiguresCap(n int) figures {
	return figures{units: make([]uint32, 0, n), shift: maxShift}
}

// add appends v: in 512-byte units while every value fits, as int64s
// from the first that does not (the values so far converted, exactly).
func (f *figures) add(v int64) {
	if f.units != nil {
		if v >= 0 && v&(1<<maxShift-1) == 0 && v>>maxShift <= math.MaxUint32 {
			f.units = append(f.units, uint32(v>>maxShift))
			return
		}
		f.wide = make([]int64, len(f.units), cap(f.units))
		for i, u := range f.units {
			f.wide[i] = int64(u) << f.shift
		}
		f.units = nil
	}
	f.wide = append(f.wide, v)
}

func (f *figures) len() int {
	if f.units == nil {
		return len(f.wide)
	}
	return len(f.units)
}

func (f *figures) at(i int) int64 {
	if f.units == nil {
		return f.wide[i]
	}
	return int64(f.units[i]) << f.shift
}

// column scans entries lo..hi of allocated memory a: the first entry
// where it is highest and its lowest value. It is generic over the two
// representations so that the loop of the whole-trace window, millions of
// entries, reads the array directly.
func column[A uint32 | int64](a []A, lo, hi int) (best int, amin A) {
	best, amin = lo, a[lo]
	top := a[lo]
	for i := lo + 1; i <= hi; i++ {
		v := a[i]
		if v > top {
			best, top = i, v
		}
		amin = min(amin, v)
	}
	return best, amin
}

// columnOf is column on the model's figures, in bytes.
func columnOf(a *figures, lo, hi int) (best int, amin int64) {
	if a.units != nil {
		b, x := column(a.units, lo, hi)
		return b, int64(x) << a.shift
	}
	return column(a.wide, lo, hi)
}

// steps is a series that changes at few entries, kept as its changes:
// reserved memory changes only at a segment event (cudaMalloc, cudaFree,
// a map or unmap of expandable segments), so a trace of millions of
// entries has thousands of changes, 12 bytes each, where figures would
// take 4 bytes an entry. Every value is kept exactly.
type steps struct {
	start []int32 // the entry each value starts at; start[0] is 0
	val   []int64
	n     int // entries
}

// add appends the value after the next entry.
func (s *steps) add(v int64) {
	if s.n == 0 || s.val[len(s.val)-1] != v {
		s.start = append(s.start, int32(s.n))
		s.val = append(s.val, v)
	}
	s.n++
}

// clip lets go of the room append left: the series is complete.
func (s *steps) clip() {
	s.start, s.val = slices.Clone(s.start), slices.Clone(s.val)
}

func newSteps(v []int64) steps {
	var s steps
	for _, x := range v {
		s.add(x)
	}
	s.clip()
	return s
}

func (s *steps) len() int { return s.n }

// index is the change in force after entry i.
func (s *steps) index(i int) int {
	k, _ := slices.BinarySearch(s.start, int32(i+1))
	return k - 1
}

func (s *steps) at(i int) int64 { return s.val[s.index(i)] }

// maxOver is the highest value after entries lo..hi.
func (s *steps) maxOver(lo, hi int) int64 {
	k := s.index(lo)
	v := s.val[k]
	for k++; k < len(s.start) && int(s.start[k]) <= hi; k++ {
		v = max(v, s.val[k])
	}
	return v
}
