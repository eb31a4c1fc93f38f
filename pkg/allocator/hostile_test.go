package allocator

import "testing"

// A request larger than a whole expandable reservation (1 1/8 of the
// device memory) is an OOM, as PyTorch's map_block failing on it
// (try_allocate_expandable_block, c10/cuda/CUDACachingAllocator.cpp,
// v2.5.0), never a walk past the reservation's end (issue 18: a nil
// pointer in tryAllocateExpandable with a 91 GiB request on the 80 GiB
// default).
func TestExpandableRequestLargerThanReservation(t *testing.T) {
	for _, opts := range []Options{{}, {TotalMemory: 16 * GiB}} {
		s := newSim(t, "expandable_segments:True", Latest, opts)
		total := s.dev.totalMemory
		s.oom(total+total/8+LargeBuffer, s0)
		// The allocator still works after it.
		s.free(s.alloc(20*mib, s0))
	}
}
