package analysis

import (
	"slices"
	"testing"

	"github.com/memstat/memstat/pkg/snapshot"
)

// TestFinalBlocks: the final snapshot's active blocks in address order,
// whatever the segments' order, each with the last alloc entry at its
// address (-1 where the trace allocated none); inactive blocks left out;
// of two blocks at one address the later listed kept, as the map by
// address it replaces kept it.
func TestFinalBlocks(t *testing.T) {
	segs := []*snapshot.Segment{
		{Address: 0x2000, Blocks: []snapshot.Block{
			{Address: 0x2000, Size: 512, State: snapshot.ActiveAllocated, Stack: 3},
			{Address: 0x2200, Size: 512, State: snapshot.Inactive, Stack: 4},
			{Address: 0x2400, Size: 1024, State: snapshot.ActivePendingFree, Stack: 5},
		}},
		{Address: 0x1000, Blocks: []snapshot.Block{
			{Address: 0x1000, Size: 2048, State: snapshot.ActiveAllocated, Stack: 1},
		}},
		// Overlaps the first segment (a malformed snapshot).
		{Address: 0x2000, Blocks: []snapshot.Block{
			{Address: 0x2000, Size: 4096, State: snapshot.ActiveAllocated, Stack: 9},
		}},
	}
	h := &allocHistory{}
	for a, i := range map[uint64]int32{0x1000: 7, 0x2400: 11, 0x2200: 2, 0x9000: 1} {
		h.last.swap(a, i)
	}
	got := finalBlocks(segs, h)
	want := []finalBlock{
		{addr: 0x1000, size: 2048, stack: 1, last: 7},
		{addr: 0x2000, size: 4096, stack: 9, last: -1},
		{addr: 0x2400, size: 1024, stack: 5, last: 11},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("finalBlocks = %+v, want %+v", got, want)
	}
	rp := &Replayed{final: got}
	for _, w := range want {
		if fb, ok := rp.finalAt(w.addr); !ok || fb != w {
			t.Errorf("finalAt(%#x) = %+v, %v; want %+v", w.addr, fb, ok, w)
		}
	}
	for _, a := range []uint64{0, 0x2200, 0x2401, 0x9000} {
		if fb, ok := rp.finalAt(a); ok {
			t.Errorf("finalAt(%#x) = %+v, want none (no active block there)", a, fb)
		}
	}
}
