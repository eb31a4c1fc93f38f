package check

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Rules files: a FIFO or a device is refused before it is opened (a FIFO
// blocked forever, /dev/zero grew without end), a file over 1 MiB and a
// line over 4096 bytes are refused naming the limit, and long text is cut
// in messages (issue 18).
func TestReadConfigRefusesHostileFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "rules.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFO here (%v); skipping", err)
	}
	big := filepath.Join(dir, "big.toml")
	os.WriteFile(big, []byte(strings.Repeat("# comment\n", 200_000)), 0o644)
	long := filepath.Join(dir, "long.toml")
	os.WriteFile(long, []byte("[max]\npeak_reserved = \""+strings.Repeat("9", 10<<20)+"\"\n"), 0o644)
	for path, want := range map[string]string{
		fifo:        fifo + ": not a regular file (a rules file is read from a regular file, not a FIFO)",
		"/dev/zero": "/dev/zero: not a regular file (a rules file is read from a regular file, not a device)",
		big:         big + ": larger than 1048576 bytes, the limit for a rules file",
	} {
		if _, err := ReadConfig(path); err == nil || err.Error() != want {
			t.Errorf("got %v, want %s", err, want)
		}
	}
	if _, err := ParseConfig("long.toml", "[max]\npeak_reserved = \""+strings.Repeat("9", 10<<20)+"\"\n"); err == nil || err.Error() != "long.toml:2: line longer than 4096 bytes" {
		t.Errorf("10 MB line: %v", err)
	}
	x := strings.Repeat("x", 4000)
	for _, src := range []string{
		"[" + x + "]",
		"[" + x,
		x + " = 1",
		`"` + x + `" = 1`,
		"[max]\n" + `"` + x + `" = 1`,
		"[max]\npeak_reserved = " + x,
		"[max]\npeak_reserved = \"" + x + "\"",
		"[max]\npeak_reserved = " + x + " y",
		"[max]\nsegments = " + x,
		"[max]\nfragmentation = " + x,
	} {
		_, err := ParseConfig("r.toml", src)
		if err == nil {
			t.Errorf("%.30q: no error", src)
			continue
		}
		if len(err.Error()) > 400 {
			t.Errorf("%.30q: error of %d bytes: %.100s...", src, len(err.Error()), err)
		}
	}
}

// FuzzRulesFile parses fuzzed rules files: no panic, one-line errors
// naming the file.
func FuzzRulesFile(f *testing.F) {
	f.Add("baseline = \"base.pickle\"\n[max]\npeak_reserved = \"20GiB\"\nsegments = 200\n[max-increase]\nfragmentation = \"5%\"\n")
	f.Add("[max]\n\"allocated_bytes.all.peak\" = \"1.5GiB\" # comment\n")
	f.Fuzz(func(t *testing.T, src string) {
		_, err := ParseConfig("r.toml", src)
		if err != nil && (!strings.HasPrefix(err.Error(), "r.toml:") || strings.Contains(err.Error(), "\n")) {
			t.Fatalf("error %q: want one line naming the file", err)
		}
	})
}
