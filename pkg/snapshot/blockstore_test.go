package snapshot

import "testing"

// TestBlockStore: blocks come back by index across chunks; a run inside a
// chunk is a slice of it (capacity cut to the run, so appending to it
// cannot reach the next block), a run across two chunks a copy.
func TestBlockStore(t *testing.T) {
	var s blockStore
	const n = 2*blockChunk + 100
	for i := range n {
		s.add(Block{Address: uint64(i), Size: 512})
	}
	if s.n != n || len(s.chunks) != 3 || s.cap < n {
		t.Fatalf("%d blocks in %d chunks, room for %d", s.n, len(s.chunks), s.cap)
	}
	for _, i := range []uint32{0, 63, 64, blockChunk - 1, blockChunk, n - 1} {
		if got := s.at(i).Address; got != uint64(i) {
			t.Errorf("block %d has address %d", i, got)
		}
	}
	for _, r := range [][2]uint32{{0, 1}, {5, 20}, {blockChunk - 10, 10}, {blockChunk - 10, 20}, {blockChunk - 1, blockChunk + 2}, {n - 3, 3}, {7, 0}} {
		got := s.run(r[0], r[1])
		if len(got) != int(r[1]) || cap(got) != int(r[1]) {
			t.Fatalf("run %v: len %d cap %d", r, len(got), cap(got))
		}
		for i := range got {
			if got[i].Address != uint64(r[0])+uint64(i) {
				t.Fatalf("run %v: block %d has address %d", r, i, got[i].Address)
			}
		}
		inOne := r[1] > 0 && r[0]/blockChunk == (r[0]+r[1]-1)/blockChunk
		if r[1] > 0 {
			got[0].Size = 1024 // a segment fills its blocks in place
			if shared := s.at(r[0]).Size == 1024; shared != inOne {
				t.Errorf("run %v: shares the store: %v, want %v", r, shared, inOne)
			}
			s.at(r[0]).Size = 512
		}
	}
}
