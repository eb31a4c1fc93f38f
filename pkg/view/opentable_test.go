package view

import (
	"math/rand/v2"
	"testing"
)

// TestOpenTable checks the table against a Go map over random puts and
// takes of 512-aligned addresses, with growth and backward-shift
// deletion.
func TestOpenTable(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var tab openTable
	want := map[uint64]int32{}
	for step := range 200000 {
		addr := uint64(r.IntN(5000)) << 9
		if r.IntN(3) == 0 {
			k, ok := tab.take(addr)
			wk, wok := want[addr]
			if ok != wok || k != wk {
				t.Fatalf("step %d: take(%#x) = %d, %v; want %d, %v", step, addr, k, ok, wk, wok)
			}
			delete(want, addr)
		} else {
			k := int32(step)
			tab.put(addr, k)
			want[addr] = k
		}
		if tab.n != len(want) {
			t.Fatalf("step %d: %d entries, want %d", step, tab.n, len(want))
		}
	}
	for addr, wk := range want {
		if k, ok := tab.take(addr); !ok || k != wk {
			t.Fatalf("take(%#x) = %d, %v; want %d", addr, k, ok, wk)
		}
	}
}
