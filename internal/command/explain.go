package command

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/snapshot"
)

// What the commands that explain a snapshot's memory (peak, oom, segments,
// trace, diff) share: the --device and --all-frames flags, loading with
// warnings on stderr, and the devices to report.

// AddDeviceFlag registers --device (default -1: every device with data).
func AddDeviceFlag(cmd *cobra.Command, device *int) {
	cmd.Flags().IntVar(device, "device", -1, "report only this device (default: every device with segments or a trace)")
}

// AddAllFramesFlag registers --all-frames. Stacks hide PyTorch's internal
// frames by default (its own Python code, code it generated, native
// frames), so that the user's own code comes first.
func AddAllFramesFlag(cmd *cobra.Command, all *bool) {
	cmd.Flags().BoolVar(all, "all-frames", false, "show PyTorch-internal and native frames too (default: hidden, the user's code first)")
}

// LoadSnapshot reads a snapshot and prints its warnings to errOut.
func LoadSnapshot(errOut io.Writer, file string) (*snapshot.Snapshot, error) {
	s, err := snapshot.Load(file)
	if err != nil {
		return nil, err
	}
	for _, w := range s.Warnings {
		fmt.Fprintf(errOut, "memstat: %s: warning: %s\n", file, w)
	}
	return s, nil
}

// DevicesWithData lists the devices with segments or a trace.
func DevicesWithData(s *snapshot.Snapshot) []int {
	var out []int
	for d := range s.Devices() {
		if len(s.Trace(d)) > 0 || len(s.DeviceSegments(d)) > 0 {
			out = append(out, d)
		}
	}
	return out
}

// SelectDevices returns the devices to report: the one --device names
// (an error if it has no data) or every device with data.
func SelectDevices(file string, s *snapshot.Snapshot, device int) ([]int, error) {
	if device < 0 {
		return DevicesWithData(s), nil
	}
	if len(s.Trace(device)) == 0 && len(s.DeviceSegments(device)) == 0 {
		return nil, fmt.Errorf("%s: device %d has no segments and no trace (devices with data: %v)", file, device, DevicesWithData(s))
	}
	return []int{device}, nil
}

// ReplayDevice replays one device, printing the replay's warnings to
// errOut.
func ReplayDevice(errOut io.Writer, file string, s *snapshot.Snapshot, device int) (*analysis.Replayed, error) {
	rp, err := analysis.Replay(s, device)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for _, w := range rp.Result.Warnings {
		fmt.Fprintf(errOut, "memstat: %s: device %d: %s\n", file, device, w)
	}
	return rp, nil
}

// DeviceTitle is a device section's title: "snap.pickle, device 0
// (PyTorch 2.5)".
func DeviceTitle(file string, rp *analysis.Replayed) string {
	return fmt.Sprintf("%s, device %d (PyTorch %s)", filepath.Base(file), rp.Device, rp.Result.Version)
}
