package command

import (
	"bytes"
	"path/filepath"
	"slices"
	"testing"

	"github.com/memstat/memstat/pkg/snapshot"
)

// A snapshot whose blocks do not tile their segment loads with a warning,
// which every command prints the same way, at once or later.
func TestLoadSnapshotWarnings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "torn.pickle")
	s := &snapshot.Snapshot{
		Stacks: snapshot.NewStacks(),
		Segments: []snapshot.Segment{{
			Address: 0x7f0000000000, TotalSize: 2 << 20,
			Blocks: []snapshot.Block{{Address: 0x7f0000000000, Size: 1 << 20, RequestedSize: 1 << 20, State: snapshot.ActiveAllocated}},
		}},
	}
	if err := snapshot.WriteFile(path, s); err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	got, err := LoadSnapshot(&errOut, path)
	if err != nil {
		t.Fatal(err)
	}
	want := "memstat: " + path + ": warning: segment 0x7f0000000000 (device 0): block sizes add up to 1048576, not total_size 2097152\n"
	if errOut.String() != want {
		t.Errorf("stderr = %q, want %q", errOut.String(), want)
	}
	if lines := WarningLines(path, got); !slices.Equal(lines, []string{want[:len(want)-1]}) {
		t.Errorf("WarningLines = %q, want the stderr line", lines)
	}
}

func TestLoadSnapshotError(t *testing.T) {
	var errOut bytes.Buffer
	if _, err := LoadSnapshot(&errOut, filepath.Join(t.TempDir(), "missing.pickle")); err == nil {
		t.Fatal("no error for a missing file")
	}
	if errOut.Len() != 0 {
		t.Errorf("stderr = %q, want nothing", errOut.String())
	}
}
