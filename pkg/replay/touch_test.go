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
	type input struct {
		name string
		snap *snapshot.Snapshot
	}
	var inputs []input
	for ci, pc := range roundTripCases {
		s, _ := recordWorkload(t, pc, 2, 3000, 0)
		inputs = append(inputs, input{fmt.Sprintf("case %d", ci), s})
	}
	for _, fn := range realdata.FilesIfPresent() {
		s, err := snapshot.Load(fn)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, input{filepath.Base(fn), s})
	}
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
