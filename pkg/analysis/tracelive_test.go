package analysis

import (
	"math/rand/v2"
	"testing"
)

// TestLiveTable: a million random puts, overwrites and removes (on
// addresses from a few pools, 512-aligned as blocks are, crowded so that
// probes collide and wrap) leave the table holding what a Go map holds,
// checked entry by entry as it goes and in full at every growth; then the
// same on a table of 32 slots whose addresses all start their probes at
// its end or its start, so that probes and removals wrap all the time.
func TestLiveTable(t *testing.T) {
	t.Run("large", func(t *testing.T) { checkLiveTable(t, 0) })
	t.Run("small", func(t *testing.T) { checkLiveTable(t, 15) })
}

func checkLiveTable(t *testing.T, few int) {
	r := rand.New(rand.NewPCG(5, 6))
	var tb liveTable
	var pool []uint64
	if few > 0 {
		// few addresses (at most 15: the table of 32 slots never grows)
		// whose home is one of the last two slots or the first two.
		tb.resize(32)
		for a := uint64(0x7f0000000000); len(pool) < few; a += 512 {
			if h := tb.home(a); h >= 30 && len(pool) < 2*few/3 || h <= 1 && len(pool) >= 2*few/3 {
				pool = append(pool, a)
			}
		}
	}
	want := map[uint64]traceLive{}
	addr := func() uint64 {
		if few > 0 {
			return pool[r.IntN(few)]
		}
		switch r.IntN(3) {
		case 0:
			return 0x7f0000000000 + uint64(r.IntN(4000))*512
		case 1:
			return uint64(r.IntN(3000)) << 21
		}
		return r.Uint64()
	}
	size := 0
	for op := range 1000000 {
		a := addr()
		i, ok := tb.find(a)
		w, wok := want[a]
		if ok != wok || ok && tb.slots[i].v != w {
			t.Fatalf("op %d: find(%#x) = %v %+v, the map has %v %+v", op, a, ok, tb.slots[i].v, wok, w)
		}
		if r.IntN(5) < 2 && ok {
			tb.remove(i)
			delete(want, a)
		} else {
			v := traceLive{name: int32(op), named: op%2 == 0, seg: a}
			tb.put(i, a, v)
			v.used = true // a taken slot says so
			want[a] = v
		}
		if tb.n != len(want) {
			t.Fatalf("op %d: %d entries, the map %d", op, tb.n, len(want))
		}
		if len(tb.slots) != size {
			size = len(tb.slots)
			for a, w := range want {
				if i, ok := tb.find(a); !ok || tb.slots[i].v != w {
					t.Fatalf("op %d: after growing to %d slots %#x is lost", op, size, a)
				}
			}
		}
	}
	if few == 0 && size < 1<<13 || few > 0 && size != 32 {
		t.Errorf("the table never grew past %d slots: the test does not crowd it", size)
	}
}

// BenchmarkLiveTable: what a trace walk does per block (find and set at
// its alloc, find at its free_requested, find and delete at its
// free_completed) with 100,000 blocks live, in the table and in the Go
// map it replaced.
func BenchmarkLiveTable(b *testing.B) {
	const live = 100000
	r := rand.New(rand.NewPCG(9, 10))
	addrs := make([]uint64, 1<<20)
	for i := range addrs {
		addrs[i] = 0x7f0000000000 + uint64(r.IntN(1<<30))*512
	}
	b.Run("table", func(b *testing.B) {
		var tb liveTable
		for i := range b.N {
			a := addrs[i&(1<<20-1)]
			j, _ := tb.find(a)
			tb.put(j, a, traceLive{name: int32(i), named: true})
			old := addrs[(i-live)&(1<<20-1)]
			if j, ok := tb.find(old); ok {
				_ = tb.slots[j].v
			}
			if j, ok := tb.find(old); ok {
				tb.remove(j)
			}
		}
	})
	b.Run("map", func(b *testing.B) {
		m := map[uint64]traceLive{}
		for i := range b.N {
			a := addrs[i&(1<<20-1)]
			if _, ok := m[a]; ok {
				_ = ok
			}
			m[a] = traceLive{name: int32(i), named: true}
			old := addrs[(i-live)&(1<<20-1)]
			_ = m[old]
			if _, ok := m[old]; ok {
				delete(m, old)
			}
		}
	})
}
