// Package check evaluates memory budgets on replayed snapshots: the rules
// of `memstat check` (an absolute limit on a figure, or a limit on its
// increase over a baseline run), where they come from (flags or a rules
// file kept in the repository), and the JUnit XML that CI systems display.
package check

import (
	"maps"
	"slices"
	"sort"
	"sync"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/replay"
)

// Unit is what a figure counts; it decides how limits are written and
// printed.
type Unit uint8

// Units.
const (
	// Bytes: sizes such as 20GiB or 512MB.
	Bytes Unit = iota
	// Count: whole numbers (OOMs, segments, allocations).
	Count
	// Fraction: a share such as fragmentation, written 30% or 0.3.
	Fraction
)

func (u Unit) String() string {
	switch u {
	case Bytes:
		return "bytes"
	case Count:
		return "count"
	}
	return "fraction"
}

// Named is a figure with a short name, beside the raw memory_stats keys.
type Named struct {
	Name string
	Unit Unit
	Doc  string
	of   func(*replay.Result) float64
}

// NamedFigures are the figures people gate on most, by their short names.
var NamedFigures = []Named{
	{"peak_allocated", Bytes, "highest memory held by tensors (allocated_bytes.all.peak over the trace)",
		func(r *replay.Result) float64 { return float64(r.PeakAllocated.Bytes) }},
	{"peak_reserved", Bytes, "highest memory the caching allocator held from the GPU (reserved_bytes.all.peak)",
		func(r *replay.Result) float64 { return float64(r.PeakReserved.Bytes) }},
	{"current_allocated", Bytes, "memory held by tensors when the snapshot was taken",
		func(r *replay.Result) float64 { return float64(r.Stat("allocated_bytes.all.current")) }},
	{"current_reserved", Bytes, "memory reserved from the GPU when the snapshot was taken",
		func(r *replay.Result) float64 { return float64(r.Stat("reserved_bytes.all.current")) }},
	{"fragmentation", Fraction, "share of reserved memory stranded at the peak of allocated memory: free inside segments that hold live blocks",
		func(r *replay.Result) float64 { return r.AtPeak.Fragmentation }},
	{"unused_at_peak", Fraction, "share of reserved memory no tensor used at the peak of allocated memory (stranded + cached)",
		func(r *replay.Result) float64 { return r.AtPeak.UnusedShare }},
	{"stranded_bytes_at_peak", Bytes, "the stranded memory of fragmentation, in bytes",
		func(r *replay.Result) float64 { return float64(r.AtPeak.Stranded) }},
	{"cached_bytes_at_peak", Bytes, "memory in segments without a live block at the peak of allocated memory (empty_cache() returns it)",
		func(r *replay.Result) float64 { return float64(r.AtPeak.Cached) }},
	{"unused_bytes_at_peak", Bytes, "reserved minus allocated memory at the peak of allocated memory",
		func(r *replay.Result) float64 { return float64(r.AtPeak.Unused) }},
	{"ooms", Count, "out-of-memory errors in the trace",
		func(r *replay.Result) float64 { return float64(r.OOMs.Recorded) }},
	{"segments", Count, "segments created during the trace (cudaMalloc and expandable-segment map calls)",
		func(r *replay.Result) float64 { return float64(r.SegmentsCreated) }},
	{replay.PrivatePoolReserved, Bytes, "highest memory reserved in private pools (CUDA graphs, torch.cuda.MemPool) over the trace, all pools together; a bound where the trace does not say which pool some segments were in (a rule passes only if the whole bound does)",
		func(r *replay.Result) float64 { return float64(r.Pools.Reserved.Peak) }},
	{"alloc_retries", Count, "cudaMalloc calls that failed and were retried after freeing the cache (num_alloc_retries)",
		func(r *replay.Result) float64 { return float64(r.Stat("num_alloc_retries")) }},
}

// statKeys is every memory_stats key of the newest PyTorch modelled, sorted.
var statKeys = sync.OnceValue(func() []string {
	a, err := allocator.New(allocator.DefaultConfig(allocator.Latest), allocator.Options{})
	if err != nil {
		panic(err)
	}
	var keys []string
	for _, kv := range a.MemoryStats() {
		keys = append(keys, kv.Key)
	}
	sort.Strings(keys)
	return keys
})

// StatKeys returns the memory_stats keys a rule may name.
func StatKeys() []string { return slices.Clone(statKeys()) }

// Keys returns every key a rule may name: the named figures, then the
// memory_stats keys.
func Keys() []string {
	var out []string
	for _, n := range NamedFigures {
		out = append(out, n.Name)
	}
	return append(out, statKeys()...)
}

// lookupKey returns the unit of a key, or false when it names nothing.
func lookupKey(key string) (Unit, bool) {
	for _, n := range NamedFigures {
		if n.Name == key {
			return n.Unit, true
		}
	}
	if _, ok := slices.BinarySearch(statKeys(), key); !ok {
		return 0, false
	}
	return statUnit(key), true
}

// statUnit: memory_stats keys count bytes when their metric does
// (allocated_bytes.*, max_split_size), things otherwise.
func statUnit(key string) Unit {
	metric := key
	for i := range key {
		if key[i] == '.' {
			metric = key[:i]
			break
		}
	}
	if metric == "max_split_size" || len(metric) > 6 && metric[len(metric)-6:] == "_bytes" {
		return Bytes
	}
	return Count
}

// Figures are one device's figures of one snapshot, as rules read them.
type Figures struct {
	// Version is the PyTorch release whose memory_stats keys the figures
	// have.
	Version string
	named   map[string]float64
	stats   map[string]int64
	// bounds are the figures the snapshot does not determine, by
	// memory_stats key; a named figure reads its key's bound.
	bounds map[string]replay.Bound
}

// boundKeyOf maps a named figure to the memory_stats key whose bound it
// shares.
var boundKeyOf = map[string]string{"alloc_retries": "num_alloc_retries", "peak_allocated": "allocated_bytes.all.peak", "peak_reserved": "reserved_bytes.all.peak"}

// FiguresOf collects the figures of a replay (a follow replay: the
// recorded run's own statistics).
func FiguresOf(r *replay.Result) *Figures {
	f := &Figures{Version: r.Version, named: map[string]float64{}, stats: r.MemoryStatsMap(), bounds: r.Bounds}
	for _, n := range NamedFigures {
		f.named[n.Name] = n.of(r)
	}
	if b, ok := r.Bounds["allocated_bytes.all.peak"]; ok && !b.Exact() {
		// Block sizes known within bounds (a runtime settings switch):
		// when allocated memory peaked, and what was unused then, are
		// the replay's choice. A rule on them passes only if it holds
		// whatever they were: bytes up to the peak of reserved memory,
		// shares up to all of it.
		f.bounds = maps.Clone(r.Bounds)
		one, reserved := int64(1), r.PeakReserved.Bytes
		for _, k := range []string{"fragmentation", "unused_at_peak"} {
			f.bounds[k] = replay.Bound{Max: &one, Reason: b.Reason}
		}
		for _, k := range []string{"stranded_bytes_at_peak", "cached_bytes_at_peak", "unused_bytes_at_peak"} {
			f.bounds[k] = replay.Bound{Max: &reserved, Reason: b.Reason, Bytes: true}
		}
		if rb, ok := r.Bounds["reserved_bytes.all.peak"]; ok && rb.Max == nil {
			// Entries the replay could not apply (a segment it could not
			// place among them): the reserved peak, and so the segments
			// created and the bytes at the allocated peak, are unknown
			// above.
			f.bounds["segments"] = replay.Bound{Reason: rb.Reason}
			for _, k := range []string{"stranded_bytes_at_peak", "cached_bytes_at_peak", "unused_bytes_at_peak"} {
				f.bounds[k] = replay.Bound{Reason: rb.Reason, Bytes: true}
			}
		}
	}
	return f
}

// NewFigures builds figures from values by key (tests, and callers with
// figures from elsewhere). Named figures and memory_stats keys share the
// map.
func NewFigures(version string, values map[string]float64) *Figures {
	f := &Figures{Version: version, named: map[string]float64{}, stats: map[string]int64{}}
	for k, v := range values {
		if _, ok := f.namedUnit(k); ok {
			f.named[k] = v
		} else {
			f.stats[k] = int64(v)
		}
	}
	return f
}

func (f *Figures) namedUnit(key string) (Unit, bool) {
	for _, n := range NamedFigures {
		if n.Name == key {
			return n.Unit, true
		}
	}
	return 0, false
}

// Bound returns the bound of a figure the snapshot does not determine;
// false when the figure is exact (or absent).
func (f *Figures) Bound(key string) (replay.Bound, bool) {
	if k, ok := boundKeyOf[key]; ok {
		key = k
	}
	b, ok := f.bounds[key]
	return b, ok
}

// SetBound makes a figure a bound (tests, and callers with figures from
// elsewhere).
func (f *Figures) SetBound(key string, b replay.Bound) {
	if f.bounds == nil {
		f.bounds = map[string]replay.Bound{}
	}
	f.bounds[key] = b
}

// Value returns a figure by key; false when this file's PyTorch version
// does not report it. A bounded figure's value is its lower end (see
// Bound).
func (f *Figures) Value(key string) (float64, bool) {
	if b, ok := f.Bound(key); ok {
		return float64(b.Min), true
	}
	if v, ok := f.named[key]; ok {
		return v, true
	}
	v, ok := f.stats[key]
	return float64(v), ok
}
