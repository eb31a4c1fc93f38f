package report

import (
	"strings"
	"testing"
)

// The unit rules of memory_summary's _format_size and _format_count, with
// values computed by PyTorch's own functions.
func TestTorchUnits(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{torchSize(786431, 786431), "786431 B  "},
		{torchSize(786432, 786432), "   768 KiB"},
		{torchSize(1000, 786432), "     0 KiB"}, // a pool row takes the "all" row's unit
		{torchSize(5<<40, 5<<40), "  5120 GiB"},
		{torchSize(0, 0), "     0 B  "},
		{torchCount(749999, 749999), " 749999   "},
		{torchCount(750000, 750000), "    750 K "},
		{torchCount(3_000_000_000, 3_000_000_000), "   3000 M "},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestTorchMemorySummaryShape(t *testing.T) {
	get := func(k string) int64 {
		if k == "num_ooms" {
			return 3
		}
		return 0
	}
	full := TorchMemorySummary(get, 1, false)
	lines := strings.Split(strings.TrimSuffix(full, "\n"), "\n")
	if len(lines) != 6+9*4+2*2+1 {
		t.Errorf("%d lines", len(lines))
	}
	for _, l := range lines {
		if len(l) != 77 || l[0] != '|' || l[76] != '|' {
			t.Errorf("line %q is not 77 columns between bars", l)
		}
	}
	if !strings.Contains(full, "PyTorch CUDA memory summary, device ID 1 ") || !strings.Contains(full, "CUDA OOMs: 3 ") {
		t.Errorf("header:\n%s", full)
	}
	if abbr := TorchMemorySummary(get, 0, true); strings.Contains(abbr, "from large pool") {
		t.Error("abbreviated summary has pool rows")
	}
	if got := TorchMemoryStats([]string{"a.b", "num_ooms"}, get); got != "OrderedDict({'a.b': 0, 'num_ooms': 3})" {
		t.Errorf("TorchMemoryStats = %s", got)
	}
}
