package allocator

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a PyTorch release (major.minor) whose allocator behaviour the
// simulator reproduces. It is encoded as major*100+minor so that versions
// compare with < and can be constants; there is no package-level mutable
// state to configure.
//
// Every decision or format that changed between releases is switched on a
// Version (see the feature predicates below); everything else is shared.
type Version uint16

// Releases the simulator knows about. Versions between or after them behave
// like the nearest earlier one.
const (
	V2_0  Version = 200
	V2_1  Version = 201
	V2_2  Version = 202
	V2_3  Version = 203
	V2_4  Version = 204
	V2_5  Version = 205
	V2_6  Version = 206
	V2_7  Version = 207
	V2_8  Version = 208
	V2_9  Version = 209
	V2_10 Version = 210

	// Latest is the newest behaviour modelled and the default everywhere.
	Latest = V2_10
)

// ParseVersion accepts "2.3", "2.3.1", "v2.4", "2.9.0+cu128", "2.10.0a0" and
// returns the major.minor part. Releases before 2.0 are rejected: their
// snapshot and config formats are not modelled.
func ParseVersion(s string) (Version, error) {
	t := strings.TrimPrefix(strings.TrimSpace(s), "v")
	if i := strings.IndexAny(t, "+ "); i >= 0 {
		t = t[:i]
	}
	parts := strings.SplitN(t, ".", 3)
	if len(parts) < 2 {
		return 0, fmt.Errorf("allocator: version %q: want major.minor", s)
	}
	major, err := strconv.Atoi(parts[0])
	if err != nil {
		return 0, fmt.Errorf("allocator: version %q: bad major", s)
	}
	// The minor part may carry a pre-release suffix ("10a0", "4rc1").
	minorDigits := parts[1]
	for i, r := range minorDigits {
		if r < '0' || r > '9' {
			minorDigits = minorDigits[:i]
			break
		}
	}
	minor, err := strconv.Atoi(minorDigits)
	if err != nil || minor > 99 {
		return 0, fmt.Errorf("allocator: version %q: bad minor", s)
	}
	if major != 2 {
		return 0, fmt.Errorf("allocator: version %q: only PyTorch 2.x is modelled", s)
	}
	return Version(major*100 + minor), nil
}

// String renders the version as "major.minor".
func (v Version) String() string {
	return fmt.Sprintf("%d.%d", v/100, v%100)
}

// The predicates below name each behaviour difference of the allocator model
// §13, so that call sites read as the decision they implement. Each is a
// row of docs/versions.md ("Decisions and counters", "Settings keys",
// "Snapshot keys"), which gives its source; the OOM text is in oom.go and
// the read-back ranges in guess.go, with rows of their own there.

// roundsUnitDivisionsRaw: 2.0-2.3 returned the request unrounded when the
// roundup_power2_divisions entry was 1 (fixed by PR #126830 in 2.4).
func (v Version) roundsUnitDivisionsRaw() bool { return v < V2_4 }

// HasDeviceCounters: num_sync_all_streams, num_device_alloc and
// num_device_free appeared in 2.3 (PR #120050).
func (v Version) HasDeviceCounters() bool { return v >= V2_3 }

// HasExpandableSegments: the expandable_segments option exists from 2.1.
func (v Version) HasExpandableSegments() bool { return v >= V2_1 }

// skipsExpandableInRelease: from 2.5 (PR #134338) garbage collection and
// release_available_cached_blocks leave expandable blocks alone; before,
// reaching one tripped an internal assert.
func (v Version) skipsExpandableInRelease() bool { return v >= V2_5 }

// hasMaxNonSplitRounding: the max_non_split_rounding_mb option (PR #136174,
// 2.6); before it the oversize tolerance is the constant 20 MiB.
func (v Version) hasMaxNonSplitRounding() bool { return v >= V2_6 }

// printsAllowedInfo: from PR #99699 (2.1) malloc computed allowed_info
// but left it out of the message; PR #129546 ("Restore allowed_info in OOM
// message when applicable", merged 2024-06-29, after the release/2.4
// branch cut) printed it again, so 2.5 is the first release since 2.0 to
// print "A allowed; " (v2.6.0 read). 2.0 prints it in its own format.
func (v Version) printsAllowedInfo() bool { return v >= V2_5 }

// tokenizerParser: 2.9 moved config parsing to AcceleratorAllocatorConfig
// with a tokenizer, new error messages, max_split_size_mb >= 20 and a
// different ">" list fill.
func (v Version) tokenizerParser() bool { return v >= V2_9 }

// fractionOneUnlimited: newest code (PR #161035) treats a memory fraction of
// 1.0 as "no limit" instead of "limit = total".
func (v Version) fractionOneUnlimited() bool { return v >= V2_10 }

// hasTimeUS: trace entries carry time_us from 2.2 (PR #112266).
func (v Version) hasTimeUS() bool { return v >= V2_2 }

// hasCompileContext: trace entries carry compile_context from 2.8.
func (v Version) hasCompileContext() bool { return v >= V2_8 }

// hasUserMetadata: trace entries carry user_metadata from 2.10 (PR #165490).
func (v Version) hasUserMetadata() bool { return v >= V2_10 }

// HasAllocatorSettings: snapshots carry allocator_settings from 2.3.
func (v Version) HasAllocatorSettings() bool { return v >= V2_3 }

// hasAnnotations: snapshots carry external_annotations from 2.5.
func (v Version) hasAnnotations() bool { return v >= V2_5 }

// clearsTraceOnEveryRecordHistory: in 2.0 every _record_memory_history call
// cleared the ring buffer; later only disabling (or clear_history) does.
func (v Version) clearsTraceOnEveryRecordHistory() bool { return v < V2_1 }

// hasClearHistory: _record_memory_history(clear_history=...) (≈2.6).
func (v Version) hasClearHistory() bool { return v >= V2_6 }

// hasSkipActions: _record_memory_history(skip_actions=...) (≈2.9).
func (v Version) hasSkipActions() bool { return v >= V2_9 }

// HasMemPool: torch.cuda.MemPool and use_mem_pool exist from 2.5 (PR
// #131152); before, private pools come from CUDA-graph capture only.
func (v Version) HasMemPool() bool { return v >= V2_5 }

// PrivatePoolsExpandable: from 2.4 alloc_block maps expandable segments
// for private pools too (2.1-2.3 excluded them with !owner_PrivatePool).
func (v Version) PrivatePoolsExpandable() bool { return v >= V2_4 }

// CapturesGuardEmptyCache: 2.9's release_cached_blocks leaves the default
// pools alone while a capture is underway (only freeable private pools
// are released); earlier releases synchronize and release them anyway.
func (v Version) CapturesGuardEmptyCache() bool { return v >= V2_9 }

// TracesPoolID: trace entries carry pool_id from 2.9.
func (v Version) TracesPoolID() bool { return v >= V2_9 }
