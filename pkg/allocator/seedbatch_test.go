package allocator

import (
	"math/rand/v2"
	"testing"
)

// TestPutAbsent fills tables with putAbsent, empty or holding keys
// already, and checks each against one filled by put: every key finds its
// block, every slot between a key's home and its place is full (so get
// and take's backward shift hold), and takes of half the keys leave the
// rest found.
func TestPutAbsent(t *testing.T) {
	for _, tc := range []struct{ before, batch int }{
		{0, 0}, {0, 5}, {0, 1023}, {0, 1 << 10}, {0, 5000}, {100, 3000}, {20000, 60000}, {0, 200000},
	} {
		rng := rand.New(rand.NewPCG(uint64(tc.before), uint64(tc.batch)))
		seen := map[uint64]bool{0: true}
		blocks := func(n int) []*block {
			out := make([]*block, n)
			for i := range out {
				addr := uint64(0)
				for seen[addr] {
					// Clustered addresses, as a process's segments are.
					addr = 0x7f0000000000 + rng.Uint64N(1<<20)*512
				}
				seen[addr] = true
				out[i] = &block{addr: addr}
			}
			return out
		}
		old, batch := blocks(tc.before), blocks(tc.batch)
		var got, want addrTable
		for _, b := range old {
			got.put(b)
			want.put(b)
		}
		for _, b := range batch {
			want.put(b)
		}
		got.putAbsent(append([]*block(nil), batch...))
		if got.len() != want.len() {
			t.Fatalf("%+v: %d keys, want %d", tc, got.len(), want.len())
		}
		checkProbeRuns(t, &got)
		all := append(old, batch...)
		for _, b := range all {
			if got.get(b.addr) != b {
				t.Fatalf("%+v: %#x not found", tc, b.addr)
			}
		}
		if got.get(0x7e0000000000) != nil {
			t.Fatalf("%+v: absent key found", tc)
		}
		for i, b := range all {
			if i%2 == 0 && got.take(b.addr) != b {
				t.Fatalf("%+v: take %#x", tc, b.addr)
			}
		}
		checkProbeRuns(t, &got)
		for i, b := range all {
			if want := b; i%2 == 0 {
				want = nil
				if got.get(b.addr) != want {
					t.Fatalf("%+v: %#x after the takes", tc, b.addr)
				}
			} else if got.get(b.addr) != want {
				t.Fatalf("%+v: %#x after the takes", tc, b.addr)
			}
		}
	}
}

// checkProbeRuns checks that every key lies at its home slot or after a
// run of full slots from it.
func checkProbeRuns(t *testing.T, tab *addrTable) {
	t.Helper()
	mask := len(tab.slots) - 1
	n := 0
	for i, b := range tab.slots {
		if b == nil {
			continue
		}
		n++
		for j := tab.slot(b.addr); j != i; j = (j + 1) & mask {
			if tab.slots[j] == nil {
				t.Fatalf("%#x at slot %d: slot %d of its probe run is empty", b.addr, i, j)
			}
		}
	}
	if n != tab.n {
		t.Fatalf("%d full slots, n %d", n, tab.n)
	}
}
