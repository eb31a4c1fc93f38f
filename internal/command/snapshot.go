package command

import (
	"fmt"
	"io"

	"github.com/memstat/memstat/pkg/snapshot"
)

// LoadSnapshot reads a snapshot and prints its warnings to errOut. It
// keeps the command's heap within about the size of the files it loads
// (a soft memory limit, lifted by ReleaseHeapLimit when the command
// returns).
func LoadSnapshot(errOut io.Writer, file string) (*snapshot.Snapshot, error) {
	limitHeapFor(file)
	s, err := snapshot.Load(file)
	if err != nil {
		return nil, err
	}
	heapLoaded(s)
	for _, w := range WarningLines(file, s) {
		fmt.Fprintln(errOut, w)
	}
	return s, nil
}

// WarningLines are a snapshot's warnings as memstat prints them on stderr,
// for commands that load files in parallel and print the warnings later,
// in file order.
func WarningLines(file string, s *snapshot.Snapshot) []string {
	lines := make([]string, len(s.Warnings))
	for i, w := range s.Warnings {
		lines[i] = fmt.Sprintf("memstat: %s: warning: %s", file, w)
	}
	return lines
}
