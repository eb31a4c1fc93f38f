// Package golden compares command output with golden files under a test
// package's testdata/, pprof style: a mismatch prints a diff, and
// `go test ./... -update` rewrites the files.
package golden

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files with the current output")

// Check compares got with testdata/<name>.golden.
func Check(t testing.TB, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run with -update to create it): %v", err)
	}
	if string(got) != string(want) {
		t.Errorf("output differs from %s (run with -update to accept):\n%s", path, diff(t, want, got))
	}
}

func diff(t testing.TB, want, got []byte) string {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "want"), filepath.Join(dir, "got")
	os.WriteFile(a, want, 0o644)
	os.WriteFile(b, got, 0o644)
	out, _ := exec.Command("diff", "-u", a, b).CombinedOutput()
	if len(out) > 4000 {
		out = append(out[:4000], "\n..."...)
	}
	return string(out)
}
