package replay

import (
	"reflect"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/snapshot"
)

// compareStates walks a large state in two halves at once; the halves must
// find exactly what one walk finds, in the same order. The real traces
// agree with their snapshots, so the snapshot side is perturbed to give
// differences in both halves: segments dropped, block sizes changed and a
// segment the replay lacks.
func TestCompareStatesHalvesAgree(t *testing.T) {
	defer func(n int) { splitCompareRegions = n }(splitCompareRegions)
	compared := 0
	for _, fn := range realdata.Files(t) {
		snap, err := snapshot.Load(fn)
		if err != nil {
			t.Fatal(err)
		}
		for d := range snap.Devices() {
			if snap.Trace(d).Len() == 0 {
				continue
			}
			r, err := New(snap, Options{Device: d})
			if err != nil {
				t.Fatal(err)
			}
			for r.Step() == nil {
			}
			if r.a.NumRegions() < 2 {
				continue
			}
			var final []*snapshot.Segment
			for i, s := range r.final {
				switch {
				case i%3 == 1:
					continue // not in the snapshot
				case i%4 == 0 && len(s.Blocks) > 0:
					c := *s
					c.Blocks = append([]snapshot.Block(nil), s.Blocks...)
					c.Blocks[0].Size += 512
					s = &c
				}
				final = append(final, s)
			}
			final = append(final, &snapshot.Segment{Address: 1 << 60, TotalSize: 2 << 20, Blocks: []snapshot.Block{{Address: 1 << 60, Size: 2 << 20}}})
			var one, halves Agreement
			splitCompareRegions = 1 << 30
			compareStates(r.a, final, r.start.exact, r.seeded, true, &one)
			splitCompareRegions = 2
			compareStates(r.a, final, r.start.exact, r.seeded, true, &halves)
			if !reflect.DeepEqual(one, halves) {
				t.Errorf("%s device %d: one walk %+v\nhalves %+v", fn, d, one, halves)
			}
			if one.MismatchCount == 0 {
				t.Errorf("%s device %d: the perturbed snapshot agrees with the replay", fn, d)
			}
			compared++
		}
	}
	if compared < 5 {
		t.Errorf("only %d traces compared", compared)
	}
}
