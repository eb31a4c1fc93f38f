package check_test

import (
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/fixture"
)

// TestCaptures: an oom during a capture that a 2.8 recording does not
// tie to a pool (capture_oom.mem; the truth is no retry): a rule on
// alloc_retries passes on the exact count with the assumption noted, and
// with --captures gates on the bound 0-1, so a limit under its upper end
// fails.
func TestCaptures(t *testing.T) {
	fn, _ := fixture.RecordFile(t, "capture_oom.mem", "capture_oom.pickle", "--device-memory", "1GiB", "--torch-version", "2.8")
	run := func(args ...string) (int, string) { t.Helper(); return checkRecording(t, fn, args...) }
	const note = "note: num_alloc_retries and num_sync_all_streams count a retry for every oom entry"
	code, out := run("--max", "alloc_retries=1")
	if code != 0 || !strings.Contains(out, note) {
		t.Errorf("without --captures: exit %d, want 0 and the assumption:\n%s", code, out)
	}
	code, out = run("--captures", "--max", "alloc_retries=0")
	if code != 1 || strings.Contains(out, note) || !strings.Contains(strings.Join(strings.Fields(out), " "), "0-1") {
		t.Errorf("--captures: exit %d, want 1 on the bound 0-1 and no assumption:\n%s", code, out)
	}
	code, out = run("--captures", "--max", "alloc_retries=1")
	if code != 0 {
		t.Errorf("--captures, limit 1: exit %d, want 0 (the whole bound is within it):\n%s", code, out)
	}
}
