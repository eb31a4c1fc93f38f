package check_test

import (
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/fixture"
)

// TestRuntimeSettings: on a recording whose block sizes depend on
// expandable_segments not being switched at runtime (split_setting.mem),
// rules on the figures that depend on it pass with the assumption noted;
// with --runtime-settings they gate on bounds that hold whatever was
// switched: a limit at or above the whole bound passes (the 20 MiB
// segment caps the block), one the at-peak figures may exceed fails, and
// a rule on a figure the switch cannot change (peak reserved) is
// unaffected.
func TestRuntimeSettings(t *testing.T) {
	fn, _ := fixture.RecordFile(t, "split_setting.mem", "split_setting.pickle")
	run := func(args ...string) (int, string) { t.Helper(); return checkRecording(t, fn, args...) }
	rules := []string{"--max", "peak_allocated=20MiB", "--max", "fragmentation=30%", "--max", "peak_reserved=20MiB"}
	code, out := run(rules...)
	if code != 0 || !strings.Contains(out, "note: the allocated and active bytes' peaks and totals") {
		t.Errorf("without --runtime-settings: exit %d, want 0 and the assumption:\n%s", code, out)
	}
	code, out = run(append([]string{"--runtime-settings"}, rules...)...)
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"peak_allocated <= 20.0 MiB 19.5 MiB-20.0 MiB 20.0 MiB ok", "fragmentation <= 30.0% 0.0%-100.0% 30.0% FAIL", "peak_reserved <= 20.0 MiB 20.0 MiB 20.0 MiB ok"} {
		if !strings.Contains(flat, want) {
			t.Errorf("--runtime-settings: no %q in\n%s", want, out)
		}
	}
	if code != 1 || strings.Contains(out, "note: the allocated") || !strings.Contains(out, "FAIL: 1 of 3 checks failed") {
		t.Errorf("--runtime-settings: exit %d, want 1 with 1 of 3 failed and no assumption:\n%s", code, out)
	}
}
