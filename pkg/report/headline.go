package report

import (
	"fmt"
	"github.com/memstat/memstat/pkg/snapshot"
	"path/filepath"
	"strings"

	"github.com/memstat/memstat/pkg/replay"
)

// Headline is the one line `memstat stats` and `memstat record` print per
// device: the figures people look at first.
type Headline struct {
	PeakAllocated int64 `json:"peak_allocated"`
	PeakReserved  int64 `json:"peak_reserved"`
	// PeakAllocatedEntry is the trace entry after which allocated memory
	// first reached its peak (-1: before the first one), where AtPeak is
	// taken.
	PeakAllocatedEntry int `json:"peak_allocated_entry"`
	// Fragmentation is the share of reserved memory stranded at the peak
	// of allocated memory: free space inside segments that hold live
	// blocks (AtPeak.Fragmentation).
	Fragmentation float64 `json:"fragmentation"`
	// AtPeak splits the reserved memory at the peak of allocated memory
	// (see replay.Unused).
	AtPeak replay.Unused `json:"at_peak_allocated"`
	// Partial is true when the trace does not start from an empty
	// allocator, so peaks are over the recorded window only (or there is
	// no trace, NoTrace).
	Partial bool `json:"partial_history"`
	// NoTrace is true when the snapshot has no trace: the peaks are at
	// least the final state's figures, nothing more is known.
	NoTrace bool `json:"no_trace,omitempty"`
	// PeakAllocatedBound is allocated_bytes.all.peak's bound where the
	// recording does not determine block sizes (a runtime settings
	// switch): PeakAllocated and the figures at it are then the replay's
	// choice within it.
	PeakAllocatedBound *replay.Bound `json:"peak_allocated_bound,omitempty"`
	// PeakReservedBound is reserved_bytes.all.peak's bound where the
	// replay could not apply some recorded entries: both peaks, and the
	// figures at the allocated one, are then the state the replay reached
	// within the bounds.
	PeakReservedBound *replay.Bound `json:"peak_reserved_bound,omitempty"`
}

func (h Headline) String() string {
	var s string
	if h.NoTrace {
		s = fmt.Sprintf("peak allocated at least %s, peak reserved at least %s (no trace: only the final state is known); %s",
			Size(h.PeakAllocated), Size(h.PeakReserved), strings.Replace(UnusedText(h.AtPeak), "at the allocated peak", "in the final state", 1))
	} else {
		at := "before the first trace entry"
		if h.PeakAllocatedEntry >= 0 {
			at = fmt.Sprintf("after entry %d", h.PeakAllocatedEntry)
		}
		s = fmt.Sprintf("peak allocated %s, peak reserved %s; %s", Size(h.PeakAllocated), Size(h.PeakReserved),
			strings.Replace(UnusedText(h.AtPeak), "at the allocated peak", "at the allocated peak ("+at+")", 1))
		if b, rb := h.PeakAllocatedBound, h.PeakReservedBound; b != nil && rb != nil {
			b.Bytes, rb.Bytes = true, true
			s = fmt.Sprintf("peak allocated %s, peak reserved %s (bounds: some recorded entries could not be applied); %s, in the state the replay reached",
				b.Format(Size), rb.Format(Size), strings.Replace(UnusedText(h.AtPeak), "at the allocated peak", "at the allocated peak ("+at+")", 1))
		} else if b != nil {
			b.Bytes = true
			s = fmt.Sprintf("peak allocated %s (a bound: block sizes are known within bounds), peak reserved %s; %s, with the block sizes the replay chose",
				b.Format(Size), Size(h.PeakReserved), strings.Replace(UnusedText(h.AtPeak), "at the allocated peak", "at the allocated peak ("+at+")", 1))
		}
	}
	if h.Partial && !h.NoTrace {
		s += " (over the recorded window only: the trace starts mid-run)"
	}
	return s
}

// UnusedText says what of the reserved memory at the allocated peak no
// tensor used: "at the allocated peak 1.2 GiB of 9.0 GiB reserved was
// unused (13.3%): fragmentation 2.0% (180.0 MiB stranded in segments with
// live blocks), 11.3% cached (1.0 GiB in free segments)".
func UnusedText(u replay.Unused) string {
	return fmt.Sprintf("at the allocated peak %s of %s reserved was unused (%s): fragmentation %s (%s stranded in segments with live blocks), %s cached (%s in free segments)",
		Size(u.Unused), Size(u.Reserved), Percent(u.UnusedShare), Percent(u.Fragmentation), Size(u.Stranded), Percent(u.CachedShare), Size(u.Cached))
}

// SimulatedNote is the line the commands that show trace times print for
// a file memstat record wrote, so that its times are not taken for a
// measurement; "" for files PyTorch wrote.
func SimulatedNote(r *snapshot.Recorder) string {
	if r == nil {
		return ""
	}
	tm := r.TimeModel
	if tm == "" {
		tm = "not stated"
	}
	return Escape(fmt.Sprintf("Recorded by %s (workload %s), not by PyTorch; times %s.", r.Tool, r.Workload, tm))
}

// DeviceTitle is the title of a device's section in the reports of the
// commands that take a snapshot file: "snap.pickle, device 0 (PyTorch
// 2.5)", the file without its folder.
func DeviceTitle(file string, device int, torchVersion string) string {
	return fmt.Sprintf("%s, device %d (PyTorch %s)", filepath.Base(file), device, torchVersion)
}
