package allocator

import (
	"testing"
)

// Tests that pin a behaviour of one PyTorch release to the function of
// c10/cuda/CUDACachingAllocator.cpp (or its Python side) that has it; each
// names the release and the function. docs/versions.md has the table.

// TestGCAverageAgeIsFloatingPoint: garbage_collect_cached_blocks in every
// release from 2.0 (v2.0.0: `double total_age = 0.0; ... double
// age_threshold = total_age / freeable_block_count;`) to 2.6 and later
// (`size_t total_age`, then `static_cast<double>(total_age) /
// freeable_block_count`) averages the ages in floating point. Ages 2 and 1
// average 1.5, so only the older block is freed and the pass stops at its
// target; an integer average (1) would free both segments.
func TestGCAverageAgeIsFloatingPoint(t *testing.T) {
	for _, v := range []Version{V2_0, V2_1, V2_2, V2_3, V2_4, V2_6, Latest} {
		s := newSim(t, "garbage_collection_threshold:0.5", v, Options{Capacity: 1000 * mib})
		if err := s.SetMemoryFraction(0.5); err != nil { // allowed 500 MiB, GC above 250 MiB
			t.Fatal(err)
		}
		a := s.alloc(100*mib, s0)
		s.free(a)
		b := s.alloc(200*mib, s0)
		s.free(b) // ages at the next search: a 2, b 1
		before := len(s.Trace())
		s.alloc(250*mib, s0) // 300 MiB cached, target 50 MiB
		if got, want := traceString(s.Trace()[before:], base),
			"segment_free(+0,104857600) segment_alloc(+314572800,262144000) alloc(+314572800,262144000)"; got != want {
			t.Errorf("%s: trace after GC:\n got %s\nwant %s", v, got, want)
		}
		if st := s.Stats(); st.NumDeviceFree != 1 && v.hasDeviceCounters() {
			t.Errorf("%s: num_device_free %d, want 1", v, st.NumDeviceFree)
		}
	}
}
