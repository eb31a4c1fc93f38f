package command

import (
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/memstat/memstat/pkg/snapshot"
)

// TestLoadSnapshotLimitsHeap: loading a snapshot sets a soft memory limit
// (the floor, for a small file; two files add up to no less), and
// ReleaseHeapLimit restores the one before; a limit set before (the
// user's GOMEMLIMIT) is left as it is.
func TestLoadSnapshotLimitsHeap(t *testing.T) {
	current := func() int64 { return debug.SetMemoryLimit(-1) }
	before := current()
	if before != math.MaxInt64 {
		t.Skip("a memory limit is set (GOMEMLIMIT): LoadSnapshot leaves it, as tested below")
	}
	path := filepath.Join(t.TempDir(), "s.pickle")
	if err := snapshot.WriteFile(path, &snapshot.Snapshot{Stacks: snapshot.NewStacks()}); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSnapshot(io.Discard, path); err != nil {
		t.Fatal(err)
	}
	one := current()
	if one == before || one < 256<<20 {
		t.Errorf("limit while a command runs: %d, want at least the 256 MiB floor", one)
	}
	if _, err := LoadSnapshot(io.Discard, path); err != nil {
		t.Fatal(err)
	}
	if two := current(); two < one {
		t.Errorf("limit with a second file: %d, below the first's %d", two, one)
	}
	ReleaseHeapLimit()
	if got := current(); got != before {
		t.Errorf("limit after the command: %d, want %d as before", got, before)
	}

	debug.SetMemoryLimit(1 << 40)
	defer debug.SetMemoryLimit(before)
	if _, err := LoadSnapshot(io.Discard, path); err != nil {
		t.Fatal(err)
	}
	if got := current(); got != 1<<40 {
		t.Errorf("a limit set before was changed to %d", got)
	}
	ReleaseHeapLimit()
	if got := current(); got != 1<<40 {
		t.Errorf("a limit set before was changed to %d on release", got)
	}
}

// TestNeedHeap: a command that says what it keeps (NeedHeap) gets a limit
// that follows the need (half of a 1 GB file while it loads), one that
// does not keeps the file's size as a floor; ReleaseHeapLimit forgets the
// need for the next command.
func TestNeedHeap(t *testing.T) {
	current := func() int64 { return debug.SetMemoryLimit(-1) }
	before := current()
	if before != math.MaxInt64 {
		t.Skip("a memory limit is set (GOMEMLIMIT): LoadSnapshot leaves it")
	}
	const gb = 1_000_000_000
	big := filepath.Join(t.TempDir(), "big.pickle")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(gb); err != nil { // sparse: only the size counts
		t.Fatal(err)
	}
	f.Close()
	NeedHeap(HeapNeed{PerEntry: FiguresPerEntry, PerBlock: 2 * StatePerBlock})
	limitHeapFor(big)
	if got := current(); got != gb/2 {
		t.Errorf("limit while a 1 GB file loads, need said: %d, want half the file", got)
	}
	ReleaseHeapLimit()
	if got := current(); got != before {
		t.Errorf("limit after the command: %d, want %d", got, before)
	}
	limitHeapFor(big)
	if got := current(); got != gb {
		t.Errorf("limit while a 1 GB file loads, no need said (the next command): %d, want the file's size", got)
	}
	ReleaseHeapLimit()
}
