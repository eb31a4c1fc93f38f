package allocator

import (
	"testing"
	"unsafe"

	"github.com/memstat/memstat/pkg/snapshot"
)

// The seeded state of a large snapshot holds millions of blocks (2 M in
// the 1 GB torch-style benchmark file), so a block's size class is most of
// the simulator's memory: 80 bytes, where it was 144 with the rare fields
// inline (issue 16). A new field that pushes it to the next class (96)
// should move to blockExtra instead, or justify the bytes here.
func TestBlockSize(t *testing.T) {
	if n := unsafe.Sizeof(block{}); n > 80 {
		t.Errorf("block is %d bytes, want at most 80 (Go's 80-byte size class)", n)
	}
	if n := unsafe.Sizeof(region{}); n > 80 {
		t.Errorf("region is %d bytes, want at most 80", n)
	}
}

// A clone has its own record_stream list: a stream use recorded on the
// clone's block does not reach the original, and the original's pending
// free still waits for its own stream only.
func TestCloneStreamUses(t *testing.T) {
	s := newSim(t, "", Latest, Options{})
	x := s.alloc(4096, s0)
	if err := s.RecordStream(x, s1); err != nil {
		t.Fatal(err)
	}
	c := &sim{t, s.Clone()}
	if err := c.RecordStream(x, s2); err != nil {
		t.Fatal(err)
	}
	if got := s.allocated.get(x).streamUses(); len(got) != 1 || got[0] != s1 {
		t.Fatalf("original's stream uses %v after the clone's record_stream, want [%d]", got, s1)
	}
	if got := c.allocated.get(x).streamUses(); len(got) != 2 {
		t.Fatalf("clone's stream uses %v, want two", got)
	}
	s.free(x)
	c.free(x)
	s.CompleteStreamEvents(s1)
	c.CompleteStreamEvents(s1)
	// The original's block is free again; the clone's still waits for s2.
	if y := s.alloc(4096, s0); y != x {
		t.Errorf("original: %#x, want the freed block %#x", y, x)
	}
	if y := c.alloc(4096, s0); y == x {
		t.Errorf("clone reused %#x before s2's event completed", x)
	}
	s.check()
	c.check()
	if st := c.Segments()[0].Blocks[0].State; st != snapshot.ActivePendingFree {
		t.Errorf("clone's first block %s, want active_pending_free", st)
	}
}
