package report

import (
	"fmt"
	"strings"
)

// TorchMemorySummary renders torch.cuda.memory_summary(device, abbreviated)
// character for character as PyTorch's torch/cuda/memory.py builds it: a
// 75-column box with the OOM and retry counters, then per metric the "all"
// row (and, unless abbreviated, the large and small pool rows) with
// current, peak, allocated and freed values, and the two oversize rows.
// get returns a flat memory_stats key's value (0 when absent).
//
// Sizes scale by 1024 while the "all" row's value of the same column is
// at least 768 KiB (so pool rows share its unit, and integer division
// truncates them); counts scale by 1000 from 750 K.
func TorchMemorySummary(get func(key string) int64, device int, abbreviated bool) string {
	const width = 75
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	rule := func(c string) { lines = append(lines, strings.Repeat(c, width)) }

	rule("=")
	add(" %16s PyTorch CUDA memory summary, device ID %-17d ", "", device)
	rule("-")
	add("  %9s CUDA OOMs: %-12d | %6s cudaMalloc retries: %-8d  ", "", get("num_ooms"), "", get("num_alloc_retries"))
	rule("=")
	add("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ")
	for _, m := range SummaryRows {
		rule("-")
		format := torchCount
		if m.Bytes {
			format = torchSize
		}
		pools := []struct{ key, label string }{{"all", m.Label}}
		if !abbreviated {
			pools = append(pools,
				struct{ key, label string }{"large_pool", "      from large pool"},
				struct{ key, label string }{"small_pool", "      from small pool"})
		}
		// Each column's unit is chosen by the "all" row's value.
		var pref [4]int64
		for i, p := range pools {
			k := m.Stat + "." + p.key + "."
			v := [4]int64{get(k + "current"), get(k + "peak"), get(k + "allocated"), get(k + "freed")}
			if i == 0 {
				pref = v
			}
			add(" %-21s | %s | %s | %s | %s ", p.label,
				format(v[0], pref[0]), format(v[1], pref[1]), format(v[2], pref[2]), format(v[3], pref[3]))
		}
	}
	for _, m := range []StatRow{{"oversize_allocations", "Oversize allocations", false}, {"oversize_segments", "Oversize GPU segments", false}} {
		rule("-")
		k := m.Stat + "."
		v := [4]int64{get(k + "current"), get(k + "peak"), get(k + "allocated"), get(k + "freed")}
		add(" %-21s | %s | %s | %s | %s ", m.Label,
			torchCount(v[0], v[0]), torchCount(v[1], v[1]), torchCount(v[2], v[2]), torchCount(v[3], v[3]))
	}
	rule("=")
	return "|" + strings.Join(lines, "|\n|") + "|\n"
}

// torchSize is memory_summary's _format_size.
func torchSize(n, pref int64) string {
	prefixes := []string{"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"}
	prefix := prefixes[0]
	p := float64(pref)
	for _, next := range prefixes[1:] {
		if p < 768*1024 {
			break
		}
		prefix = next
		n = floorDiv(n, 1024)
		p /= 1024
	}
	return fmt.Sprintf("%6d %s", n, prefix)
}

// torchCount is memory_summary's _format_count.
func torchCount(n, pref int64) string {
	prefixes := []string{" ", "K", "M"}
	prefix := prefixes[0]
	p := float64(pref)
	for _, next := range prefixes[1:] {
		if p < 750*1000 {
			break
		}
		prefix = next
		n = floorDiv(n, 1000)
		p /= 1000
	}
	return fmt.Sprintf("%7d %s ", n, prefix)
}

// floorDiv is Python's //.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// TorchMemoryStats renders print(torch.cuda.memory_stats()) as Python 3.12
// and later print the OrderedDict it returns: one line,
// OrderedDict({'key': value, ...}), keys in the given (sorted) order.
func TorchMemoryStats(keys []string, get func(key string) int64) string {
	if len(keys) == 0 {
		return "OrderedDict()"
	}
	var b strings.Builder
	b.WriteString("OrderedDict({")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "'%s': %d", k, get(k))
	}
	b.WriteString("})")
	return b.String()
}
