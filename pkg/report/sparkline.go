package report

import (
	"fmt"
	"strings"
)

// sparkLevels are the eight heights of a sparkline, lowest first.
var sparkLevels = []rune("▁▂▃▄▅▆▇█")

// Sparkline draws values as a line of width block characters: each
// character is the highest value of its share of the series (so a spike
// never disappears), scaled from 0 to the series' maximum. A series
// shorter than width gets one character per value; an empty one, "".
func Sparkline(values []int64, width int) string {
	n := len(values)
	if n == 0 || width <= 0 {
		return ""
	}
	width = min(width, n)
	var top int64
	for _, v := range values {
		top = max(top, v)
	}
	var b strings.Builder
	for i := range width {
		lo, hi := i*n/width, (i+1)*n/width
		var m int64
		for _, v := range values[lo:hi] {
			m = max(m, v)
		}
		level := 0
		if top > 0 && m > 0 {
			level = int((m*int64(len(sparkLevels)) - 1) / top)
		}
		b.WriteRune(sparkLevels[min(max(level, 0), len(sparkLevels)-1)])
	}
	return b.String()
}

// SparklineText is the line `memstat stats` prints on a terminal:
// "allocated over the trace ▁▂▅█▃ (peak 51.5 GiB)".
func SparklineText(values []int64, width int) string {
	s := Sparkline(values, width)
	if s == "" {
		return ""
	}
	var top int64
	for _, v := range values {
		top = max(top, v)
	}
	return fmt.Sprintf("allocated over the trace %s (0 to %s)", s, Size(top))
}
