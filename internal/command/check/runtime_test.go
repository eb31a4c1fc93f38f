package check_test

import (
	"strings"
	"testing"
	"time"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/root"
	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/internal/iostreams"
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
	run := func(args ...string) (int, string) {
		t.Helper()
		ios, _, out, errOut := iostreams.Test()
		f := &command.Factory{IO: ios, Getenv: func(string) string { return "" }, Now: func() time.Time { return time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC) }}
		code := root.Main(f, append([]string{"check"}, append(args, fn)...))
		if errOut.Len() > 0 {
			t.Errorf("%v: stderr %s", args, errOut)
		}
		return code, out.String()
	}
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
