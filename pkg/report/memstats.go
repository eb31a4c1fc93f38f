package report

import "github.com/memstat/memstat/pkg/replay"

// StatRow is one metric of torch.cuda.memory_summary(): the stat it reads,
// the label people know it by, and whether it counts bytes.
type StatRow struct {
	Stat  string // memory_stats prefix, e.g. "allocated_bytes"
	Label string
	Bytes bool
}

// SummaryRows are memory_summary()'s rows, in its order and with its
// labels.
var SummaryRows = []StatRow{
	{"allocated_bytes", "Allocated memory", true},
	{"active_bytes", "Active memory", true},
	{"requested_bytes", "Requested memory", true},
	{"reserved_bytes", "GPU reserved memory", true},
	{"inactive_split_bytes", "Non-releasable memory", true},
	{"allocation", "Allocations", false},
	{"active", "Active allocs", false},
	{"segment", "GPU reserved segments", false},
	{"inactive_split", "Non-releasable allocs", false},
}

// StatsTable lays memory_stats figures out like torch.cuda.memory_summary():
// one row per metric and pool, columns current / peak / allocated / freed.
// get returns a flat memory_stats key's value (0 when absent); a key in
// bounds is printed as its bound.
func StatsTable(get func(key string) int64, bounds map[string]replay.Bound) *Table {
	t := &Table{Columns: []Column{
		{Name: "Metric", Key: "metric"},
		{Name: "Pool", Key: "pool"},
		{Name: "Current", Key: "current", Align: Right},
		{Name: "Peak", Key: "peak", Align: Right},
		{Name: "Allocated", Key: "allocated", Align: Right},
		{Name: "Freed", Key: "freed", Align: Right},
	}}
	cell := func(key string, bytes bool) Cell {
		if b, ok := bounds[key]; ok {
			if bytes {
				return BoundCell(b)
			}
			return Str(b.String())
		}
		if bytes {
			return Bytes(get(key))
		}
		return Int(get(key))
	}
	for _, r := range SummaryRows {
		for _, pool := range []string{"all", "large_pool", "small_pool"} {
			k := r.Stat + "." + pool + "."
			label := r.Label
			if pool != "all" {
				label = ""
			}
			t.Add(Str(label), Str(pool), cell(k+"current", r.Bytes), cell(k+"peak", r.Bytes),
				cell(k+"allocated", r.Bytes), cell(k+"freed", r.Bytes))
		}
	}
	for _, o := range []StatRow{{"oversize_allocations", "Oversize allocations", false}, {"oversize_segments", "Oversize GPU segments", false}} {
		k := o.Stat + "."
		t.Add(Str(o.Label), Str("all"), cell(k+"current", false), cell(k+"peak", false), cell(k+"allocated", false), cell(k+"freed", false))
	}
	return t
}

// CounterRows are memory_stats' plain counters, with their labels.
var CounterRows = []StatRow{
	{"num_ooms", "CUDA OOMs", false},
	{"num_alloc_retries", "cudaMalloc retries", false},
	{"num_device_alloc", "cudaMalloc / map calls", false},
	{"num_device_free", "cudaFree / unmap calls", false},
	{"num_sync_all_streams", "Synchronizations of all streams", false},
}
