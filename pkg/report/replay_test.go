package report

import (
	"strings"
	"testing"

	"github.com/memstat/memstat/pkg/replay"
)

func TestSettingsText(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{AllocConfText(""), `PYTORCH_CUDA_ALLOC_CONF="" (the defaults)`},
		{AllocConfText("expandable_segments:True"), `PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"`},
		{DeviceMemoryText(0, "", ""), "unlimited device memory (no oom entry to derive it from)"},
		{DeviceMemoryText(0, "", "--device-memory SIZE says"), "unlimited device memory (no oom entry to derive it from; --device-memory SIZE says)"},
		{DeviceMemoryText(24<<30, "option", ""), "24.0 GiB of device memory (--device-memory)"},
		{DeviceMemoryText(3<<29, "derived from oom entry 7", ""), "1.5 GiB of device memory (derived from oom entry 7)"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestHeadlineWithoutTrace(t *testing.T) {
	res := &replay.Result{History: replay.History{Coverage: replay.CoverageNone}}
	res.PeakReserved.Bytes = 2 << 30
	// Without a trace there is no window to speak of, only the final
	// state.
	got := HeadlineText(res)
	if !strings.Contains(got, "(no trace: only the final state is known)") || strings.Contains(got, "recorded window") ||
		!strings.Contains(got, "peak reserved at least 2.0 GiB") || !strings.Contains(got, "in the final state") {
		t.Errorf("headline %q", got)
	}
	if !HeadlineOf(res).Partial {
		t.Error("a replay without a trace is not a complete history")
	}
	if got := HistoryLine(&replay.Result{History: replay.History{Coverage: replay.CoverageComplete, Entries: 1}}); !strings.HasPrefix(got, "history: complete: 1 trace entry from an empty allocator") {
		t.Errorf("history %q", got)
	}
}
