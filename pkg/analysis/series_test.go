package analysis

import (
	"math"
	"testing"
)

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
		var u unitSeries
		if name == "units" {
			u = newUnitSeries(len(vals))
		}
		var s stepSeries
		for _, v := range vals {
			u.add(v)
			s.add(v)
		}
		s.clip()
		if u.len() != len(vals) || s.len() != len(vals) {
			t.Fatalf("%s: lengths %d and %d, want %d", name, u.len(), s.len(), len(vals))
		}
		for i, v := range vals {
			if u.at(i) != v || s.at(i) != v {
				t.Errorf("%s: entry %d: units %d, steps %d, want %d", name, i, u.at(i), s.at(i), v)
			}
		}
		if wide := u.wide != nil; wide != (name != "units") {
			t.Errorf("%s: int64s kept: %v", name, wide)
		}
	}
	var s stepSeries
	for range 1000 {
		s.add(2 << 20)
	}
	s.add(4 << 20)
	if len(s.val) != 2 {
		t.Errorf("a series with one change keeps %d values", len(s.val))
	}
}
