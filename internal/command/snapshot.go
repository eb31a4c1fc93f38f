package command

import (
	"fmt"
	"io"

	"github.com/memstat/memstat/pkg/snapshot"
)

// LoadSnapshot reads a snapshot and prints its warnings to errOut.
func LoadSnapshot(errOut io.Writer, file string) (*snapshot.Snapshot, error) {
	s, err := snapshot.Load(file)
	if err != nil {
		return nil, err
	}
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
