package report

import (
	"fmt"
	"strings"
	"time"

	"github.com/memstat/memstat/pkg/replay"
)

// The lines that say, in words, what a replay of a snapshot's trace found:
// the headline, what the trace covers, how far the replay agrees with the
// snapshot, and the settings it ran with. `memstat stats`, `record`,
// `replay`, `advise` and the HTML report print them the same way.

// HeadlineOf is the headline of a replay.
func HeadlineOf(res *replay.Result) Headline {
	var peak *replay.Bound
	if b, ok := res.Bounds["allocated_bytes.all.peak"]; ok {
		peak = &b
	}
	var reserved *replay.Bound
	if b, ok := res.Bounds["reserved_bytes.all.peak"]; ok {
		reserved = &b
	}
	return Headline{
		PeakAllocatedBound: peak,
		PeakReservedBound:  reserved,
		PeakAllocated:      res.PeakAllocated.Bytes,
		PeakReserved:       res.PeakReserved.Bytes,
		PeakAllocatedEntry: res.PeakAllocated.Index,
		Fragmentation:      res.AtPeak.Fragmentation,
		AtPeak:             res.AtPeak,
		Partial:            res.Partial(),
		NoTrace:            res.History.Coverage == replay.CoverageNone,
	}
}

// HeadlineText is the headline of a replay in words; without a trace the
// peaks are bounds (at least the final state's).
func HeadlineText(res *replay.Result) string {
	return HeadlineOf(res).String()
}

// HistoryLine says what a replay's figures cover.
func HistoryLine(res *replay.Result) string {
	h := res.History
	switch h.Coverage {
	case replay.CoverageNone:
		return "history: none: the snapshot has no trace for this device, so the figures are its final state; peaks equal the current values and the allocated/freed/num_* counters are unknown (0)"
	case replay.CoveragePartial:
		return fmt.Sprintf("history: partial: %s%s, starting mid-run; %d segments (%s) and %d live blocks existed before the first entry, so peaks are over the recorded window only and the allocated/freed/num_* counters count only the window",
			traceEntries(h.Entries), timeRange(h), h.PreexistingSegments, Size(h.PreexistingBytes), h.PreexistingBlocks)
	}
	return fmt.Sprintf("history: complete: %s%s from an empty allocator; peaks and counters cover the whole recorded run", traceEntries(h.Entries), timeRange(h))
}

func traceEntries(n int) string {
	return Plural(n, "trace entry", "trace entries")
}

func timeRange(h replay.History) string {
	if h.FirstTimeUS == 0 {
		return ""
	}
	const layout = "2006-01-02 15:04:05.000"
	first := time.UnixMicro(h.FirstTimeUS).UTC()
	last := time.UnixMicro(h.LastTimeUS).UTC()
	return fmt.Sprintf(" (%s to %s UTC)", first.Format(layout), last.Format(layout))
}

// AgreementLine says whether a replay's final state equals the
// snapshot's, and how faithfully the trace was reproduced.
func AgreementLine(res *replay.Result) string {
	ag, f := res.Agreement, res.Fidelity
	if ag == nil {
		return "replay: what-if, no comparison with the snapshot"
	}
	if res.History.Coverage == replay.CoverageNone {
		return fmt.Sprintf("replay: nothing to replay; the state is the snapshot's (%d segments, %d blocks)", ag.Segments.Snapshot, ag.Blocks.Snapshot)
	}
	var b strings.Builder
	if ag.Exact() {
		fmt.Fprintf(&b, "replay: the final state equals the snapshot's (%d segments, %d blocks, %d requested sizes)",
			ag.Segments.Snapshot, ag.Blocks.Snapshot, ag.RequestedSizes.Snapshot)
	} else {
		fmt.Fprintf(&b, "replay: the final state differs from the snapshot's in %d places", ag.MismatchCount)
		if len(ag.Mismatches) > 0 {
			fmt.Fprintf(&b, " (first: %s)", ag.Mismatches[0])
		}
		if ag.Reconciled > 0 {
			fmt.Fprintf(&b, "; %s", ag.ReconcileNote)
		}
		if ag.Remaining > 0 {
			fmt.Fprintf(&b, "; %d differences remain, so the current figures are counted from the snapshot's segments", ag.Remaining)
		} else {
			b.WriteString("; the current figures are the snapshot's")
		}
	}
	fmt.Fprintf(&b, "; %d/%d placements and %d/%d segment events reproduced", f.Placements.Reproduced, f.Placements.Recorded,
		f.SegmentEvents.Reproduced, f.SegmentEvents.Recorded)
	if f.Divergences > 0 || f.Unapplied > 0 {
		fmt.Fprintf(&b, " (%d divergences forced back to the recording, %d entries not applied)", f.Divergences, f.Unapplied)
	}
	return b.String()
}

// FidelityLine sums up how many recorded decisions the simulator made
// itself in a replay that follows the recording.
func FidelityLine(rec *replay.Result) string {
	f := rec.Fidelity
	s := fmt.Sprintf("fidelity with the recorded settings: %d/%d segment events (same size, same order), %d/%d placements (same offset in the same segment), %d forced operations",
		f.SegmentEvents.Reproduced, f.SegmentEvents.Recorded, f.Placements.Reproduced, f.Placements.Recorded, f.ForcedOperations)
	if f.EmptyCacheCalls > 0 {
		s += fmt.Sprintf(", %d empty_cache() calls", f.EmptyCacheCalls)
	}
	if f.Unapplied > 0 {
		s += fmt.Sprintf(", %d entries not applied", f.Unapplied)
	}
	return s
}

// AllocConfText names allocator settings in a sentence:
// PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True", or
// PYTORCH_CUDA_ALLOC_CONF="" (the defaults).
func AllocConfText(conf string) string {
	if conf == "" {
		return `PYTORCH_CUDA_ALLOC_CONF="" (the defaults)`
	}
	return fmt.Sprintf("PYTORCH_CUDA_ALLOC_CONF=%q", conf)
}

// DeviceMemoryText says how much device memory a replay had and where the
// figure came from (a replay's CapacitySource: "option" is --device-memory).
// Capacity 0 is unlimited; unlimitedHint, when not "", says what to do
// about it.
func DeviceMemoryText(capacity int64, source, unlimitedHint string) string {
	switch {
	case capacity == 0 && unlimitedHint != "":
		return "unlimited device memory (no oom entry to derive it from; " + unlimitedHint + ")"
	case capacity == 0:
		return "unlimited device memory (no oom entry to derive it from)"
	case source == "option":
		return Size(capacity) + " of device memory (--device-memory)"
	}
	return fmt.Sprintf("%s of device memory (%s)", Size(capacity), source)
}
