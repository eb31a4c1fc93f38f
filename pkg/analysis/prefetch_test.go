package analysis

import (
	"reflect"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/snapshot"
)

// TestPrefetch: states captured ahead in one replay are the states a
// replay of their own gives, and asking again returns them without
// another replay (the same objects).
func TestPrefetch(t *testing.T) {
	s, err := snapshot.Load(realdata.File(t, "Nesta-gitU"))
	if err != nil {
		t.Fatal(err)
	}
	rp, err := Replay(s, 0)
	if err != nil {
		t.Fatal(err)
	}
	idx := []int{rp.Result.PeakAllocated.Index, 1117, -1, rp.Trace().Len() - 1}
	want, err := rp.States(idx...)
	if err != nil {
		t.Fatal(err)
	}
	if err := rp.Prefetch(idx...); err != nil {
		t.Fatal(err)
	}
	got, err := rp.States(idx[1], idx[0])
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got[0], want[1]) || !reflect.DeepEqual(got[1], want[0]) {
		t.Errorf("prefetched states differ from a replay's")
	}
	again, _ := rp.States(idx[1])
	if again[0] != got[0] {
		t.Errorf("a prefetched state was captured again")
	}
	// An entry not prefetched still gets its replay.
	other, err := rp.States(5)
	if err != nil || other[0].Index != 5 {
		t.Errorf("state after entry 5: %v, %v", other, err)
	}
}
