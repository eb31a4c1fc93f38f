package root

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
)

// FuzzCommands runs the commands on fuzzed snapshot bytes: every path from
// the bytes to the output (decoder, reader, replay in follow and what-if
// mode, advise, peak, oom, segments, trace, export, the HTML report,
// check). None may panic (a panic is "internal error" from root.Main) or
// print a Go stack; a failure is exit 2 with one line on stderr. Seeds: a
// recorded snapshot, and the real ones when present (mutated by the fuzzer).
func FuzzCommands(f *testing.F) {
	dir := f.TempDir()
	_, data := goodSnapshot(f, dir)
	f.Add(data)
	// The small real snapshots only: each input runs twelve commands,
	// and CI fuzzes for seconds.
	for _, p := range realdata.FilesIfPresent() {
		if st, err := os.Stat(p); err == nil && st.Size() < 40<<10 {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		snap := filepath.Join(dir, "f.pickle")
		if err := os.WriteFile(snap, data, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"stats", snap},
			{"peak", snap},
			{"oom", snap},
			{"segments", snap},
			{"trace", snap},
			{"trace", "--stream", "--json", snap},
			{"replay", snap, "--alloc-conf", "expandable_segments:True"},
			{"replay", snap, "--alloc-conf", "roundup_power2_divisions:4,garbage_collection_threshold:0.6", "--device-memory", "1GiB"},
			{"advise", snap},
			{"export", snap, "-o", filepath.Join(dir, "out.csv")},
			{"report", snap, "-o", filepath.Join(dir, "out.html")},
			{"check", snap, "--max", "peak_reserved=1GiB"},
		} {
			code, _, stderr := runMain(args...)
			if strings.Contains(stderr, "internal error") || strings.Contains(stderr, "goroutine ") {
				t.Fatalf("%s: panicked: %s", args[0], stderr)
			}
			switch code {
			case 0, 1:
			case 2:
				if n := strings.Count(stderr, "\n"); n == 0 || !strings.Contains(stderr, "memstat: ") {
					t.Fatalf("%s: exit 2 with stderr %q", args[0], stderr)
				}
			default:
				t.Fatalf("%s: exit %d", args[0], code)
			}
		}
	})
}
