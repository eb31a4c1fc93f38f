package command

import (
	"fmt"
	"io"
	"os"

	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/report"
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

// LoadSnapshotScanned is LoadSnapshot with the start rebuild's pass over
// the trace run beside the reading (replay.StartScan, on the core the
// decoder leaves idle), as stats does: the replay that takes it (via
// analysis.Want.StartScan or replay.Options.StartScan) scans only the
// trace's last part. Not for a file over StartScanMaxFile, or not a
// regular file: scan is nil then. The caller stops a scan it was given
// (StartScan.Stop) once its replays are made.
func LoadSnapshotScanned(errOut io.Writer, file string) (s *snapshot.Snapshot, scan *replay.StartScan, err error) {
	limitHeapFor(file)
	var lo snapshot.LoadOptions
	if st, serr := os.Stat(file); serr == nil && st.Mode().IsRegular() && st.Size() <= StartScanMaxFile {
		scan = replay.NewStartScan()
		lo.TraceGrown = scan.Grown
	}
	s, err = snapshot.LoadWith(file, lo)
	if err != nil {
		if scan != nil {
			scan.Stop()
		}
		return nil, nil, err
	}
	// The scan's sets, live now, are the start rebuild's, which the
	// replay's need counts already.
	aside := int64(0)
	if scan != nil {
		for _, tr := range s.Traces {
			aside += startScanPerEntry * int64(tr.Len())
		}
	}
	heapLoadedAside(s, aside)
	for _, w := range WarningLines(file, s) {
		fmt.Fprintln(errOut, w)
	}
	return s, scan, nil
}

// StartScanMaxFile is the largest file LoadSnapshotScanned scans beside
// its reading: the scan's address sets (some 11 bytes a trace entry) live
// beside the decoder's peak, which above the heap limit's floor they
// raise (stats' startScanMaxFile, the same bound).
const StartScanMaxFile = 256 << 20

// startScanPerEntry is the scan's address sets per trace entry, about
// (torch-100MB: 860,000 entries, some 9-10 MB).
const startScanPerEntry = 11

// WarningLines are a snapshot's warnings as memstat prints them on stderr,
// for commands that load files in parallel and print the warnings later,
// in file order (see SummarizeWarnings).
func WarningLines(file string, s *snapshot.Snapshot) []string {
	return SummarizeWarnings(file+": warning", s.Warnings)
}

// MaxWarnings is how many warnings of one kind (one file's loading, one
// device's replay) are printed; the rest are counted in one more line, so
// that an error is never buried under hundreds of warnings.
const MaxWarnings = 5

// SummarizeWarnings returns warnings as the lines memstat prints on
// stderr, "memstat: PREFIX: WARNING", with control characters escaped (a
// warning may quote the file), at most MaxWarnings of them and a line
// counting the rest.
func SummarizeWarnings(prefix string, warnings []string) []string {
	n := min(len(warnings), MaxWarnings)
	lines := make([]string, 0, n+1)
	for _, w := range warnings[:n] {
		lines = append(lines, report.Escape(fmt.Sprintf("memstat: %s: %s", prefix, w)))
	}
	if rest := len(warnings) - n; rest > 0 {
		lines = append(lines, report.Escape(fmt.Sprintf("memstat: %s: %d more warnings not shown", prefix, rest)))
	}
	return lines
}

// PrintWarnings prints SummarizeWarnings' lines to errOut.
func PrintWarnings(errOut io.Writer, prefix string, warnings []string) {
	for _, l := range SummarizeWarnings(prefix, warnings) {
		fmt.Fprintln(errOut, l)
	}
}

// StreamSnapshot reads file as LoadSnapshot does, under the same heap
// limit, handing each trace entry to fn as it decodes instead of keeping
// the trace (snapshot.Stream); the file's warnings are printed at the end.
// fn's error comes back as it is.
func StreamSnapshot(errOut io.Writer, file string, fn func(*snapshot.StreamedEntry) error) (*snapshot.Streamed, error) {
	limitHeapFor(file)
	st, err := snapshot.Stream(file, fn)
	if err != nil {
		return nil, err
	}
	for _, w := range WarningLines(file, st.Snapshot) {
		fmt.Fprintln(errOut, w)
	}
	return st, nil
}
