package replay

import (
	"math/rand"
	"testing"
)

// TestAddrMapAgreesWithAMap checks put, get, del and each against a Go map
// over random operations on clustered addresses (address 0 included).
// A table reserved ahead (reserve) must behave the same.
func TestAddrMapAgreesWithAMap(t *testing.T) {
	for _, reserved := range []int{0, 10, 6000} {
		testAddrMap(t, reserved)
	}
	var m addrMap
	m.reserve(6000)
	before := len(m.keys)
	for i := range 6000 {
		m.put(uint64(i+1)*512, 0)
	}
	if len(m.keys) != before || before < 12000 {
		t.Errorf("a table reserved for 6000 keys has %d slots, then %d after 6000 puts", before, len(m.keys))
	}
}

func testAddrMap(t *testing.T, reserved int) {
	r := rand.New(rand.NewSource(1))
	var m addrMap
	m.reserve(reserved)
	want := map[uint64]uint32{}
	for op := range 200000 {
		k := uint64(r.Intn(5000)) * 512
		if r.Intn(10) == 0 {
			k = uint64(r.Intn(1 << 20))
		}
		switch r.Intn(3) {
		case 0, 1:
			v := uint32(r.Intn(100))
			if op < 1000 {
				v = 0 // a set first: the values array comes later
			}
			_, had := want[k]
			if added := m.put(k, v); added == had {
				t.Fatalf("op %d: put(%#x) reported new=%v, had %v", op, k, added, had)
			}
			want[k] = v
		default:
			m.del(k)
			delete(want, k)
		}
		q := uint64(r.Intn(5000)) * 512
		got, ok := m.get(q)
		w, wok := want[q]
		if ok != wok || got != w {
			t.Fatalf("op %d: get(%#x) = %d, %v; want %d, %v", op, q, got, ok, w, wok)
		}
	}
	if m.len() != len(want) {
		t.Fatalf("len %d, want %d", m.len(), len(want))
	}
	seen := map[uint64]uint32{}
	m.each(func(k uint64, v uint32) { seen[k] = v })
	if len(seen) != len(want) {
		t.Fatalf("each gave %d keys, want %d", len(seen), len(want))
	}
	for k, v := range want {
		if seen[k] != v {
			t.Fatalf("each: %#x = %d, want %d", k, seen[k], v)
		}
	}
}

// TestAddrPairsAgreesWithAMap checks addrPairs' put, get and del against a
// Go map over random operations on clustered addresses (address 0
// included), from an empty table and from tables reserved ahead, which
// must not grow before their reserved size.
func TestAddrPairsAgreesWithAMap(t *testing.T) {
	for _, reserved := range []int{0, 10, 6000} {
		r := rand.New(rand.NewSource(int64(reserved)))
		var m addrPairs
		m.reserve(reserved)
		before := len(m.slots)
		want := map[uint64]uint64{}
		most := 0 // the most keys held so far
		for op := range 200000 {
			k := uint64(r.Intn(5000)) * 512
			if r.Intn(10) == 0 {
				k = uint64(r.Intn(1 << 20))
			}
			switch r.Intn(3) {
			case 0, 1:
				v := r.Uint64()
				m.put(k, v)
				want[k] = v
			default:
				m.del(k)
				delete(want, k)
			}
			q := uint64(r.Intn(5000)) * 512
			got, ok := m.get(q)
			w, wok := want[q]
			if ok != wok || got != w {
				t.Fatalf("reserved %d, op %d: get(%#x) = %#x, %v; want %#x, %v", reserved, op, q, got, ok, w, wok)
			}
			most = max(most, len(want))
			if most <= reserved && len(m.slots) != before {
				t.Fatalf("a table reserved for %d keys grew at %d keys", reserved, most)
			}
		}
		if m.len() != len(want) {
			t.Fatalf("reserved %d: len %d, want %d", reserved, m.len(), len(want))
		}
		for k, v := range want {
			if got, ok := m.get(k); !ok || got != v {
				t.Fatalf("reserved %d: get(%#x) = %#x, %v; want %#x", reserved, k, got, ok, v)
			}
		}
	}
}
