package replay

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/memstat/memstat/pkg/allocator"
)

// Bound is what the recording tells about a memory_stats figure it does
// not determine: the true value lies in [Min, Max] (Max nil: no upper
// bound). Reason says in a sentence why the figure is not exact.
type Bound struct {
	// Min is NoLowerEnd when nothing bounds the figure from below (a
	// counter a runtime setting change may have driven negative, with an
	// unknown start).
	Min    int64  `json:"min"`
	Max    *int64 `json:"max"`
	Reason string `json:"-"`
	// Bytes says the figure counts bytes: text prints its ends as sizes
	// (Format).
	Bytes bool `json:"-"`
}

// PrivatePoolReserved is the key of the private pools' peak reserved
// memory among a result's figures and bounds (and check's rule name).
const PrivatePoolReserved = "private_pool_reserved"

// PrivatePoolAllocated is the key of the private pools' peak allocated
// memory among a result's bounds.
const PrivatePoolAllocated = "private_pool_allocated"

// Format renders the bound as String does, each end written by size when
// the figure counts bytes ("308.0 MiB-444.0 MiB").
func (b Bound) Format(size func(int64) string) string {
	if !b.Bytes || size == nil || b.Min == NoLowerEnd {
		return b.String()
	}
	switch {
	case b.Max == nil:
		return ">= " + size(b.Min)
	case *b.Max == b.Min:
		return size(b.Min)
	}
	return size(b.Min) + "-" + size(*b.Max)
}

// Contains reports whether x lies inside the bound.
func (b Bound) Contains(x int64) bool {
	return x >= b.Min && (b.Max == nil || x <= *b.Max)
}

// Exact reports whether the bound pins one value.
func (b Bound) Exact() bool { return b.Max != nil && *b.Max == b.Min }

// String renders the bound as the text output prints it: ">= 3" or "3-5".
func (b Bound) String() string {
	switch {
	case b.Min == NoLowerEnd && b.Max == nil:
		return "unknown"
	case b.Min == NoLowerEnd:
		return "<= " + strconv.FormatInt(*b.Max, 10)
	case b.Max == nil:
		return ">= " + strconv.FormatInt(b.Min, 10)
	case *b.Max == b.Min:
		return strconv.FormatInt(b.Min, 10)
	}
	return strconv.FormatInt(b.Min, 10) + "-" + strconv.FormatInt(*b.Max, 10)
}

// NoLowerEnd is a Bound's Min when nothing bounds the figure from below.
const NoLowerEnd = math.MinInt64

// MarshalJSON writes {"min": 3, "max": 5} ("max": null when unbounded
// above, "min": null when unbounded below).
func (b Bound) MarshalJSON() ([]byte, error) {
	if b.Min == NoLowerEnd {
		return json.Marshal(struct {
			Min *int64 `json:"min"`
			Max *int64 `json:"max"`
		}{nil, b.Max})
	}
	type plain Bound
	return json.Marshal(plain(b))
}

// Reasons printed in the notes of a bounded figure.
const (
	reasonRetries = "a cudaMalloc retried after emptying the cache leaves the same trace as torch.cuda.empty_cache() (or garbage collection) followed by a new segment; every oom entry is one retry"
	reasonSyncs   = "every torch.cuda.empty_cache() and every retry after an out-of-memory synchronizes all streams, but an empty_cache() that releases nothing leaves no trace entry"
	reasonNoTrace = "the snapshot has no trace for this device: only its final state is known"
	// reasonCaptureOOM: traceBounds with private pools.
	reasonCaptureOOM = "an out-of-memory error during a CUDA graph capture or a use_mem_pool block has no retry (malloc does not empty the cache while one is underway, on any stream of the device), and the trace does not record captures"
	// reasonPoolsVanished: a trace before 2.9 whose final state shows no
	// private pool, but which the default pools alone do not reproduce
	// (PoolsPossible).
	reasonPoolsVanished = "the snapshot shows no private pool, but before PyTorch 2.9 the trace does not say which pool each call used and a pool released before the snapshot leaves no segment in it, and the default pools alone do not reproduce this recording (some calls diverged), so private pools may have existed"
	// reasonCapturesOption: Options.Captures, where the recording shows
	// no private pool.
	reasonCapturesOption = "the program captured CUDA graphs or used use_mem_pool (--captures), and a pool released before the snapshot leaves no segment in it (before PyTorch 2.9 the trace does not say which pool each call used), so private pools may have existed"
	// reasonPoolsUnnamed: traces before 2.9.
	reasonPoolsUnnamed = "the trace does not say which pool each allocation used (trace entries carry pool_id from PyTorch 2.9), and a pool released before the snapshot leaves no mark: the lower end is the private pools' memory at the end, the upper end the device's own peak"
	// reasonPoolOpen: Pools.AmbiguousBytes.
	reasonPoolOpen = "the trace does not say which pool some segments it creates and frees belonged to (trace entries carry pool_id from PyTorch 2.9), and more than one pool (or none) reproduces them: the lower end counts them in the default pools, the upper end in private ones"
)

// poolBounds are the private pools' peaks, reserved and allocated, where
// the trace does not determine them. Nil when the peaks are exact.
//
//   - A 2.9+ trace names every entry's pool; only a call no pool or more
//     than one pool reproduces is open (AmbiguousBytes): each peak lies
//     between the replay's (those segments in the default pools) and that
//     plus all their bytes.
//   - An older trace names none, and a pool the program created and
//     released before the snapshot leaves no mark the replay can see: a
//     segment it created and freed looks like the default pools' (the
//     round-trip harness finds such runs). So each peak lies between the
//     private pools' figure at the end (exact: their segments are in the
//     snapshot) and the device's own peak.
//
// A trace before 2.9 whose final state shows no private pool (unseen:
// why pools are possible all the same, poolsUnseen: the replay diverged
// from the default pools, or the user said --captures) may still
// have had pools that were all released before the snapshot: each peak
// lies between 0 and the device's own peak.
func poolBounds(p *PoolFigures, namesPools bool, unseen string, peakReserved, peakAllocated int64) map[string]Bound {
	if !p.Any() && unseen != "" && !namesPools {
		return map[string]Bound{
			PrivatePoolReserved:  {Max: &peakReserved, Reason: unseen, Bytes: true},
			PrivatePoolAllocated: {Max: &peakAllocated, Reason: unseen, Bytes: true},
		}
	}
	if !p.Any() || namesPools && p.AmbiguousBytes == 0 {
		return nil
	}
	out := map[string]Bound{}
	for _, c := range []struct {
		key        string
		fig        allocator.Stat
		devicePeak int64
	}{{PrivatePoolReserved, p.Reserved, peakReserved}, {PrivatePoolAllocated, p.Allocated, peakAllocated}} {
		lo, hi, reason := c.fig.Peak, c.fig.Peak+p.AmbiguousBytes, reasonPoolOpen
		if !namesPools {
			lo, hi, reason = c.fig.Current, max(c.devicePeak, c.fig.Peak), reasonPoolsUnnamed
		}
		out[c.key] = Bound{Min: lo, Max: &hi, Reason: reason, Bytes: true}
	}
	return out
}

// traceBounds works out the memory_stats counters a recorded trace does
// not determine (allocator model §4, §5.3, §6.2; CUDACachingAllocator.cpp
// malloc and release_cached_blocks, 2.0 to 2.10):
//
//   - num_alloc_retries counts alloc_block(isRetry=true), which runs after
//     release_cached_blocks when cudaMalloc failed and
//     release_available_cached_blocks did not help. Every oom entry had
//     one. A retry that succeeds creates a segment after the cache was
//     emptied: segment_free/segment_unmap entries, then segment_alloc or
//     segment_map, then the alloc; an empty_cache() by the program, garbage
//     collection or release_available_cached_blocks before a new segment
//     leave the same entries. So each allocation whose entries since the
//     program's previous call show a release followed by a new segment may
//     or may not have been a retry. With expandable segments a retry needs
//     no new memory when the frees its release_cached_blocks completed
//     (free_completed apart from their free_requested) leave room next to
//     unmapped space: such allocations may have been retries too.
//   - num_sync_all_streams (2.3+) counts synchronize_and_free_events:
//     once per release_cached_blocks, i.e. per empty_cache() and per retry.
//     An empty_cache() with nothing to release and no pending frees leaves
//     no entry, so there is no upper bound. A release run the program's
//     next call does not follow with a new segment or an oom can only be
//     an empty_cache(): garbage collection and the fallbacks run inside an
//     allocation that then needs a new segment.
//
// Where the recording allows a private pool (poolReason, not empty: the
// replay saw one, or a trace before 2.9 the default pools alone do not
// reproduce, PoolsPossible), an oom may have come while a CUDA graph
// capture or (2.5+) a use_mem_pool block was underway: beginAllocateToPool
// adds to captures_underway, and while it is not empty malloc skips
// release_cached_blocks and its retry for every allocation on the device,
// whatever its stream or pool (C10_LIKELY(captures_underway.empty()) in
// malloc's fallbacks, 2.0 to 2.10). Such an oom had no retry and no
// synchronize_and_free_events, and its entries are those of a retry that
// found nothing to release: the trace does not record captures, and
// release entries before the oom may be the program's own empty_cache()
// just before a capture began. So with pools possible the ooms only raise
// the upper end. Without (the default pools reproduce every call and the
// snapshot shows no pool), every oom counts as a retry: a capture that
// leaves no other mark is assumed not to have been underway.
//
// The program's calls are the entries it makes directly: alloc, oom,
// free_requested and snapshot; free_completed and the segment events may
// come from inside an allocator call.
func traceBounds(t *traceTally, v allocator.Version, poolReason string) map[string]Bound {
	ooms, ambiguous, sureEmpty := t.ooms, t.ambiguous, t.sureEmpty
	out := map[string]Bound{}
	maxRetries := ooms + ambiguous
	sureRetries, retries, syncs := ooms, reasonRetries, reasonSyncs
	if poolReason != "" {
		sureRetries = 0
		retries += "; " + poolReason
		syncs += "; " + poolReason
	}
	out["num_alloc_retries"] = Bound{Min: sureRetries, Max: &maxRetries, Reason: retries}
	if v.HasDeviceCounters() {
		out["num_sync_all_streams"] = Bound{Min: sureRetries + sureEmpty, Reason: syncs}
	}
	return out
}

// reasonSettings is the reason of settingsBounds' bounds.
const reasonSettings = "the snapshot records no allocator settings (PyTorch before 2.3 writes none) and none were named (--alloc-conf): max_split_size_mb is unknown; -1 means no limit"

// settingsBounds are the figures that depend on max_split_size_mb when
// the file records no settings (allocator model §3.2, malloc and
// alloc_block, 2.0 to 2.2: oversize_allocations counts blocks handed out
// of at least max_split_size, oversize_segments cudaMallocs of at least
// it; memory_stats reports the setting itself, -1 for none). With no
// limit both counters stay 0; with any limit (at least 20 MiB) they
// count large-pool blocks and segments only, so each lies between 0 and
// the matching large-pool figure.
func settingsBounds(stats []allocator.KeyValue) map[string]Bound {
	byKey := make(map[string]int64, len(stats))
	for _, kv := range stats {
		byKey[kv.Key] = kv.Value
	}
	out := map[string]Bound{
		"max_split_size": {Min: -1, Reason: reasonSettings},
	}
	for _, f := range []string{"current", "peak", "allocated", "freed"} {
		for counter, of := range map[string]string{"oversize_allocations": "allocation", "oversize_segments": "segment"} {
			if upper, ok := byKey[of+".large_pool."+f]; ok {
				out[counter+"."+f] = Bound{Max: &upper, Reason: reasonSettings}
			}
		}
	}
	return out
}

// noTraceBounds are the counters' bounds for a device without a trace:
// at least what the final state needed (one cudaMalloc or map per
// segment), otherwise unknown. (Peaks and cumulative figures of such a
// device are described by its history note.)
func noTraceBounds(segments int64, v allocator.Version) map[string]Bound {
	out := map[string]Bound{}
	out["num_alloc_retries"] = Bound{Reason: reasonNoTrace}
	out["num_ooms"] = Bound{Reason: reasonNoTrace}
	if v.HasDeviceCounters() {
		out["num_sync_all_streams"] = Bound{Reason: reasonNoTrace}
		out["num_device_alloc"] = Bound{Min: segments, Reason: reasonNoTrace}
		out["num_device_free"] = Bound{Reason: reasonNoTrace}
	}
	return out
}

// applyBounds moves the bounded keys out of the exact figures. A bound
// that pins one value is no bound: the figure stays, with that value
// (the recording's, whatever the simulator counted), and the bound goes.
func applyBounds(stats []allocator.KeyValue, bounds map[string]Bound) []allocator.KeyValue {
	out := stats[:0]
	for _, kv := range stats {
		b, ok := bounds[kv.Key]
		switch {
		case !ok:
			out = append(out, kv)
		case b.Exact():
			out = append(out, allocator.KeyValue{Key: kv.Key, Value: b.Min})
			delete(bounds, kv.Key)
		}
	}
	return out
}

// BoundKeys returns the keys of bounds in memory_stats order (sorted).
func BoundKeys(bounds map[string]Bound) []string {
	keys := make([]string, 0, len(bounds))
	for k := range bounds {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// unappliedBounds are the figures a follow replay that could not apply
// some recorded entries (Fidelity.Unapplied) cannot vouch for: every peak
// and every allocated/freed total, which the state built without those
// entries may have got wrong, and the private pools' peaks. The current
// figures stay exact: the reconciliation makes the final state the
// snapshot's segments. Each bound holds whatever the state did between
// the start and the end:
//
//   - a peak is at least its current value at the start of the trace and
//     at the end;
//   - a total (allocated, freed, num_device_*) never decreases, so it is
//     at least its value at the start; the allocated totals of
//     allocations, active blocks and their bytes are at least that plus
//     what the recorded alloc entries add: one each, a block of at least
//     its rounded request (CUDACachingAllocator.cpp malloc, 2.0 to 2.10:
//     alloc_found_block adds block->size to allocated_bytes and
//     active_bytes, the request to requested_bytes; round_size never
//     rounds down);
//   - nothing caps them: Max is nil.
//
// start and end are the replay's memory_stats at the start of the trace
// (after the rebuilt starting state was seeded) and at its end; t holds
// the sums of the recorded allocations (tallyTrace).
func unappliedBounds(t *traceTally, unapplied int, start, end []allocator.KeyValue, pools *PoolFigures) map[string]Bound {
	reason := fmt.Sprintf("%s of the trace could not be applied to the replayed state (`memstat replay` lists them), so the figures built on the state between the start and the end are known only within bounds; the current figures are the final segments'",
		plural(unapplied, "recorded entry", "recorded entries"))
	startOf := make(map[string]int64, len(start))
	for _, kv := range start {
		startOf[kv.Key] = kv.Value
	}
	endOf := make(map[string]int64, len(end))
	for _, kv := range end {
		endOf[kv.Key] = kv.Value
	}
	// What the recorded allocations add to the allocated totals, by pool
	// (all, large, small): their count, rounded and requested bytes.
	count, rounded, requested := t.count, t.rounded, t.requested
	added := map[string]int64{}
	for p, pool := range []string{"all", "large_pool", "small_pool"} {
		added["allocation."+pool], added["active."+pool] = count[p], count[p]
		added["allocated_bytes."+pool], added["active_bytes."+pool] = rounded[p], rounded[p]
		added["requested_bytes."+pool] = requested[p]
	}
	out := map[string]Bound{}
	for _, kv := range end {
		k := kv.Key
		metric, field := k, ""
		if i := strings.LastIndexByte(k, '.'); i >= 0 {
			metric, field = k[:i], k[i+1:]
		}
		bytes := strings.Contains(k, "bytes")
		switch {
		case field == "peak":
			out[k] = Bound{Min: max(startOf[k], startOf[metric+".current"], endOf[metric+".current"]), Reason: reason, Bytes: bytes}
		case field == "allocated":
			out[k] = Bound{Min: startOf[k] + added[metric], Reason: reason, Bytes: bytes}
		case field == "freed", k == "num_device_alloc", k == "num_device_free":
			out[k] = Bound{Min: startOf[k], Reason: reason, Bytes: bytes}
		}
	}
	if pools.Any() {
		// The private pools' current figures are the final segments';
		// their peaks are built on the state in between.
		out[PrivatePoolReserved] = Bound{Min: pools.Reserved.Current, Reason: reason, Bytes: true}
		out[PrivatePoolAllocated] = Bound{Min: pools.Allocated.Current, Reason: reason, Bytes: true}
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
