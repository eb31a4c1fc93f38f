package check_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/testsnap"
	"github.com/memstat/memstat/pkg/snapshot"
)

// unappliedFree writes a snapshot whose trace frees an address nothing
// holds, an entry no replay can apply: a 30 MiB and a 10 MiB tensor, the
// first freed, and between them a free of 0x1234. The replay cannot vouch
// for the state in between, so the peaks and totals are bounds: the
// allocated peak is at least the 10 MiB live at the end (it was 40 MiB),
// the allocations at least the trace's 2, the reserved peak at least the
// 40 MiB of the two segments still cached at the end; the current figures
// are the final segments'.
func unappliedFree(t *testing.T) string {
	t.Helper()
	s := testsnap.UnappliedFree(t)
	fn := filepath.Join(t.TempDir(), "unapplied.pickle")
	if err := snapshot.WriteFile(fn, s); err != nil {
		t.Fatal(err)
	}
	return fn
}

// TestUnappliedEntriesGateOnBounds: stats --json carries the figures the
// unapplied entries could have changed under bounds, and check does not
// pass a rule on one whose bound has no upper end, however high the limit.
func TestUnappliedEntriesGateOnBounds(t *testing.T) {
	fn := unappliedFree(t)
	code, out, errOut := memstat(t, nil, "stats", fn, "--json")
	if code != 0 {
		t.Fatalf("stats: exit %d, stderr %q", code, errOut)
	}
	var js struct {
		Results []struct {
			Devices []struct {
				MemoryStats map[string]int64 `json:"memory_stats"`
				Bounds      map[string]struct {
					Min int64  `json:"min"`
					Max *int64 `json:"max"`
				} `json:"bounds"`
			} `json:"devices"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil {
		t.Fatal(err)
	}
	if len(js.Results) != 1 || len(js.Results[0].Devices) != 1 {
		t.Fatalf("not one file with one device:\n%s", out)
	}
	d := js.Results[0].Devices[0]
	for key, want := range map[string]int64{"allocated_bytes.all.peak": 10 << 20, "allocation.all.allocated": 2, "reserved_bytes.all.peak": 40 << 20} {
		b, ok := d.Bounds[key]
		if !ok || b.Min != want || b.Max != nil {
			t.Errorf("%s: bound %+v (%v), want >= %d, no upper end", key, b, ok, want)
		}
		if _, ok := d.MemoryStats[key]; ok {
			t.Errorf("%s is both exact and bounded", key)
		}
	}
	// The truth lies inside: 40 MiB were allocated at once.
	if b := d.Bounds["allocated_bytes.all.peak"]; b.Min > 40<<20 {
		t.Errorf("allocated_bytes.all.peak's bound >= %d misses the 40 MiB the run held", b.Min)
	}
	if got := d.MemoryStats["allocated_bytes.all.current"]; got != 10<<20 {
		t.Errorf("allocated_bytes.all.current %d, want the final segments' 10 MiB", got)
	}

	code, out, errOut = memstat(t, nil, "stats", fn)
	if code != 0 || !strings.Contains(out, "figures are bounds, not exact figures: 2 recorded entries of the trace could not be applied") || !strings.Contains(out, "allocated_bytes.all.peak >= 10.0 MiB") {
		t.Errorf("stats: exit %d, stderr %q; no note on the bounded peak:\n%s", code, errOut, out)
	}

	code, out, errOut = memstat(t, nil, "replay", fn)
	if code != 0 || !strings.Contains(out, ">= 40.0 MiB") || !strings.Contains(out, "2 entries not applied") {
		t.Errorf("replay: exit %d, stderr %q; the recorded peak reserved is not a bound:\n%s", code, errOut, out)
	}

	for _, rule := range []string{"peak_allocated=1TiB", "peak_reserved=1TiB", "segments=1000", "fragmentation=99%"} {
		code, out, errOut = memstat(t, nil, "check", fn, "--max", rule)
		if code != command.ExitCheckFailed || !strings.Contains(out, "FAIL") {
			t.Errorf("check --max %s on a figure the replay could not compute: exit %d, stderr %q\n%s", rule, code, errOut, out)
		}
	}
	// An exact figure still gates.
	if code, out, errOut = memstat(t, nil, "check", fn, "--max", "current_allocated=1GiB"); code != 0 {
		t.Errorf("check --max current_allocated=1GiB: exit %d, stderr %q\n%s", code, errOut, out)
	}
}

// TestUnappliedEntriesDiffAsBounds: diff claims no change on a figure one
// side could not compute, and its --json carries that side's bound.
func TestUnappliedEntriesDiffAsBounds(t *testing.T) {
	fn, clean := unappliedFree(t), boundedRetries(t)
	code, out, errOut := memstat(t, nil, "diff", clean, fn)
	if code != 0 {
		t.Fatalf("diff: exit %d, stderr %q\n%s", code, errOut, out)
	}
	var row string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "allocated_bytes.all.peak") {
			row = l
		}
	}
	if !strings.Contains(row, ">= 10.0 MiB") || !strings.Contains(row, "bound") {
		t.Errorf("diff's allocated_bytes.all.peak row %q does not show the bound:\n%s", row, out)
	}
	code, out, errOut = memstat(t, nil, "diff", clean, fn, "--json")
	if code != 0 || !strings.Contains(out, `"bound_after": {`) {
		t.Errorf("diff --json: exit %d, stderr %q; no bound of allocated_bytes.all.peak:\n%s", code, errOut, out)
	}
}
