package allocator

import (
	"testing"

	"github.com/memstat/memstat/pkg/snapshot"
)

// TestAllocatedReservedIsStats: the two figures a replay's observers read
// after every call are Stats' own, with and without segments kept outside
// the simulation.
func TestAllocatedReservedIsStats(t *testing.T) {
	a, err := New(DefaultConfig(V2_5), Options{Capacity: 1 << 34})
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		st := a.Stats()
		al, re := a.AllocatedReserved()
		if al != st.AllocatedBytes[PoolAll] || re != st.ReservedBytes[PoolAll] || a.NumOOMs() != st.NumOOMs {
			t.Errorf("%s: AllocatedReserved %+v %+v, Stats %+v %+v", when, al, re, st.AllocatedBytes[PoolAll], st.ReservedBytes[PoolAll])
		}
	}
	check("empty")
	var addr uint64
	addr, err = a.Malloc(3<<20, 0, snapshot.NoStack)
	if err != nil {
		t.Fatal(err)
	}
	check("one block")
	a.AddUnmodelled(snapshot.Segment{Address: 1 << 40, TotalSize: 20 << 20, Blocks: []snapshot.Block{{Address: 1 << 40, Size: 20 << 20, State: snapshot.ActiveAllocated}}})
	check("a segment kept outside")
	a.Free(addr, snapshot.NoStack)
	check("freed")
	if _, err := a.Malloc(1<<40, 0, snapshot.NoStack); err == nil {
		t.Fatal("a request over the capacity succeeded")
	}
	check("an oom")
	if a.NumOOMs() != 1 {
		t.Errorf("NumOOMs %d after one oom", a.NumOOMs())
	}
}
