// Package series keeps one byte count per trace entry (allocated or
// reserved memory after it) compactly and exactly: the analysis' replay
// and the view's model both hold millions of them.
package series

import (
	"math"
	"slices"
)

// Bytes is one byte count per trace entry, kept in the largest unit up to
// 512 bytes that divides every value, as a uint32 when every value fits:
// PyTorch rounds blocks to 512 bytes and segments to 2 MiB (round_size,
// get_allocation_size in c10/cuda/CUDACachingAllocator.cpp), so a trace's
// figures are multiples of 512 and take 4 bytes an entry instead of 8,
// exactly. A series with a negative value or one past 2^32 units (2 TiB)
// keeps its int64s. The zero Bytes keeps int64s.
type Bytes struct {
	units []uint32
	shift uint8
	wide  []int64
}

// MaxShift is the largest unit, 512 bytes.
const MaxShift = 9

// NewBytes is v kept compactly, in the largest unit that divides every
// value.
func NewBytes(v []int64) Bytes {
	var bits, hi int64
	for _, x := range v {
		if x < 0 {
			return Bytes{wide: v}
		}
		bits |= x
		hi = max(hi, x)
	}
	shift := 0
	for shift < MaxShift && bits&(1<<shift) == 0 {
		shift++
	}
	if hi>>shift > math.MaxUint32 {
		return Bytes{wide: v}
	}
	u := make([]uint32, len(v))
	for i, x := range v {
		u[i] = uint32(x >> shift)
	}
	return Bytes{units: u, shift: uint8(shift)}
}

// NewBytesCap is an empty series for appending n values (Add), in
// 512-byte units.
func NewBytesCap(n int) Bytes {
	return Bytes{units: make([]uint32, 0, n), shift: MaxShift}
}

// Add appends v: in units while every value fits, as int64s from the
// first that does not (the values so far converted, exactly).
func (f *Bytes) Add(v int64) {
	if f.units != nil {
		if v >= 0 && v&(1<<f.shift-1) == 0 && v>>f.shift <= math.MaxUint32 {
			f.units = append(f.units, uint32(v>>f.shift))
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

// Len is the number of values.
func (f *Bytes) Len() int {
	if f.units == nil {
		return len(f.wide)
	}
	return len(f.units)
}

// At is value i.
func (f *Bytes) At(i int) int64 {
	if f.units == nil {
		return f.wide[i]
	}
	return int64(f.units[i]) << f.shift
}

// Units is the values in units of 1<<shift bytes; nil when they are kept
// as int64s (Wide). For loops over millions of entries that read the
// array directly.
func (f *Bytes) Units() (units []uint32, shift uint8) { return f.units, f.shift }

// Wide is the values as int64s; nil when they are kept in units.
func (f *Bytes) Wide() []int64 {
	if f.units != nil {
		return nil
	}
	return f.wide
}

// Steps is a series that changes at few entries, kept as its changes:
// reserved memory changes only at a segment event (cudaMalloc, cudaFree,
// a map or unmap of expandable segments), so a trace of millions of
// entries has thousands of changes, 12 bytes each, where Bytes would take
// 4 bytes an entry. Every value is kept exactly, however often it changes.
type Steps struct {
	start []int32 // the entry each value starts at; start[0] is 0
	val   []int64
	n     int // entries
}

// NewSteps is v kept as its changes.
func NewSteps(v []int64) Steps {
	var s Steps
	for _, x := range v {
		s.Add(x)
	}
	s.Clip()
	return s
}

// Add appends the value after the next entry.
func (s *Steps) Add(v int64) {
	if s.n == 0 || s.val[len(s.val)-1] != v {
		s.start = append(s.start, int32(s.n))
		s.val = append(s.val, v)
	}
	s.n++
}

// Clip lets go of the room append left: the series is complete.
func (s *Steps) Clip() {
	s.start, s.val = slices.Clone(s.start), slices.Clone(s.val)
}

// Len is the number of entries.
func (s *Steps) Len() int { return s.n }

// Changes is the number of values kept.
func (s *Steps) Changes() int { return len(s.start) }

// index is the change in force after entry i.
func (s *Steps) index(i int) int {
	k, _ := slices.BinarySearch(s.start, int32(i+1))
	return k - 1
}

// At is the value after entry i.
func (s *Steps) At(i int) int64 { return s.val[s.index(i)] }

// MaxOver is the highest value after entries lo..hi.
func (s *Steps) MaxOver(lo, hi int) int64 {
	k := s.index(lo)
	v := s.val[k]
	for k++; k < len(s.start) && int(s.start[k]) <= hi; k++ {
		v = max(v, s.val[k])
	}
	return v
}
