package view

import "math"

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

// column scans entries lo..hi of allocated memory a and reserved memory
// r: the first entry where a is highest, the lowest a and the highest r.
// It is generic over the two representations so that the loop of the
// whole-trace window, millions of entries, reads the arrays directly.
func column[A, R uint32 | int64](a []A, r []R, lo, hi int) (best int, amin A, rmax R) {
	best, amin, rmax = lo, a[lo], r[lo]
	top := a[lo]
	for i := lo + 1; i <= hi; i++ {
		v := a[i]
		if v > top {
			best, top = i, v
		}
		amin = min(amin, v)
		rmax = max(rmax, r[i])
	}
	return best, amin, rmax
}

// columnOf is column on the model's figures, in bytes.
func columnOf(a, r *figures, lo, hi int) (best int, amin, rmax int64) {
	switch {
	case a.units != nil && r.units != nil:
		b, x, y := column(a.units, r.units, lo, hi)
		return b, int64(x) << a.shift, int64(y) << r.shift
	case a.units != nil:
		b, x, y := column(a.units, r.wide, lo, hi)
		return b, int64(x) << a.shift, y
	case r.units != nil:
		b, x, y := column(a.wide, r.units, lo, hi)
		return b, x, int64(y) << r.shift
	}
	return column(a.wide, r.wide, lo, hi)
}
