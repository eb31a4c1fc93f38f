package replay

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// TestLiveRecordingWhatIf: what-if replays started from a live recording
// (LiveRecording: they run while the follow replay still runs, on other
// goroutines) give the results of what-if replays started from the
// finished follow replay's Recording, and the follow replay its own
// result, on recorded random workloads (empty_cache calls, private pools
// with and without pool_id, expandable segments) and every published
// snapshot. Run it with -race too.
func TestLiveRecordingWhatIf(t *testing.T) {
	type input struct {
		name string
		snap *snapshot.Snapshot
		v    allocator.Version
	}
	var inputs []input
	for ci, pc := range roundTripCases {
		s, _ := recordWorkload(t, pc, 1, 1500, 0)
		inputs = append(inputs, input{fmt.Sprintf("case %d", ci), s, pc.Version})
	}
	for _, fn := range realdata.Files(t) {
		s, err := snapshot.Load(fn)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, input{filepath.Base(fn), s, GuessVersion(s)})
	}
	compared, notes := 0, 0
	for _, in := range inputs {
		for d := range in.snap.Devices() {
			if in.snap.Trace(d).Len() == 0 && len(in.snap.DeviceSegments(d)) == 0 {
				continue
			}
			var settings []*allocator.Config
			settings = append(settings, nil)
			for _, conf := range []string{"max_split_size_mb:128", "expandable_segments:True"} {
				if cfg, err := allocator.ParseConfig(conf, in.v); err == nil && cfg.Validate() == nil {
					settings = append(settings, &cfg)
				}
			}
			whatIf := func(k int, cfg *allocator.Config, rec *Recording) Options {
				o := Options{Device: d, Version: in.v, Mode: WhatIf, Config: cfg, Recording: rec}
				if k == 0 {
					o.Capacity = 1 << 30
				}
				return o
			}
			// Sequential: the follow replay first, then the what-ifs.
			fo := Options{Device: d, Version: in.v, KeepStart: true}
			fr, err := New(in.snap, fo)
			if err != nil {
				t.Fatalf("%s: device %d: %v", in.name, d, err)
			}
			wantFollow, err := fr.Run()
			if err != nil {
				t.Fatal(err)
			}
			rec, err := fr.Recording()
			if err != nil {
				t.Fatal(err)
			}
			want := make([]*Result, len(settings))
			for k, cfg := range settings {
				want[k] = runResult(t, in.snap, whatIf(k, cfg, rec))
			}
			// Live: the follow replay on a goroutine, each what-if on
			// one of its own, all at once.
			fl, err := New(in.snap, fo)
			if err != nil {
				t.Fatal(err)
			}
			live, err := fl.LiveRecording()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fl.LiveRecording(); err == nil {
				t.Errorf("%s: device %d: a second live recording was taken", in.name, d)
			}
			// NewLive: the what-ifs start before the follow replay seeds.
			gotEarly := make([]*Result, len(settings))
			errsEarly := make([]error, len(settings))
			var early sync.WaitGroup
			fe, err := NewLive(in.snap, fo, func(live *Recording) {
				for k, cfg := range settings {
					early.Go(func() {
						r, err := New(in.snap, whatIf(k, cfg, live))
						if err == nil {
							gotEarly[k], err = r.Run()
						}
						errsEarly[k] = err
					})
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			gotFollowEarly, err := fe.Run()
			early.Wait()
			if err != nil {
				t.Fatalf("%s: device %d: NewLive: %v", in.name, d, err)
			}
			if !reflect.DeepEqual(gotFollowEarly, wantFollow) {
				t.Errorf("%s: device %d: the follow replay of NewLive\n%+v\nwant\n%+v", in.name, d, gotFollowEarly, wantFollow)
			}
			for k := range settings {
				if errsEarly[k] != nil {
					t.Fatalf("%s: device %d, setting %d: NewLive: %v", in.name, d, k, errsEarly[k])
				}
				if !reflect.DeepEqual(gotEarly[k], want[k]) {
					t.Errorf("%s: device %d, setting %d: from NewLive's recording\n%+v\nwant\n%+v", in.name, d, k, gotEarly[k], want[k])
				}
				if gotEarly[k].History.PreexistingSegments > 0 && gotEarly[k].History.PreexistingBytes == 0 {
					t.Errorf("%s: device %d, setting %d: NewLive: %d starting segments reserve nothing", in.name, d, k, gotEarly[k].History.PreexistingSegments)
				}
			}
			got := make([]*Result, len(settings))
			errs := make([]error, len(settings))
			var gotFollow *Result
			var followErr error
			var wg sync.WaitGroup
			wg.Go(func() {
				defer fl.EndLive()
				gotFollow, followErr = fl.Run()
			})
			for k, cfg := range settings {
				wg.Go(func() {
					r, err := New(in.snap, whatIf(k, cfg, live))
					if err == nil {
						got[k], err = r.Run()
					}
					errs[k] = err
				})
			}
			wg.Wait()
			if followErr != nil {
				t.Fatalf("%s: device %d: %v", in.name, d, followErr)
			}
			if !reflect.DeepEqual(gotFollow, wantFollow) {
				t.Errorf("%s: device %d: the follow replay with a live recording\n%+v\nwant\n%+v", in.name, d, gotFollow, wantFollow)
			}
			for k := range settings {
				if errs[k] != nil {
					t.Fatalf("%s: device %d, setting %d: %v", in.name, d, k, errs[k])
				}
				if !reflect.DeepEqual(got[k], want[k]) {
					t.Errorf("%s: device %d, setting %d: from the live recording\n%+v\nwant\n%+v", in.name, d, k, got[k], want[k])
				}
				compared++
			}
			notes += len(fl.live.log)
		}
	}
	// The findings that only the follow replay's steps make (empty_cache
	// calls, the pool of each call) went through the log.
	if notes == 0 {
		t.Error("no follow replay published a finding: the test does not exercise the log")
	}
	t.Logf("%d what-if replays compared; %d findings published", compared, notes)
}

// TestLiveRecordingStopped: a what-if replay of a live recording whose
// follow replay stops early (EndLive after a few steps) fails with an
// error instead of waiting; a live recording is taken before the first
// step, of a KeepStart follow replay only.
func TestLiveRecordingStopped(t *testing.T) {
	s, _ := recordWorkload(t, roundTripCases[1], 2, 1200, 0)
	fr, err := New(s, Options{KeepStart: true})
	if err != nil {
		t.Fatal(err)
	}
	live, err := fr.LiveRecording()
	if err != nil {
		t.Fatal(err)
	}
	if fr.Len() < 2*liveBatch {
		t.Fatalf("the workload recorded %d entries, want more than %d", fr.Len(), 2*liveBatch)
	}
	done := make(chan error, 1)
	go func() {
		r, err := New(s, Options{Mode: WhatIf, Recording: live})
		if err == nil {
			_, err = r.Run()
		}
		done <- err
	}()
	if err := fr.RunTo(liveBatch + 10); err != nil {
		t.Fatal(err)
	}
	fr.EndLive()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "stopped at entry") {
			t.Errorf("what-if replay of a stopped follow replay: %v, want an error saying where it stopped", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the what-if replay still waits a minute after the follow replay stopped")
	}
	if _, err := fr.LiveRecording(); err == nil {
		t.Error("a live recording was taken after the follow replay stepped")
	}
	other, err := New(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.LiveRecording(); err == nil {
		t.Error("a live recording was taken of a follow replay without KeepStart")
	}
	if _, err := NewLive(s, Options{}, func(*Recording) { t.Error("NewLive started what-ifs of a follow replay without KeepStart") }); err == nil {
		t.Error("NewLive made a follow replay without KeepStart")
	}
	// A NewLive follow replay that stops early: its what-if fails too.
	done = make(chan error, 1)
	fl, err := NewLive(s, Options{KeepStart: true}, func(live *Recording) {
		go func() {
			r, err := New(s, Options{Mode: WhatIf, Recording: live})
			if err == nil {
				_, err = r.Run()
			}
			done <- err
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := fl.RunTo(liveBatch + 10); err != nil {
		t.Fatal(err)
	}
	fl.EndLive()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "stopped at entry") {
			t.Errorf("what-if replay of a stopped NewLive follow replay: %v, want an error saying where it stopped", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the what-if replay still waits a minute after the NewLive follow replay stopped")
	}
}
