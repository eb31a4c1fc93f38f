package replay

import "github.com/memstat/memstat/pkg/allocator"

// Result is what a replay of one device's trace found.
type Result struct {
	Device int `json:"device"`
	// Mode is "follow" or "what-if".
	Mode string `json:"mode"`
	// Version is the PyTorch release whose rules were applied ("2.3"), or,
	// when the release was guessed from a file whose keys allow several,
	// the range ("2.3-2.4"; the oldest one's rules were applied).
	Version string `json:"torch_version"`
	// Settings is the PYTORCH_CUDA_ALLOC_CONF the simulator ran with, in
	// canonical form ("" = defaults).
	Settings string `json:"alloc_conf"`
	// Capacity is the device memory the simulator could obtain (0 =
	// unlimited); CapacitySource says where the figure came from.
	Capacity       int64  `json:"device_memory"`
	CapacitySource string `json:"device_memory_source"`

	// MemoryStats is torch.cuda.memory_stats() at the end of the replay:
	// PyTorch's flat keys for Version, sorted as PyTorch sorts them.
	MemoryStats []allocator.KeyValue `json:"-"`
	// Stats are the same figures as a struct (all counters, whatever the
	// version).
	Stats allocator.Stats `json:"-"`
	// Bounds hold the memory_stats figures the recording does not
	// determine (num_alloc_retries, ...), by flat key; those keys are not
	// in MemoryStats. Each bound contains the true value.
	Bounds map[string]Bound `json:"-"`

	// Assumptions are what the exact figures assume about the run that
	// the recording does not show (follow mode): each a sentence, with
	// the option that drops it.
	Assumptions []string `json:"-"`

	History History `json:"history"`
	// Agreement compares the replayed final state with the snapshot's
	// segments (follow mode only).
	Agreement *Agreement `json:"agreement,omitempty"`
	// Fidelity counts the simulator's decisions that reproduced the
	// recorded ones (follow mode only).
	Fidelity *Fidelity `json:"fidelity,omitempty"`
	OOMs     OOMCounts `json:"ooms"`

	// Peaks: the highest allocated and reserved memory of the replay and
	// the trace entry after which each was first reached (-1: already at
	// the start of the window).
	PeakAllocated PeakAt `json:"peak_allocated"`
	PeakReserved  PeakAt `json:"peak_reserved"`
	// AtPeak is the reserved memory at the peak of allocated memory (the
	// moment PeakAllocated gives: the first at which allocated_bytes.all
	// reached its peak, when the program needed the most) and what of it
	// no tensor used.
	AtPeak Unused `json:"at_peak_allocated"`
	// SegmentsCreated counts cudaMalloc and map calls during the window
	// (num_device_alloc, whatever the version reports).
	SegmentsCreated int64 `json:"segments_created"`
	// FinalSegments is how many segments a snapshot taken at the end
	// would list (each contiguous mapped range of an expandable segment
	// counts as one).
	FinalSegments int `json:"final_segments"`

	// Pools are the private pools' figures (absent without private pools).
	Pools PoolFigures `json:"private_pools"`

	// Warnings are things the replay had to work around (settings it could
	// not use, starting-state segments it could not seed, ...).
	Warnings []string `json:"warnings,omitempty"`
}

// Partial reports whether the figures cover only part of the run: the
// trace starts mid-run, or there is no trace at all.
func (r *Result) Partial() bool { return r.History.Coverage != CoverageComplete }

// Stat returns a memory_stats value by its flat key (0 if absent).
func (r *Result) Stat(key string) int64 {
	for _, kv := range r.MemoryStats {
		if kv.Key == key {
			return kv.Value
		}
	}
	return 0
}

// MemoryStatsMap returns MemoryStats as a map (JSON encoders sort its keys
// the way PyTorch sorts memory_stats()).
func (r *Result) MemoryStatsMap() map[string]int64 {
	m := make(map[string]int64, len(r.MemoryStats))
	for _, kv := range r.MemoryStats {
		m[kv.Key] = kv.Value
	}
	return m
}

// History coverage values.
const (
	// CoverageComplete: the trace starts from an empty allocator.
	CoverageComplete = "complete"
	// CoveragePartial: the trace starts mid-run (the ring buffer dropped
	// older entries, or recording started late).
	CoveragePartial = "partial"
	// CoverageNone: the snapshot has no trace for the device.
	CoverageNone = "none"
)

// History describes how much of the run the trace covers.
type History struct {
	Coverage    string `json:"coverage"`
	Entries     int    `json:"entries"`
	FirstTimeUS int64  `json:"first_time_us,omitempty"`
	LastTimeUS  int64  `json:"last_time_us,omitempty"`
	// Pre-existing state: what existed before the first entry and was
	// rebuilt from the trace and the final segments.
	PreexistingSegments int   `json:"preexisting_segments"`
	PreexistingBlocks   int   `json:"preexisting_blocks"`
	PreexistingBytes    int64 `json:"preexisting_reserved_bytes"`
	// Note says in a sentence what the figures cover.
	Note string `json:"note"`
}

// Tally is a count of recorded things and how many of them the replay
// reproduced.
type Tally struct {
	Recorded   int `json:"recorded"`
	Reproduced int `json:"reproduced"`
}

// Complete reports whether everything recorded was reproduced.
func (t Tally) Complete() bool { return t.Recorded == t.Reproduced }

// Fidelity measures how closely the simulator's own decisions matched the
// recorded ones in follow mode.
type Fidelity struct {
	// SegmentEvents: segment_alloc / segment_free / segment_map /
	// segment_unmap entries the simulator produced itself, with the same
	// address and size and in the same order.
	SegmentEvents Tally `json:"segment_events"`
	// Placements: alloc entries the simulator placed at the recorded
	// address (the same offset in the same segment).
	Placements Tally `json:"placements"`
	// SnapshotMarkers: "snapshot" entries whose total active bytes equal
	// the replayed state's at that point.
	SnapshotMarkers Tally `json:"snapshot_markers"`
	// EmptyCacheCalls: segment_free / segment_unmap runs no allocation
	// explains, replayed as a user torch.cuda.empty_cache().
	EmptyCacheCalls int `json:"empty_cache_calls"`
	// Divergences: allocator calls where the simulator decided otherwise
	// than recorded; ForcedOperations: the Force* operations that then
	// kept the state equal to the recording.
	Divergences      int   `json:"divergences"`
	ForcedOperations int64 `json:"forced_operations"`
	// Unapplied: entries that could not be applied at all (a free of an
	// address nothing is allocated at, ...).
	Unapplied int `json:"unapplied"`
	// Examples describe the first divergences and unapplied entries.
	Examples []string `json:"examples,omitempty"`
}

// OOMCounts compares recorded and simulated out-of-memory errors.
type OOMCounts struct {
	Recorded  int `json:"recorded"`
	Simulated int `json:"simulated"`
}

// PeakAt is a peak and when it was first reached.
type PeakAt struct {
	Bytes int64 `json:"bytes"`
	// Index is the trace entry after which the peak was reached; -1 when
	// it was already there at the start of the window.
	Index  int   `json:"index"`
	TimeUS int64 `json:"time_us,omitempty"`
}

// Agreement compares the replayed final state with the snapshot's final
// segments of the device, before reconciliation.
type Agreement struct {
	Segments       Match `json:"segments"`
	Blocks         Match `json:"blocks"`
	RequestedSizes Match `json:"requested_sizes"`
	// MismatchCount counts every difference; Mismatches lists the first
	// ones.
	MismatchCount int      `json:"mismatch_count"`
	Mismatches    []string `json:"mismatches,omitempty"`
	// Reconciled counts the operations applied after the trace to reach
	// the snapshot's state (frees the trace does not contain, ...), and
	// Remaining the differences left after them (the current figures
	// are then counted from the final segments, Replay.finalCurrents).
	Reconciled    int    `json:"reconciled"`
	ReconcileNote string `json:"reconcile_note,omitempty"`
	Remaining     int    `json:"remaining"`
	// Note says what the comparison means for this snapshot.
	Note string `json:"note,omitempty"`
}

// Match counts things in the snapshot and how many the replay has equal.
type Match struct {
	Snapshot int `json:"snapshot"`
	Replayed int `json:"replayed"`
	Matching int `json:"matching"`
}

// Exact reports whether the replay and the snapshot agree on every item.
func (m Match) Exact() bool { return m.Snapshot == m.Matching && m.Replayed == m.Matching }

// Exact reports whether the replayed state equals the snapshot's.
func (a *Agreement) Exact() bool { return a.MismatchCount == 0 }

// PoolFigures are a replay's private-pool figures.
type PoolFigures struct {
	// Final lists the pools at the end of the replay: the default pools
	// (id (0, 0)) first, then each private pool by id.
	Final []allocator.PoolUsage `json:"final,omitempty"`
	// Reserved and Allocated are the private pools' totals: current at
	// the end, and their peaks over the window.
	Reserved  allocator.Stat `json:"reserved"`
	Allocated allocator.Stat `json:"allocated"`
	// Inferred counts calls whose pool the recording did not say and the
	// replay found by trying the pools; Ambiguous those where more than
	// one pool fits (or none), and AmbiguousBytes the segment bytes they
	// created: the replay counted those in the default pools, so the
	// private pools' peaks are then bounds (Bounds[PrivatePoolReserved]
	// and Bounds[PrivatePoolAllocated]: up to that much higher). The
	// current figures and the totals over all pools are exact.
	Inferred       int   `json:"inferred_calls,omitempty"`
	Ambiguous      int   `json:"ambiguous_calls,omitempty"`
	AmbiguousBytes int64 `json:"ambiguous_bytes,omitempty"`
}

// Any reports whether the replay saw private pools.
func (p *PoolFigures) Any() bool { return len(p.Final) > 1 || p.Reserved.Peak > 0 }

// Unused splits the reserved memory at one moment: what tensors held
// (allocated), and the rest, reserved minus allocated, in two parts:
//
//   - stranded: the free space inside segments that hold live blocks
//     (blocks waiting for another stream's work included). No request
//     too large for its pieces can use it, and empty_cache() cannot
//     return it: only merging (expandable segments, max_split_size)
//     recovers it. This is fragmentation.
//   - cached: the segments that hold no live block (the whole free pages
//     of expandable segments): the cache keeps them for later requests,
//     and empty_cache() returns them to the device.
//
// Shares are of the reserved memory at that moment (0 when none is).
type Unused struct {
	Reserved  int64 `json:"reserved_bytes"`
	Allocated int64 `json:"allocated_bytes"`
	Unused    int64 `json:"unused_bytes"`
	Stranded  int64 `json:"stranded_bytes"`
	Cached    int64 `json:"cached_bytes"`
	// Fragmentation is Stranded / Reserved.
	Fragmentation float64 `json:"fragmentation"`
	UnusedShare   float64 `json:"unused_share"`
	CachedShare   float64 `json:"cached_share"`
}

// NewUnused splits reserved memory of which allocated bytes are held by
// tensors and cached bytes lie in segments without a live block.
func NewUnused(reserved, allocated, cached int64) Unused {
	u := Unused{Reserved: reserved, Allocated: allocated, Unused: reserved - allocated, Cached: cached}
	u.Stranded = u.Unused - cached
	if reserved > 0 {
		r := float64(reserved)
		u.Fragmentation, u.UnusedShare, u.CachedShare = float64(u.Stranded)/r, float64(u.Unused)/r, float64(cached)/r
	}
	return u
}
