package command

import "github.com/memstat/memstat/pkg/report"

// ParseDeviceMemory reads the --device-memory flag of the commands that
// replay a trace on a GPU of another size: a positive size in binary
// (24GiB, 24G) or decimal (80GB) units.
func ParseDeviceMemory(s string) (int64, error) {
	n, err := report.ParseSize(s)
	if err != nil {
		return 0, FlagErrorf("--device-memory: %v", err)
	}
	if n <= 0 {
		return 0, FlagErrorf("--device-memory must be positive")
	}
	return n, nil
}
