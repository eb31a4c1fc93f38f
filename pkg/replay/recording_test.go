package replay

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// TestRecordingStartsWhatIf: a what-if replay started from a follow
// replay's Recording (Options.Recording: the replay command, advise's
// candidates) gives the result a what-if replay that follows the
// recording itself gives, on every device of every published snapshot,
// under the recorded settings, other settings and a small device; and a
// recording of other options is refused.
func TestRecordingStartsWhatIf(t *testing.T) {
	compared := 0
	for _, fn := range realdata.Files(t) {
		snap, err := snapshot.Load(fn)
		if err != nil {
			t.Fatal(err)
		}
		v := GuessVersion(snap)
		for d := range snap.Devices() {
			if snap.Trace(d).Len() == 0 && len(snap.DeviceSegments(d)) == 0 {
				continue
			}
			fr, err := New(snap, Options{Device: d, Version: v, KeepStart: true})
			if err != nil {
				t.Fatalf("%s: device %d: %v", filepath.Base(fn), d, err)
			}
			if _, err := fr.Recording(); err == nil && fr.Trace().Len() > 0 {
				t.Errorf("%s: device %d: a recording before the follow replay ran", filepath.Base(fn), d)
			}
			recRes, err := fr.Run()
			if err != nil {
				t.Fatalf("%s: device %d: %v", filepath.Base(fn), d, err)
			}
			rec, err := fr.Recording()
			if err != nil {
				t.Fatal(err)
			}
			var settings []*allocator.Config
			settings = append(settings, nil)
			for _, conf := range []string{"max_split_size_mb:128", "expandable_segments:True"} {
				if cfg, err := allocator.ParseConfig(conf, v); err == nil && cfg.Validate() == nil {
					settings = append(settings, &cfg)
				}
			}
			for k, cfg := range settings {
				o := Options{Device: d, Version: v, Mode: WhatIf, Config: cfg}
				if k == 0 {
					o.Capacity = recRes.Stat("allocated_bytes.all.peak") / 2
				}
				want := runResult(t, snap, o)
				o.Recording = rec
				got := runResult(t, snap, o)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s: device %d, setting %d: from the recording\n%+v\nwant\n%+v", filepath.Base(fn), d, k, got, want)
				}
				compared++
			}
			o := Options{Device: d, Version: v, Mode: WhatIf, Recording: rec, TotalMemory: 1 << 40}
			if _, err := New(snap, o); err == nil {
				t.Errorf("%s: device %d: a recording of another total memory was taken", filepath.Base(fn), d)
			}
		}
	}
	t.Logf("%d what-if replays compared", compared)
}

// runResult replays snap with o to its end.
func runResult(t *testing.T, snap *snapshot.Snapshot, o Options) *Result {
	t.Helper()
	r, err := New(snap, o)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run()
	if err != nil {
		t.Fatal(err)
	}
	return res
}
