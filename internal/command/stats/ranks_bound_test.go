package stats

import (
	"strings"
	"testing"

	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/report"
)

// TestRanksLabelBoundedPeaks: a rank whose peaks are bounds (a replay
// that could not apply some entries) shows them as bounds, and a line says
// the spread takes the replay's figures within them.
func TestRanksLabelBoundedPeaks(t *testing.T) {
	exact := &replay.Result{PeakAllocated: replay.PeakAt{Bytes: 3 << 30}, PeakReserved: replay.PeakAt{Bytes: 4 << 30}}
	bounded := &replay.Result{PeakAllocated: replay.PeakAt{Bytes: 5 << 30}, PeakReserved: replay.PeakAt{Bytes: 6 << 30},
		Bounds: map[string]replay.Bound{"allocated_bytes.all.peak": {Min: 1 << 30}, "reserved_bytes.all.peak": {Min: 2 << 30}}}
	rs := rankSummary([]fileStats{{File: "a.pickle", Devices: []*replay.Result{exact}}, {File: "b.pickle", Devices: []*replay.Result{bounded}}})
	var b strings.Builder
	if err := writeRanks(&b, rs, report.Text); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{">= 1.0 GiB", ">= 2.0 GiB", "3.0 GiB", "peaks of b.pickle are bounds"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "a.pickle are bounds") || strings.Contains(out, "a.pickle, b.pickle are") {
		t.Errorf("the exact rank is named among the bounded:\n%s", out)
	}
}
