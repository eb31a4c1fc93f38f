package snapshot

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
)

// checkFlatDicts checks that reading data with the decoder's flat-dict path
// (pickle.FlatDictCompactor: trace entries, blocks and frames compacted with
// no container made for them) gives the snapshot, or the error, that
// reading it without gives.
func checkFlatDicts(t *testing.T, name string, data []byte) {
	t.Helper()
	want, wantErr := readFlat(bytes.NewReader(data), int64(len(data)), nil, false)
	got, err := readFlat(bytes.NewReader(data), int64(len(data)), nil, true)
	if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
		t.Fatalf("%s: with the flat-dict path: %v; without: %v", name, err, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: the flat-dict path reads a different snapshot", name)
	}
}

// TestFlatDictsSameSnapshot: every published snapshot and generated
// snapshots shaped as the benchmark's (gen_snapshot.py: torch, torch in
// protocol 2, fresh and PyTorch 2.0's shape) read the same with the
// flat-dict path as without.
func TestFlatDictsSameSnapshot(t *testing.T) {
	for _, p := range realdata.ReadIfPresent(t, "skipping them") {
		checkFlatDicts(t, filepath.Base(p.Path), p.Data)
	}
	gen := filepath.Join("..", "..", "..", "shared", "tools", "gen_snapshot.py")
	py, err := exec.LookPath("python3")
	if _, serr := os.Stat(gen); err != nil || serr != nil {
		t.Skip("python3 or ../shared/tools/gen_snapshot.py missing: skipping the generated snapshots")
	}
	for _, args := range [][]string{
		{"--mode", "torch"}, {"--mode", "torch", "--protocol", "2"}, {"--mode", "fresh"}, {"--mode", "py20"},
	} {
		mode := args[1] + args[len(args)-1]
		out := filepath.Join(t.TempDir(), mode+".pickle")
		cmd := exec.Command(py, append([]string{gen, "--entries", "8000", "--segments", "100", "--seed", "3", out}, args...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gen_snapshot.py: %v\n%s", err, b)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		checkFlatDicts(t, mode, data)
	}
}
