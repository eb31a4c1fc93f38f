package live_test

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/pkg/live"
)

// TestAtScanned: the state at the peak and at the end with the start
// rebuild's pass made while the file was read (what pprof passes) is the
// state At gives without it, on the published snapshots and a recorded
// run.
func TestAtScanned(t *testing.T) {
	compared := 0
	for _, f := range fixture.ScanCases(t) {
		for _, m := range []live.Moment{{Kind: live.Peak}, {Kind: live.End}} {
			s, scan := fixture.LoadScanned(t, f)
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
