package allocator

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/memstat/memstat/pkg/snapshot"
)

// NoMaxSplit is the MaxSplitSize of a configuration without
// max_split_size_mb (PyTorch's SIZE_MAX): every block may be split.
const NoMaxSplit = math.MaxUint64

// Config is the allocator configuration PyTorch reads from
// PYTORCH_CUDA_ALLOC_CONF, for one PyTorch version. Parse one with
// ParseConfig; the zero value is not meaningful, use DefaultConfig.
//
// The Version travels with the configuration because both the grammar and
// the decisions it controls changed between releases.
type Config struct {
	Version Version
	// Source is the last settings string parsed, "" if none (reported as
	// allocator_settings["PYTORCH_CUDA_ALLOC_CONF"]).
	Source string
	// Backend is "native" or "cudaMallocAsync". Only the native allocator
	// is simulated; the other value is kept so that reports can say so.
	Backend string

	// MaxSplitSize (max_split_size_mb, in bytes): blocks of at least this
	// size are never split, and requests below it never take them.
	// NoMaxSplit when unset.
	MaxSplitSize uint64
	// MaxNonSplitRounding (max_non_split_rounding_mb, in bytes, 2.6+): how
	// much larger than a request of at least MaxSplitSize a cached oversize
	// block may be and still be reused. 20 MiB by default and before 2.6.
	MaxNonSplitRounding uint64
	// RoundupPower2Divisions is the divisions table; entry i governs
	// requests in [2^i MiB, 2^(i+1) MiB). 0 means plain 512-byte rounding.
	RoundupPower2Divisions [RoundupIntervals]int64
	// GarbageCollectionThreshold (0 = off) frees old cached segments once
	// reserved memory exceeds this fraction of the memory-fraction limit;
	// it has no effect without a memory fraction.
	GarbageCollectionThreshold float64
	// ExpandableSegments (2.1+) maps pages into per-stream VA reservations
	// instead of cudaMalloc'ing segments.
	ExpandableSegments bool
	// PerProcessMemoryFraction (2.10+ key) is applied when the allocator is
	// created, as set_per_process_memory_fraction would be. 1 by default.
	PerProcessMemoryFraction float64

	// Options that are validated and reported but change no decision the
	// simulator makes.
	ReleaseLockOnCudaMalloc       bool
	PinnedUseCudaHostRegister     bool
	PinnedNumRegisterThreads      int64
	PinnedUseBackgroundThreads    bool
	PinnedReserveSegmentSizeMB    int64
	GraphCaptureRecordStreamReuse bool

	// Warnings PyTorch would print while parsing (TORCH_WARN).
	Warnings []string
}

// DefaultConfig is the configuration of a process without
// PYTORCH_CUDA_ALLOC_CONF.
func DefaultConfig(v Version) Config {
	return Config{
		Version:                  v,
		Backend:                  "native",
		MaxSplitSize:             NoMaxSplit,
		MaxNonSplitRounding:      LargeBuffer,
		PerProcessMemoryFraction: 1,
		PinnedNumRegisterThreads: 1,
	}
}

// Validate checks a configuration built by hand (ParseConfig only produces
// valid ones): values PyTorch's parser would reject cannot be simulated
// faithfully either.
func (c Config) Validate() error {
	switch {
	case c.Version < V2_0:
		return errors.New("allocator: configuration has no version (use DefaultConfig or ParseConfig)")
	case c.MaxSplitSize < LargeBuffer:
		return fmt.Errorf("allocator: max_split_size %d is below 20 MiB", c.MaxSplitSize)
	case c.MaxNonSplitRounding < LargeBuffer:
		return fmt.Errorf("allocator: max_non_split_rounding %d is below 20 MiB", c.MaxNonSplitRounding)
	case c.GarbageCollectionThreshold < 0 || c.GarbageCollectionThreshold >= 1:
		return fmt.Errorf("allocator: garbage_collection_threshold %v outside [0, 1)", c.GarbageCollectionThreshold)
	case !(c.PerProcessMemoryFraction >= 0 && c.PerProcessMemoryFraction <= 1):
		return fmt.Errorf("allocator: per_process_memory_fraction %v outside [0, 1]", c.PerProcessMemoryFraction)
	case c.Backend != "native" && c.Backend != "cudaMallocAsync":
		return fmt.Errorf("allocator: unknown backend %q", c.Backend)
	}
	for i, d := range c.RoundupPower2Divisions {
		if d != 0 && !isPow2(uint64(d)) {
			return fmt.Errorf("allocator: roundup_power2_divisions[%d] = %d is not a power of two", i, d)
		}
	}
	return nil
}

// RoundSize is round_size under this configuration: the block size a
// request of n bytes is served with.
func (c Config) RoundSize(n int64) int64 {
	return roundSize(n, &c.RoundupPower2Divisions, c.Version)
}

// maxSplitStat is the value PyTorch reports as max_split_size: the size_t
// cast to int64, so unlimited reads -1.
func (c *Config) maxSplitStat() int64 { return int64(c.MaxSplitSize) }

// nonSplitTolerance is the oversize tolerance of get_free_block's second
// rule: the constant kLargeBuffer before 2.6.
func (c *Config) nonSplitTolerance() uint64 {
	if !c.Version.hasMaxNonSplitRounding() {
		return LargeBuffer
	}
	return c.MaxNonSplitRounding
}

// Settings returns the allocator_settings dict a snapshot of this
// configuration carries (2.3+).
func (c Config) Settings() snapshot.AllocatorSettings {
	s := snapshot.AllocatorSettings{
		AllocConf:                  c.Source,
		MaxSplitSize:               c.maxSplitStat(),
		GarbageCollectionThreshold: c.GarbageCollectionThreshold,
		ExpandableSegments:         c.ExpandableSegments,
		ReleaseLockOnCudaMalloc:    c.ReleaseLockOnCudaMalloc,
		RoundupPower2Divisions:     c.RoundupPower2Divisions,
	}
	s.Other = append(s.Other,
		snapshot.KeyValue{Key: "pinned_num_register_threads", Value: strconv.FormatInt(c.PinnedNumRegisterThreads, 10)},
		snapshot.KeyValue{Key: "pinned_use_cuda_host_register", Value: pyBool(c.PinnedUseCudaHostRegister)})
	if c.Version >= V2_9 {
		s.Other = append(s.Other, snapshot.KeyValue{Key: "graph_capture_record_stream_reuse", Value: pyBool(c.GraphCaptureRecordStreamReuse)})
	}
	return s
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// String renders the configuration as a canonical PYTORCH_CUDA_ALLOC_CONF
// string: only options that differ from the defaults, in a fixed order, in
// a form that parses back to the same configuration under c.Version.
func (c Config) String() string {
	d := DefaultConfig(c.Version)
	var parts []string
	add := func(k, v string) { parts = append(parts, k+":"+v) }
	if c.Backend != "" && c.Backend != d.Backend {
		add("backend", c.Backend)
	}
	if c.MaxSplitSize != d.MaxSplitSize {
		add("max_split_size_mb", strconv.FormatUint(c.MaxSplitSize/MiB, 10))
	}
	if c.Version.hasMaxNonSplitRounding() && c.MaxNonSplitRounding != d.MaxNonSplitRounding {
		add("max_non_split_rounding_mb", strconv.FormatUint(c.MaxNonSplitRounding/MiB, 10))
	}
	if r := c.divisionsString(); r != "" {
		add("roundup_power2_divisions", r)
	}
	if c.GarbageCollectionThreshold != 0 {
		add("garbage_collection_threshold", strconv.FormatFloat(c.GarbageCollectionThreshold, 'g', -1, 64))
	}
	if c.ExpandableSegments {
		add("expandable_segments", "True")
	}
	if c.Version.fractionOneUnlimited() && c.PerProcessMemoryFraction != 1 {
		add("per_process_memory_fraction", strconv.FormatFloat(c.PerProcessMemoryFraction, 'g', -1, 64))
	}
	if c.ReleaseLockOnCudaMalloc {
		add("release_lock_on_cudamalloc", "True")
	}
	if c.PinnedUseCudaHostRegister {
		add("pinned_use_cuda_host_register", "True")
	}
	if c.PinnedNumRegisterThreads != d.PinnedNumRegisterThreads {
		add("pinned_num_register_threads", strconv.FormatInt(c.PinnedNumRegisterThreads, 10))
	}
	if c.PinnedUseBackgroundThreads {
		add("pinned_use_background_threads", "True")
	}
	if c.PinnedReserveSegmentSizeMB != 0 {
		add("pinned_reserve_segment_size_mb", strconv.FormatInt(c.PinnedReserveSegmentSizeMB, 10))
	}
	if c.GraphCaptureRecordStreamReuse {
		add("graph_capture_record_stream_reuse", "True")
	}
	return strings.Join(parts, ",")
}

// divisionsString renders the divisions table: "" for all zeros, a scalar
// when all entries agree, otherwise an explicit list. The list starts with
// the "1" key (which fills nothing below it) and then names every non-zero
// entry; entries left out stay 0 under both parser generations. A zero
// first entry is written only from 2.4, whose parser accepts 0 in lists;
// older parsers cannot produce such a table anyway.
func (c *Config) divisionsString() string {
	t := &c.RoundupPower2Divisions
	uniform := true
	for _, d := range t {
		if d != t[0] {
			uniform = false
		}
	}
	if uniform {
		if t[0] == 0 {
			return ""
		}
		return strconv.FormatInt(t[0], 10)
	}
	var items []string
	for i, d := range t {
		if d != 0 || (i == 0 && !c.Version.roundsUnitDivisionsRaw()) {
			items = append(items, strconv.Itoa(1<<i)+":"+strconv.FormatInt(d, 10))
		}
	}
	return "[" + strings.Join(items, ",") + "]"
}

// ErrAsyncBackend is what PyTorch raises when _record_memory_history runs
// under backend:cudaMallocAsync (CudaMallocAsyncAllocator::recordHistory,
// every release 2.0-2.10: a TORCH_CHECK(false, ...)): that backend keeps
// no history and no per-block state, so there is no snapshot to record and
// nothing for the native simulation to stand in for.
var ErrAsyncBackend = errors.New("backend:cudaMallocAsync is not simulated: PyTorch's cudaMallocAsync backend records no memory history (\"cudaMallocAsync does not yet support recordHistory\") and keeps its own statistics; use backend:native")

// CheckSimulated returns ErrAsyncBackend for backend:cudaMallocAsync.
func (c Config) CheckSimulated() error {
	if c.Backend == "cudaMallocAsync" {
		return ErrAsyncBackend
	}
	return nil
}
