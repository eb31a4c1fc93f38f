package root

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sbu is a pickle SHORT_BINUNICODE opcode.
func sbu(s string) string { return "\x8c" + string([]byte{byte(len(s))}) + s }

// TestErrorLineComesFirst: when a command fails, its one error line is the
// first line on stderr, before the warnings of the files it read (held
// until the command returns); when it succeeds, the warnings are printed.
func TestErrorLineComesFirst(t *testing.T) {
	dir := t.TempDir()
	// Twelve segments whose block sizes do not add up to total_size: a
	// warning each (summarised to five and a count).
	seg := "}(" + sbu("blocks") + "](}(" + sbu("state") + sbu("active_allocated") + sbu("size") + "K\x01ue" + sbu("total_size") + "K\x05u"
	warn := filepath.Join(dir, "warn.pickle")
	if err := os.WriteFile(warn, []byte("\x80\x02}("+sbu("segments")+"]("+strings.Repeat(seg, 12)+"eu."), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runMain("stats", warn)
	if code != 0 || !strings.Contains(stderr, "warning: segment") || !strings.Contains(stderr, "more warnings not shown") {
		t.Fatalf("exit %d, stderr %q: want the warnings of a good file", code, stderr)
	}
	for _, args := range [][]string{
		{"stats", warn, filepath.Join(dir, "missing.pickle")},
		{"peak", warn, "--top", "abc"},
		{"diff", warn, filepath.Join(dir, "missing.pickle")},
		{"check", warn, "--config", filepath.Join(dir, "missing.toml")},
	} {
		code, _, stderr := runMain(args...)
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		if code != 2 || strings.Contains(lines[0], "warning") || !strings.HasPrefix(lines[0], "memstat: ") {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant the error line first", args, code, stderr)
		}
	}
}
