package series

import (
	"math"
	"slices"
	"testing"
)

// TestBytes: a series is kept in the largest unit that divides every value
// while every value fits, and reads back exactly either way.
func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		v     []int64
		units bool
		shift uint8
	}{
		{"blocks", []int64{0, 512, 2 << 20, 20 << 20, 1 << 40}, true, 9},
		{"odd sizes", []int64{0, 512, 700, 1 << 30}, true, 2},
		{"a byte", []int64{1, 2, 3}, true, 0},
		{"zeros", []int64{0, 0}, true, 9},
		{"2 TiB", []int64{512, 1 << 41}, false, 0},
		{"just under 2 TiB", []int64{512, 1<<41 - 512}, true, 9},
		{"negative", []int64{512, -512}, false, 0},
	} {
		f := NewBytes(tc.v)
		if (f.units != nil) != tc.units || f.shift != tc.shift || f.Len() != len(tc.v) {
			t.Errorf("%s: units %v shift %d len %d, want units %v shift %d", tc.name, f.units != nil, f.shift, f.Len(), tc.units, tc.shift)
		}
		// Appended one by one: 512-byte units until a value does not
		// fit, int64s from then on.
		g := NewBytesCap(1)
		for _, x := range tc.v {
			g.Add(x)
		}
		if wantUnits := tc.units && tc.shift == MaxShift; (g.units != nil) != wantUnits || g.Len() != len(tc.v) {
			t.Errorf("%s appended: units %v len %d, want units %v", tc.name, g.units != nil, g.Len(), wantUnits)
		}
		for i, x := range tc.v {
			if f.At(i) != x || g.At(i) != x {
				t.Errorf("%s: entry %d reads %d (appended %d), want %d", tc.name, i, f.At(i), g.At(i), x)
			}
		}
	}
}

// TestSteps: the reserved series kept as its changes reads back every
// value, and the highest over any range, as the plain series does.
func TestSteps(t *testing.T) {
	v := []int64{0, 0, 2 << 20, 2 << 20, 2 << 20, 22 << 20, 20 << 20, 20 << 20, -1, 0, 0, 1 << 41}
	s := NewSteps(v)
	if s.Len() != len(v) || s.Changes() != 7 {
		t.Fatalf("len %d with %d changes, want %d with 7", s.Len(), s.Changes(), len(v))
	}
	for i, x := range v {
		if s.At(i) != x {
			t.Errorf("entry %d reads %d, want %d", i, s.At(i), x)
		}
		for j := i; j < len(v); j++ {
			if got, want := s.MaxOver(i, j), slices.Max(v[i:j+1]); got != want {
				t.Errorf("max over %d..%d: %d, want %d", i, j, got, want)
			}
		}
	}
}

// TestSeriesExact: the compact series give back every value exactly,
// in 512-byte units while they fit and as int64s from the first that
// does not (negative, not a multiple of 512, past 2 TiB).
func TestSeriesExact(t *testing.T) {
	cases := map[string][]int64{
		"units":        {0, 512, 1 << 20, 3 << 30, 512, 0},
		"odd":          {512, 1024, 1000, 2048},
		"negative":     {512, -512, 1024},
		"past 2 TiB":   {512, (math.MaxUint32 + 1) << 9, 1024},
		"first is odd": {7, 512},
	}
	for name, vals := range cases {
		var u Bytes
		if name == "units" {
			u = NewBytesCap(len(vals))
		}
		var s Steps
		for _, v := range vals {
			u.Add(v)
			s.Add(v)
		}
		s.Clip()
		if u.Len() != len(vals) || s.Len() != len(vals) {
			t.Fatalf("%s: lengths %d and %d, want %d", name, u.Len(), s.Len(), len(vals))
		}
		for i, v := range vals {
			if u.At(i) != v || s.At(i) != v {
				t.Errorf("%s: entry %d: units %d, steps %d, want %d", name, i, u.At(i), s.At(i), v)
			}
		}
		if wide := u.Wide() != nil; wide != (name != "units") {
			t.Errorf("%s: int64s kept: %v", name, wide)
		}
	}
	var s Steps
	for range 1000 {
		s.Add(2 << 20)
	}
	s.Add(4 << 20)
	if s.Changes() != 2 {
		t.Errorf("a series with one change keeps %d values", s.Changes())
	}
}
