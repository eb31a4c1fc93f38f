package replay

import (
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/internal/testsnap"
	"github.com/memstat/memstat/pkg/snapshot"
)

// TestTallyAheadSameResult: a follow replay's result is the same whether
// Run counted the trace's tally on another goroutine while it stepped
// (startTally) or Result counted it itself, with and without
// RuntimeSettings (the tally's rounding), on recorded random workloads
// (whole, and cut by a ring buffer so that entries go unapplied), a run
// with a free no replay can apply, and every published snapshot. Run it
// with -race too.
func TestTallyAheadSameResult(t *testing.T) {
	defer func(n int) { tallyAheadEntries = n }(tallyAheadEntries)
	tallyAheadEntries = 0
	type input struct {
		name string
		snap *snapshot.Snapshot
	}
	inputs := []input{{"unapplied free", testsnap.UnappliedFree(t)}}
	for ci, pc := range roundTripCases {
		for _, maxEntries := range []int{0, 300} {
			s, _ := recordWorkload(t, pc, 3, 1200, maxEntries)
			inputs = append(inputs, input{fmt.Sprintf("case %d, max entries %d", ci, maxEntries), s})
		}
	}
	for _, fn := range realdata.Files(t) {
		s, err := snapshot.Load(fn)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, input{filepath.Base(fn), s})
	}
	compared, unapplied := 0, 0
	for _, in := range inputs {
		for d := range in.snap.Devices() {
			if in.snap.Trace(d).Len() == 0 {
				continue
			}
			for _, rs := range []bool{false, true} {
				o := Options{Device: d, RuntimeSettings: rs}
				r, err := New(in.snap, o)
				if err != nil {
					t.Fatalf("%s: device %d: %v", in.name, d, err)
				}
				r.startTally()
				if r.tallyAhead == nil {
					t.Fatalf("%s: device %d: no tally goroutine started", in.name, d)
				}
				got, err := r.Run()
				if err != nil {
					t.Fatalf("%s: device %d: %v", in.name, d, err)
				}
				if r.tally == nil {
					t.Fatalf("%s: device %d: Result did not take a tally", in.name, d)
				}
				r2, err := New(in.snap, o)
				if err != nil {
					t.Fatal(err)
				}
				want := r2.Result()
				if r2.tallyAhead != nil {
					t.Fatalf("%s: device %d: Result alone started a tally goroutine", in.name, d)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s: device %d, runtime settings %v: the result with the tally counted ahead differs:\n%+v\nwant\n%+v", in.name, d, rs, got, want)
				}
				compared++
				if got.Fidelity != nil && got.Fidelity.Unapplied > 0 {
					unapplied++
				}
			}
		}
	}
	if compared < 10 || unapplied == 0 {
		t.Fatalf("compared %d results, %d of them with unapplied entries", compared, unapplied)
	}
	t.Logf("compared %d results (%d with unapplied entries)", compared, unapplied)
}
