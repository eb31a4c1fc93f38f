package replay

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// toggledByPass is expandableToggled as it was before it read the
// trace's action counts: one pass over every entry. The oracle of
// TestExpandableToggledCounts.
func toggledByPass(r *Replay) (toggled, first bool) {
	if !r.cfg.Version.HasExpandableSegments() || r.pools.any {
		return false, false
	}
	sawAlloc, sawMap, seen := false, false, false
	for _, e := range r.trace.All() {
		switch e.Action {
		case snapshot.ActionSegmentAlloc:
			sawAlloc = true
		case snapshot.ActionSegmentMap:
			sawMap = true
		default:
			continue
		}
		if !seen {
			seen, first = true, e.Action == snapshot.ActionSegmentMap
		}
	}
	for _, s := range r.final {
		if s.Expandable {
			sawMap = true
		} else {
			sawAlloc = true
		}
	}
	if !seen {
		first = r.cfg.ExpandableSegments
	}
	exp := r.cfg.ExpandableSegments
	return sawAlloc && sawMap || sawAlloc && exp || sawMap && !exp, first
}

// TestExpandableToggledCounts: what expandableToggled says (from the
// trace's counts and a walk to its first new segment) is what a pass over
// every entry says, for random traces of every mix of segment actions,
// final segments of either kind, both settings, and the published
// snapshots' traces.
func TestExpandableToggledCounts(t *testing.T) {
	check := func(name string, r *Replay) {
		t.Helper()
		gotT, gotF := r.expandableToggled()
		wantT, wantF := toggledByPass(r)
		if gotT != wantT || gotF != wantF {
			t.Errorf("%s: expandableToggled = %v, %v; a pass over every entry says %v, %v", name, gotT, gotF, wantT, wantF)
		}
	}
	actions := []snapshot.Action{snapshot.ActionAlloc, snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted,
		snapshot.ActionSegmentAlloc, snapshot.ActionSegmentMap, snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap}
	rng := rand.New(rand.NewPCG(16, 10))
	for i := range 400 {
		var entries []snapshot.TraceEntry
		// Each trace draws from a few of the actions, so that traces
		// with no segment_alloc, no segment_map, neither or both occur.
		var pick []snapshot.Action
		for _, a := range actions {
			if rng.IntN(2) == 0 {
				pick = append(pick, a)
			}
		}
		if len(pick) > 0 {
			for range rng.IntN(600) {
				entries = append(entries, snapshot.TraceEntry{Action: pick[rng.IntN(len(pick))], Addr: uint64(rng.IntN(1 << 20))})
			}
		}
		var final []*snapshot.Segment
		for range rng.IntN(3) {
			final = append(final, &snapshot.Segment{Expandable: rng.IntN(2) == 0})
		}
		for _, exp := range []bool{false, true} {
			r := &Replay{trace: snapshot.TraceOf(entries...), final: final,
				cfg: allocator.Config{Version: allocator.V2_1, ExpandableSegments: exp}}
			check(fmt.Sprintf("random trace %d (expandable %v)", i, exp), r)
		}
	}
	for _, p := range realdata.FilesOrNote(t, "TestExpandableToggledCounts checks random traces only") {
		s, err := snapshot.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		for d := range s.Traces {
			for _, exp := range []bool{false, true} {
				r := &Replay{trace: s.Trace(d), final: s.DeviceSegments(d),
					cfg: allocator.Config{Version: allocator.V2_1, ExpandableSegments: exp}}
				check(fmt.Sprintf("%s device %d (expandable %v)", p, d, exp), r)
			}
		}
	}
}
