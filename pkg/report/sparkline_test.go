package report

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSparkline(t *testing.T) {
	for _, c := range []struct {
		values []int64
		width  int
		want   string
	}{
		{[]int64{0, 1, 2, 3, 4, 5, 6, 7, 8}, 9, "▁▁▂▃▄▅▆▇█"},
		{[]int64{8, 8, 8}, 10, "███"},
		{[]int64{0, 0}, 2, "▁▁"},
		// A one-value spike in a long flat series stays visible.
		{append(append(make([]int64, 500), 100), make([]int64, 499)...), 10, "▁▁▁▁▁█▁▁▁▁"},
		{nil, 10, ""},
	} {
		if got := Sparkline(c.values, c.width); got != c.want {
			t.Errorf("Sparkline(%v..., %d) = %q, want %q", c.values[:min(len(c.values), 9)], c.width, got, c.want)
		}
	}
	long := make([]int64, 10000)
	for i := range long {
		long[i] = int64(i)
	}
	if got := Sparkline(long, 60); utf8.RuneCountInString(got) != 60 || !strings.HasSuffix(got, "█") || !strings.HasPrefix(got, "▁") {
		t.Errorf("Sparkline of a ramp = %q", got)
	}
	if got := SparklineText([]int64{0, 1 << 30}, 2); got != "allocated over the trace ▁█ (0 to 1.0 GiB)" {
		t.Errorf("SparklineText = %q", got)
	}
}
