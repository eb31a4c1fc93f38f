package replay

import (
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/snapshot"
)

// TestTouchAheadChangesNothing: a what-if replay that reads ahead the
// memory of its coming frees (touchAhead) gives the result of one that
// does not, on recorded random workloads (empty_cache calls, private
// pools, expandable segments) and every published snapshot; and it did
// read ahead (found something in the tables ahead on some of them).
func TestTouchAheadChangesNothing(t *testing.T) {
	inputs := touchInputs(t)
	defer func() { touchAheadOn = true }()
	read := 0
	for _, in := range inputs {
		for d := range in.snap.Devices() {
			tr := in.snap.Trace(d)
			if tr.Len() == 0 {
				continue
			}
			fr, err := New(in.snap, Options{Device: d, KeepStart: true})
			if err != nil {
				t.Fatalf("%s: device %d: %v", in.name, d, err)
			}
			if _, err := fr.Run(); err != nil {
				t.Fatal(err)
			}
			rec, err := fr.Recording()
			if err != nil {
				t.Fatal(err)
			}
			run := func(on bool) (*Result, *Replay) {
				touchAheadOn = on
				r, err := New(in.snap, Options{Device: d, Mode: WhatIf, Recording: rec})
				if err != nil {
					t.Fatalf("%s: device %d: %v", in.name, d, err)
				}
				res, err := r.Run()
				if err != nil {
					t.Fatalf("%s: device %d: %v", in.name, d, err)
				}
				return res, r
			}
			want, _ := run(false)
			got, r := run(true)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: device %d: the what-if replay reading ahead gives %+v, without %+v", in.name, d, got, want)
			}
			if tr.Len() > touchLead+touchBatch && r.ahead == 0 {
				t.Errorf("%s: device %d: %d entries, and the replay never read ahead", in.name, d, tr.Len())
			}
			if r.touched != 0 {
				read++
			}
		}
	}
	if read == 0 {
		t.Fatal("no replay found anything reading ahead")
	}
}

// TestTouchSegmentChangesNothing: a follow replay whose reconcile reads
// each final segment's blocks ahead of looking them up (touchSegment)
// gives the result and final state of one that does not, on recorded
// random workloads and every published snapshot, with the lookups on two
// cores (lookupFinal) and without, the final segments as recorded and
// with every third dropped (reconcile then changes the state and looks
// blocks up itself); and it did read ahead.
func TestTouchSegmentChangesNothing(t *testing.T) {
	defer func(n, m int) { splitReconcileBlocks, splitReconcileRegions = n, m }(splitReconcileBlocks, splitReconcileRegions)
	defer func() { touchAheadOn = true }()
	inputs := touchInputs(t)
	dropThird := func(final []*snapshot.Segment) []*snapshot.Segment {
		var out []*snapshot.Segment
		for i, s := range final {
			if i%3 != 1 {
				out = append(out, s)
			}
		}
		return out
	}
	read := 0
	for _, in := range inputs {
		for d := range in.snap.Devices() {
			if in.snap.Trace(d).Len() == 0 {
				continue
			}
			for _, split := range []int{1 << 30, 2} {
				for _, drop := range []bool{false, true} {
					run := func(on bool) (*Result, []string, *Replay) {
						touchAheadOn = on
						splitReconcileBlocks, splitReconcileRegions = split, split
						r, err := New(in.snap, Options{Device: d})
						if err != nil {
							t.Fatalf("%s: device %d: %v", in.name, d, err)
						}
						for r.Step() == nil {
						}
						if drop {
							r.final = dropThird(r.final)
						}
						res := r.Result()
						var segs []string
						r.a.EachSegment(nil, func(s *snapshot.Segment) { segs = append(segs, fmt.Sprint(*s)) })
						segs = append(segs, fmt.Sprint(r.a.Unmodelled()))
						return res, segs, r
					}
					want, wantSegs := func() (*Result, []string) { res, segs, _ := run(false); return res, segs }()
					got, gotSegs, r := run(true)
					if !reflect.DeepEqual(got, want) {
						t.Errorf("%s: device %d (split %d, dropped %v): reading ahead gives %+v, without %+v", in.name, d, split, drop, got, want)
					}
					if !reflect.DeepEqual(gotSegs, wantSegs) {
						t.Errorf("%s: device %d (split %d, dropped %v): reading ahead leaves segments\n%v\nwithout\n%v", in.name, d, split, drop, gotSegs, wantSegs)
					}
					if r.touched != 0 {
						read++
					}
				}
			}
		}
	}
	if read == 0 {
		t.Fatal("no reconcile found anything reading ahead")
	}
}

// touchInput is one snapshot the read-ahead tests replay both ways.
type touchInput struct {
	name string
	snap *snapshot.Snapshot
}

// touchInputs records a random workload for each round-trip case (empty_cache
// calls, private pools, expandable segments) and loads every published
// snapshot present.
func touchInputs(t *testing.T) []touchInput {
	t.Helper()
	var inputs []touchInput
	for ci, pc := range roundTripCases {
		s, _ := recordWorkload(t, pc, 2, 3000, 0)
		inputs = append(inputs, touchInput{fmt.Sprintf("case %d", ci), s})
	}
	for _, fn := range realdata.FilesIfPresent() {
		s, err := snapshot.Load(fn)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, touchInput{filepath.Base(fn), s})
	}
	return inputs
}
