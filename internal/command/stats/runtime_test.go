package stats

import (
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/internal/golden"
)

// TestRuntimeSettings: a recording with a large-pool cache hit whose
// split decision depends on expandable_segments (split_setting.mem)
// prints its figures as exact with the assumption in the notes, and
// with --runtime-settings prints the figures a switch could change as
// bounds, without the assumption.
func TestRuntimeSettings(t *testing.T) {
	fn, _ := fixture.RecordFile(t, "split_setting.mem", "split_setting.pickle")
	run := func(args ...string) string { t.Helper(); return statsOfRecording(t, fn, args...) }
	plain := run()
	if !strings.Contains(plain, "assume expandable_segments was not switched at runtime") || strings.Contains(plain, "allocated_bytes.all.peak is a bound") {
		t.Errorf("without --runtime-settings: want the assumption and exact figures:\n%s", plain)
	}
	golden.Check(t, "split-setting.text", []byte(plain))
	opt := run("--runtime-settings")
	if strings.Contains(opt, "assume expandable_segments") || !strings.Contains(opt, "allocated_bytes.all.peak is a bound") {
		t.Errorf("with --runtime-settings: want bounds, no assumption:\n%s", opt)
	}
	golden.Check(t, "split-setting-runtime.text", []byte(opt))
	js := run("--json")
	if !strings.Contains(js, `"assumptions": [`) {
		t.Errorf("--json: no assumptions:\n%.2000s", js)
	}
}
