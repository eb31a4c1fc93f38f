package analysis_test

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/memstat/memstat/internal/fixture"
	. "github.com/memstat/memstat/pkg/analysis"
)

// TestWantStartScan: a replay given the start rebuild's pass made while
// the file was read (Want.StartScan, what peak, oom, segments and report
// pass) gives the Result and the captured peak and oom states a replay
// without it gives, on the published snapshots and a recorded run.
func TestWantStartScan(t *testing.T) {
	taken := 0
	for _, f := range fixture.ScanCases(t) {
		s, scan := fixture.LoadScanned(t, f)
		for d := range s.Devices() {
			if s.Trace(d).Len() == 0 {
				continue
			}
			want := Want{PeakAllocated: true, OOMs: true, CompactFigures: true}
			plain, err := ReplayFor(s, d, want)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			want.StartScan = scan
			got, err := ReplayFor(s, d, want)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if !reflect.DeepEqual(got.Result, plain.Result) {
				t.Errorf("%s device %d: the result with the scan taken differs", filepath.Base(f), d)
			}
			idx := []int{plain.Result.PeakAllocated.Index, plain.Result.PeakReserved.Index}
			a, err := got.States(idx...)
			if err != nil {
				t.Fatal(err)
			}
			b, err := plain.States(idx...)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a, b) {
				t.Errorf("%s device %d: the peak states with the scan taken differ", filepath.Base(f), d)
			}
			taken++
		}
		scan.Stop()
	}
	if taken == 0 {
		t.Fatal("no device replayed")
	}
}
