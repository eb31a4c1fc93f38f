package command

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/report"
	"github.com/memstat/memstat/pkg/snapshot"
)

// What the commands that explain a snapshot's memory (peak, oom, segments,
// trace, diff) share: the --device and --all-frames flags, the replay of a
// device with its warnings on stderr, and a device section's title.

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
	return report.DeviceTitle(file, rp.Device, rp.Result.Version)
}
