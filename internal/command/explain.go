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
// trace, diff) share: their one argument, the --device and --all-frames
// flags, the replay of a device with its warnings on stderr, and a device
// section's title.

// OneSnapshot is the Args check of a command that reads one snapshot;
// usage ("memstat peak FILE") completes its error.
func OneSnapshot(usage string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			return FlagErrorf("want one snapshot: %s", usage)
		}
		return nil
	}
}

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
	return ReplayDeviceFor(errOut, file, s, device, analysis.Want{})
}

// ReplayDeviceFor is ReplayDevice capturing the states want names in the
// same replay (analysis.ReplayFor).
func ReplayDeviceFor(errOut io.Writer, file string, s *snapshot.Snapshot, device int, want analysis.Want) (*analysis.Replayed, error) {
	rp, err := analysis.ReplayFor(s, device, want)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	PrintWarnings(errOut, fmt.Sprintf("%s: device %d", file, device), rp.Result.Warnings)
	return rp, nil
}

// ReplayEach replays each device SelectDevices picks for --device and
// analyses it with analyse, in device order, and returns the results. An
// error of analyse is prefixed with the file's name. When no device has
// data it says so on errOut and returns none: the command still prints its
// (empty) report.
func ReplayEach[T any](errOut io.Writer, file string, s *snapshot.Snapshot, device int, analyse func(*analysis.Replayed) (T, error)) ([]T, error) {
	return ReplayEachFor(errOut, file, s, device, analysis.Want{}, analyse)
}

// ReplayEachFor is ReplayEach whose replays capture the states want names
// (the ones analyse asks for), so that analyse does not replay again.
func ReplayEachFor[T any](errOut io.Writer, file string, s *snapshot.Snapshot, device int, want analysis.Want, analyse func(*analysis.Replayed) (T, error)) ([]T, error) {
	devices, err := SelectDevices(file, s, device)
	if err != nil {
		return nil, err
	}
	var out []T
	for _, d := range devices {
		rp, err := ReplayDeviceFor(errOut, file, s, d, want)
		if err != nil {
			return nil, err
		}
		r, err := analyse(rp)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		fmt.Fprintf(errOut, "memstat: %s: no device has segments or a trace\n", file)
	}
	return out, nil
}

// DeviceTitle is a device section's title: "snap.pickle, device 0
// (PyTorch 2.5)".
func DeviceTitle(file string, rp *analysis.Replayed) string {
	return report.DeviceTitle(file, rp.Device, rp.Result.Version)
}
