package analysis

import (
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/snapshot"
)

// TestPeakTracksMatchBackwardReader: newPeakTracks, whose backward pass
// reads runs of entries decoded at once, marks the candidates of
// newPeakTracksRef, which read each entry with a Reader (the function as
// it was): random traces of every length around the run's (segments,
// allocations and frees of random sizes), and every published snapshot.
func TestPeakTracksMatchBackwardReader(t *testing.T) {
	actions := []snapshot.Action{snapshot.ActionAlloc, snapshot.ActionAlloc, snapshot.ActionFreeCompleted,
		snapshot.ActionFree, snapshot.ActionFreeRequested, snapshot.ActionSegmentAlloc, snapshot.ActionSegmentFree,
		snapshot.ActionSegmentMap, snapshot.ActionSegmentUnmap, snapshot.ActionOOM}
	rng := rand.New(rand.NewPCG(7, 9))
	var traces []*snapshot.Trace
	var names []string
	for _, n := range []int{1, 2, 63, 64, 65, peakTrackRun - 1, peakTrackRun, peakTrackRun + 1, 3*peakTrackRun + 17} {
		es := make([]snapshot.TraceEntry, n)
		for i := range es {
			es[i] = snapshot.TraceEntry{Action: actions[rng.IntN(len(actions))], Addr: uint64(1+rng.IntN(100)) << 9, Size: int64(1+rng.IntN(1<<22)) &^ 511}
		}
		traces = append(traces, snapshot.TraceOf(es...))
		names = append(names, "random")
	}
	for _, f := range realdata.FilesIfPresent() {
		s, err := snapshot.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		for d := range s.Devices() {
			if s.Trace(d).Len() > 0 {
				traces = append(traces, s.Trace(d))
				names = append(names, filepath.Base(f))
			}
		}
	}
	for k, tr := range traces {
		for _, on := range [][2]bool{{true, true}, {true, false}, {false, true}} {
			ga, gr := newPeakTracks(tr, on[0], on[1])
			wa, wr := newPeakTracksRef(tr, on[0], on[1])
			if !reflect.DeepEqual(ga.cand, wa.cand) || !reflect.DeepEqual(gr.cand, wr.cand) || ga.on != wa.on || gr.on != wr.on {
				t.Fatalf("%s (%d entries, tracks %v): the candidates differ from the reader's", names[k], tr.Len(), on)
			}
		}
	}
}

// newPeakTracksRef is newPeakTracks as it was, reading the backward pass
// entry by entry.
func newPeakTracksRef(trace *snapshot.Trace, onAlloc, onRes bool) (alloc, res peakTrack) {
	if !onAlloc && !onRes {
		return
	}
	var sumA, highA, sumR, highR int64
	for _, e := range trace.All() {
		sumA += allocDelta(&e)
		highA = max(highA, sumA)
		sumR += reserveDelta(&e)
		highR = max(highR, sumR)
	}
	// Entry i is a candidate when its sum is within the slack of the
	// highest sum at or after it (nothing later is clearly higher) and of
	// the highest of all.
	words := (trace.Len() + 63) / 64
	alloc = peakTrack{on: true, best: -1 << 62, at: -2, rises: allocRises, delta: allocDelta, cand: make([]uint64, words)}
	res = peakTrack{on: true, best: -1 << 62, at: -2, rises: reserveRises, delta: reserveDelta, cand: make([]uint64, words)}
	slA, slR := allocSlack(highA), reserveSlack(highR)
	afterA, afterR := int64(-1<<62), int64(-1<<62)
	// Backward: the reader decodes each block once and reads it from
	// its cache.
	rd := trace.Reader()
	for i := trace.Len() - 1; i >= 0; i-- {
		if sumA >= highA-slA && sumA >= afterA-slA {
			alloc.cand[i/64] |= 1 << (i % 64)
		}
		if sumR >= highR-slR && sumR >= afterR-slR {
			res.cand[i/64] |= 1 << (i % 64)
		}
		afterA, afterR = max(afterA, sumA), max(afterR, sumR)
		e := rd.At(i)
		sumA -= allocDelta(&e)
		sumR -= reserveDelta(&e)
	}
	if !onAlloc {
		alloc = peakTrack{}
	}
	if !onRes {
		res = peakTrack{}
	}
	return alloc, res
}
