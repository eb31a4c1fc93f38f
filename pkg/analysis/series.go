package analysis

import (
	"math"
	"slices"
)

// unitSeries is allocated memory after each trace entry, kept in 512-byte
// units as a uint32 while every value fits: PyTorch rounds every block
// to a multiple of 512 bytes (round_size in
// c10/cuda/CUDACachingAllocator.cpp), so allocated memory is a multiple of
// 512 and takes 4 bytes an entry instead of 8, exactly. From the first
// value that is not (negative, not a multiple, past 2 TiB) the series
// keeps int64s, the values before converted exactly.
type unitSeries struct {
	units []uint32
	wide  []int64
}

const seriesShift = 9 // 512-byte units

func newUnitSeries(n int) unitSeries { return unitSeries{units: make([]uint32, 0, n)} }

// add appends v.
func (s *unitSeries) add(v int64) {
	if s.wide == nil {
		if v >= 0 && v&(1<<seriesShift-1) == 0 && v>>seriesShift <= math.MaxUint32 {
			s.units = append(s.units, uint32(v>>seriesShift))
			return
		}
		s.wide = make([]int64, len(s.units), cap(s.units))
		for i, u := range s.units {
			s.wide[i] = int64(u) << seriesShift
		}
		s.units = nil
	}
	s.wide = append(s.wide, v)
}

func (s *unitSeries) len() int {
	if s.wide != nil {
		return len(s.wide)
	}
	return len(s.units)
}

func (s *unitSeries) at(i int) int64 {
	if s.wide != nil {
		return s.wide[i]
	}
	return int64(s.units[i]) << seriesShift
}

// stepSeries is reserved memory after each trace entry, kept as its
// changes: reserved memory changes only at segment events (cudaMalloc,
// cudaFree, a map or unmap of expandable segments), so a trace of
// millions of entries has thousands of changes, 12 bytes each. Every
// value is kept exactly, however often it changes.
type stepSeries struct {
	start []int32 // the entry each value starts at
	val   []int64
	n     int
}

// add appends the value after the next entry.
func (s *stepSeries) add(v int64) {
	if s.n == 0 || s.val[len(s.val)-1] != v {
		s.start = append(s.start, int32(s.n))
		s.val = append(s.val, v)
	}
	s.n++
}

// clip lets go of the room append left once the series is complete.
func (s *stepSeries) clip() {
	s.start, s.val = slices.Clone(s.start), slices.Clone(s.val)
}

func (s *stepSeries) len() int { return s.n }

func (s *stepSeries) at(i int) int64 {
	k, _ := slices.BinarySearch(s.start, int32(i+1))
	return s.val[k-1]
}
