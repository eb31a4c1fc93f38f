package live_test

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/live"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/snapshot"
)

// TestAtScanned: the state at the peak and at the end with the start
// rebuild's pass made while the file was read (what pprof passes) is the
// state At gives without it, on the published snapshots and a recorded
// run.
func TestAtScanned(t *testing.T) {
	files := realdata.FilesIfPresent()
	if len(files) == 0 {
		t.Log("no published snapshots (../shared/testdata/real): checking a recorded run only")
	}
	oom, _ := fixture.Record(t, "oom.pickle")
	compared := 0
	for _, f := range append(files, oom) {
		for _, m := range []live.Moment{{Kind: live.Peak}, {Kind: live.End}} {
			scan := replay.NewStartScan()
			s, err := snapshot.LoadWith(f, snapshot.LoadOptions{TraceGrown: scan.Grown})
			if err != nil {
				scan.Stop()
				t.Fatalf("%s: %v", f, err)
			}
			for d := range s.Devices() {
				if s.Trace(d).Len() == 0 {
					continue
				}
				plain, err := live.At(s, d, m)
				if err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				got, err := live.AtScanned(s, d, m, scan)
				if err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				if !reflect.DeepEqual(got, plain) {
					t.Errorf("%s device %d, moment %v: the state with the scan taken differs", filepath.Base(f), d, m.Kind)
				}
				compared++
			}
			scan.Stop()
		}
	}
	if compared == 0 {
		t.Fatal("no device replayed")
	}
}
