// Package realdata finds the real snapshots that PyTorch users published,
// which tests read from ../shared/testdata/real beside the checkout. They are
// never copied into the project; a fresh clone without them skips those
// tests with a message.
package realdata

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// root is the module root, found once from the folder the test binary
// starts in (its package's): a test that changes its working directory
// (to find a ./.memstat.toml, say) must still find the real snapshots
// rather than skip.
var root = moduleRoot()

// Dir returns the folder of real snapshots, or skips the test when it is
// absent.
func Dir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("MEMSTAT_REAL_SNAPSHOTS"); d != "" {
		return d
	}
	if root != "" {
		d := filepath.Join(root, "..", "shared", "testdata", "real")
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d
		}
	}
	t.Skip("real snapshots not found (../shared/testdata/real beside the checkout, or $MEMSTAT_REAL_SNAPSHOTS); skipping")
	return ""
}

// Files returns every snapshot file in the folder (MANIFEST.tsv excluded),
// sorted by name.
func Files(t testing.TB) []string {
	t.Helper()
	dir := Dir(t)
	out, err := list(dir)
	if err != nil {
		t.Fatalf("reading %s: %v", dir, err)
	}
	if len(out) == 0 {
		t.Skipf("no snapshots in %s", dir)
	}
	return out
}

// FilesIfPresent returns the same files as Files, or nothing when the
// folder is absent or unreadable, for fuzz targets, which seed their corpus
// with the real snapshots when there are some and must run without them.
func FilesIfPresent() []string {
	dir := os.Getenv("MEMSTAT_REAL_SNAPSHOTS")
	if dir == "" {
		if root == "" {
			return nil
		}
		dir = filepath.Join(root, "..", "shared", "testdata", "real")
	}
	out, _ := list(dir)
	return out
}

// list returns the snapshot files in dir, sorted by name.
func list(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() || strings.HasSuffix(e.Name(), ".tsv") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		out = append(out, filepath.Join(dir, e.Name()))
	}
	sort.Strings(out)
	return out, nil
}

// File returns the path of one real snapshot by a unique part of its name.
func File(t testing.TB, part string) string {
	t.Helper()
	var found []string
	for _, f := range Files(t) {
		if strings.Contains(filepath.Base(f), part) {
			found = append(found, f)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want exactly one real snapshot matching %q, found %v", part, found)
	}
	return found[0]
}

func moduleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// FilesOrNote returns FilesIfPresent's files. When there are none it logs
// one line saying so and what the test checks instead (instead), so that
// a run without ../shared says what it left out.
func FilesOrNote(t testing.TB, instead string) []string {
	t.Helper()
	files := FilesIfPresent()
	if len(files) == 0 {
		t.Logf("no published snapshots (../shared/testdata/real): %s", instead)
	}
	return files
}

// Published is a published snapshot's path and bytes.
type Published struct {
	Path string
	Data []byte
}

// ReadIfPresent reads FilesOrNote's files.
func ReadIfPresent(t testing.TB, instead string) []Published {
	t.Helper()
	var out []Published
	for _, f := range FilesOrNote(t, instead) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Published{f, data})
	}
	return out
}
