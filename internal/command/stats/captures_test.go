package stats

import (
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/internal/golden"
)

// TestCaptures: an oom during a CUDA graph capture, with nothing cached,
// in a 2.8 recording whose pool never held memory (capture_oom.mem): the
// default pools replay every call as recorded, so stats counts the oom's
// retry (1; the recorder's allocator, like PyTorch, made none) and says
// what that assumes; with --captures the retries and the private pools'
// peaks are bounds that hold the truth, without the assumption.
func TestCaptures(t *testing.T) {
	fn, _ := fixture.RecordFile(t, "capture_oom.mem", "capture_oom.pickle", "--device-memory", "1GiB", "--torch-version", "2.8")
	run := func(args ...string) string { t.Helper(); return statsOfRecording(t, fn, args...) }
	const note = "this assumes no CUDA graph capture or use_mem_pool block was underway at those ooms"
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	plain := run()
	if !strings.Contains(plain, note) || !strings.Contains(flat(plain), "num_alloc_retries 1") {
		t.Errorf("without --captures: want the exact count and the assumption:\n%s", plain)
	}
	golden.Check(t, "capture-oom.text", []byte(plain))
	js := run("--json")
	if !strings.Contains(js, `"assumptions": [`) || !strings.Contains(js, note) {
		t.Errorf("--json: no assumption:\n%.3000s", js)
	}
	opt := run("--captures")
	for _, want := range []string{"num_alloc_retries 0-1", "num_sync_all_streams >= 0", "private_pool_reserved is a bound (0 B-600.0 MiB)"} {
		if !strings.Contains(flat(opt), want) {
			t.Errorf("with --captures: no %q in\n%s", want, opt)
		}
	}
	if strings.Contains(opt, note) {
		t.Errorf("with --captures: the assumption is still printed:\n%s", opt)
	}
	golden.Check(t, "capture-oom-captures.text", []byte(opt))
}
