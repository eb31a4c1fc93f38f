package command

import (
	"fmt"

	"github.com/memstat/memstat/pkg/snapshot"
)

// TraceDevice resolves a --device flag for a command that needs a trace:
// device >= 0 must have one; -1 picks the first device that has one.
func TraceDevice(snap *snapshot.Snapshot, file string, device int) (int, error) {
	if device >= 0 {
		if device >= snap.Devices() || snap.Trace(device).Len() == 0 {
			return 0, fmt.Errorf("%s: device %d has no trace (PyTorch records one only after torch.cuda.memory._record_memory_history())", file, device)
		}
		return device, nil
	}
	for d := range snap.Devices() {
		if snap.Trace(d).Len() > 0 {
			return d, nil
		}
	}
	return 0, fmt.Errorf("%s: no device has a trace, so there is no history to show (PyTorch records one only after torch.cuda.memory._record_memory_history())", file)
}

// StateDevice resolves a --device flag for a command that needs only the
// memory state: device >= 0 must have segments or a trace; -1 picks the
// first device that has either.
func StateDevice(snap *snapshot.Snapshot, file string, device int) (int, error) {
	if device >= 0 {
		if device >= snap.Devices() || !hasData(snap, device) {
			return 0, fmt.Errorf("%s: device %d has no segments and no trace", file, device)
		}
		return device, nil
	}
	for d := range snap.Devices() {
		if hasData(snap, d) {
			return d, nil
		}
	}
	return 0, fmt.Errorf("%s: no device has segments or a trace", file)
}

// hasData reports whether a device has segments or a trace.
func hasData(s *snapshot.Snapshot, d int) bool {
	return s.Trace(d).Len() > 0 || len(s.DeviceSegments(d)) > 0
}

// DevicesWithData lists the devices with segments or a trace.
func DevicesWithData(s *snapshot.Snapshot) []int {
	var out []int
	for d := range s.Devices() {
		if hasData(s, d) {
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
	if !hasData(s, device) {
		return nil, fmt.Errorf("%s: device %d has no segments and no trace (devices with data: %v)", file, device, DevicesWithData(s))
	}
	return []int{device}, nil
}
