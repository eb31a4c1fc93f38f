package root

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hostileText is what a hostile snapshot might hold in a name: set the
// terminal's title (OSC 0 ... BEL), clear the screen (CSI 2J), a C1 CSI
// (U+009B), and a newline that would start a forged line.
const hostileText = "\x1b]0;pwned\x07\x1b[2J\u009b31m\nforged"

// noControl fails when out holds a control character other than newline
// and tab: a terminal would interpret it.
func noControl(t *testing.T, what, out string) {
	t.Helper()
	for i, r := range out {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r >= 0x80 && r < 0xa0 {
			t.Errorf("%s: control character %U at byte %d: %q", what, r, i, out[max(0, i-40):min(len(out), i+40)])
			return
		}
	}
	if strings.Contains(out, "\nforged") {
		t.Errorf("%s: a name's newline starts a line of its own", what)
	}
}

// Terminal escape injection (issue 18): frame, file and annotation names
// from a snapshot, and section names of a rules file, reach the terminal
// escaped in every text output and in messages.
func TestNoTerminalEscapesFromInput(t *testing.T) {
	dir := t.TempDir()
	wl := filepath.Join(dir, "evil"+hostileText+".mem")
	src := "phase \"" + strings.ReplaceAll(hostileText, "\n", "") + "\"\n  alloc a 30GiB\n  alloc b 30GiB\n  free a\n  alloc c 60GiB\nend\n"
	if err := os.WriteFile(wl, []byte(src), 0o644); err != nil {
		t.Skipf("cannot name a file with control characters here (%v); skipping", err)
	}
	snap := filepath.Join(dir, "snap.pickle")
	if code, _, stderr := runMain("record", "--file", wl, "--device-memory", "80GiB", "-o", snap); code != 0 {
		t.Fatalf("record: exit %d: %s", code, stderr)
	}
	rules := filepath.Join(dir, "rules.toml")
	os.WriteFile(rules, []byte("["+hostileText[:20]+"max]\npeak_reserved = \"1GiB\"\n"), 0o644)
	for _, args := range [][]string{
		{"stats", snap}, {"peak", snap}, {"peak", snap, "--by", "phase"}, {"oom", snap}, {"segments", snap},
		{"trace", snap}, {"diff", snap, snap}, {"replay", snap}, {"advise", snap},
		{"check", snap, "--max", "peak_reserved=1GiB"}, {"check", snap, "--config", rules},
		{"peak", snap, "--format", "markdown"}, {"trace", snap, "--format", "markdown"},
		{"stats", wl}, {"record", "--file", wl + "x", "-o", snap + "2"},
	} {
		_, stdout, stderr := runMain(args...)
		noControl(t, strings.Join(args[:1], " ")+" stdout", stdout)
		noControl(t, strings.Join(args[:1], " ")+" stderr", stderr)
	}
}
