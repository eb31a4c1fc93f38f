package command

import (
	"fmt"

	"github.com/memstat/memstat/pkg/snapshot"
)

// TraceDevice resolves a --device flag for a command that needs a trace:
// device >= 0 must have one; -1 picks the first device that has one.
func TraceDevice(snap *snapshot.Snapshot, file string, device int) (int, error) {
	if device >= 0 {
		if device >= snap.Devices() || len(snap.Trace(device)) == 0 {
			return 0, fmt.Errorf("%s: device %d has no trace (PyTorch records one only after torch.cuda.memory._record_memory_history())", file, device)
		}
		return device, nil
	}
	for d := range snap.Devices() {
		if len(snap.Trace(d)) > 0 {
			return d, nil
		}
	}
	return 0, fmt.Errorf("%s: no device has a trace, so there is no history to show (PyTorch records one only after torch.cuda.memory._record_memory_history())", file)
}

// StateDevice resolves a --device flag for a command that needs only the
// memory state: device >= 0 must have segments or a trace; -1 picks the
// first device that has either.
func StateDevice(snap *snapshot.Snapshot, file string, device int) (int, error) {
	has := func(d int) bool { return len(snap.Trace(d)) > 0 || len(snap.DeviceSegments(d)) > 0 }
	if device >= 0 {
		if device >= snap.Devices() || !has(device) {
			return 0, fmt.Errorf("%s: device %d has no segments and no trace", file, device)
		}
		return device, nil
	}
	for d := range snap.Devices() {
		if has(d) {
			return d, nil
		}
	}
	return 0, fmt.Errorf("%s: no device has segments or a trace", file)
}
