package root

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// -o (and --junit) naming an input is refused by every command that
// writes a file, by name, through a symbolic link and as a hard link; the
// input is left as it was (issue 18: `export -o snap.pickle snap.pickle`
// replaced the snapshot with CSV).
func TestOutputNamingAnInputIsRefused(t *testing.T) {
	dir := t.TempDir()
	snap, data := goodSnapshot(t, dir)
	link := filepath.Join(dir, "link.pickle")
	hard := filepath.Join(dir, "hard.pickle")
	if err := os.Symlink(snap, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(snap, hard); err != nil {
		t.Fatal(err)
	}
	wl := filepath.Join(dir, "w.mem")
	os.WriteFile(wl, []byte("alloc a 1MiB\n"), 0o644)
	for _, out := range []string{snap, link, hard} {
		for _, args := range [][]string{
			{"export", snap, "-o", out},
			{"report", snap, "-o", out},
			{"pprof", snap, "-o", out},
			{"check", snap, "--max", "peak_reserved=1TiB", "--junit", out},
		} {
			code, stdout, stderr := runMain(args...)
			if code != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "refusing to overwrite it") {
				t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
			}
		}
	}
	// plot takes its format from the name: a snapshot named .svg.
	svg := filepath.Join(dir, "snap.svg")
	os.WriteFile(svg, data, 0o644)
	svgLink := filepath.Join(dir, "link.svg")
	os.Symlink(svg, svgLink)
	for _, out := range []string{svg, svgLink} {
		code, _, stderr := runMain("plot", svg, "-o", out)
		if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "refusing to overwrite it") {
			t.Errorf("plot -o %s: exit %d, stderr %q", out, code, stderr)
		}
	}
	for _, f := range []string{snap, svg} {
		if got, _ := os.ReadFile(f); !bytes.Equal(got, data) {
			t.Fatalf("%s changed", f)
		}
	}
	code, _, stderr := runMain("record", "--file", wl, "-o", wl)
	if code != 2 || !strings.Contains(stderr, "-o "+wl+" names an input file: refusing to overwrite it") {
		t.Errorf("record: exit %d, %q", code, stderr)
	}
}
