package report

import (
	"fmt"
	"path/filepath"
)

// Headline is the one line `memstat stats` and `memstat record` print per
// device: the figures people look at first.
type Headline struct {
	PeakAllocated int64 `json:"peak_allocated"`
	PeakReserved  int64 `json:"peak_reserved"`
	// Fragmentation is the share of reserved memory that no tensor used
	// ((reserved - allocated) / reserved) at the moment reserved memory
	// peaked: what the cache held beyond the live tensors when it cost the
	// most.
	Fragmentation float64 `json:"fragmentation"`
	// Partial is true when the trace does not start from an empty
	// allocator, so peaks are over the recorded window only.
	Partial bool `json:"partial_history"`
}

func (h Headline) String() string {
	s := fmt.Sprintf("peak allocated %s, peak reserved %s, fragmentation %s at peak reserved",
		Size(h.PeakAllocated), Size(h.PeakReserved), Percent(h.Fragmentation))
	if h.Partial {
		s += " (over the recorded window only: the trace starts mid-run)"
	}
	return s
}

// DeviceTitle is the title of a device's section in the reports of the
// commands that take a snapshot file: "snap.pickle, device 0 (PyTorch
// 2.5)", the file without its folder.
func DeviceTitle(file string, device int, torchVersion string) string {
	return fmt.Sprintf("%s, device %d (PyTorch %s)", filepath.Base(file), device, torchVersion)
}
