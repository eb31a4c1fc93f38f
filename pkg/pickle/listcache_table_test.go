package pickle

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestListCacheTableMatchesMap holds listCache to the Go map it replaced:
// random keys of reference opcodes, inline (up to listKeyInline bytes) and
// long, keys that differ only in their last byte or in length, the same
// key put again (the later record wins, as a map's assignment), resets,
// and growth through every size up to maxCachedLists.
func TestListCacheTableMatchesMap(t *testing.T) {
	for _, weak := range []bool{false, true} {
		listCacheMatchesMap(t, weak)
	}
}

// listCacheMatchesMap is TestListCacheTableMatchesMap with the real hash
// or (weak) one that gives keys of a length the same tag and probe run.
func listCacheMatchesMap(t *testing.T, weak bool) {
	rng := rand.New(rand.NewPCG(1, 2))
	keyOf := func() string {
		var b strings.Builder
		n := 1 + rng.IntN(40) // up to 200 bytes: long keys too
		for range n {
			if rng.IntN(2) == 0 {
				b.WriteString("h" + string(rune(rng.IntN(4))))
			} else {
				b.WriteString("j\x00\x00\x00" + string(rune(rng.IntN(4))))
			}
		}
		return b.String()
	}
	var keys []string
	for range 3000 {
		k := keyOf()
		keys = append(keys, k, k[:len(k)-1], k+"\x00", k[:len(k)-1]+"\x01")
	}
	c := &listCache{weakHash: weak}
	m := map[string]Value{}
	check := func(step int) {
		if c.len() != len(m) {
			t.Fatalf("step %d: %d keys, the map %d", step, c.len(), len(m))
		}
		for _, k := range keys[:200] {
			got, ok := c.get([]byte(k))
			want, wok := m[k]
			if ok != wok || got != want {
				t.Fatalf("step %d: %q: %v %v, the map %v %v", step, k, got, ok, want, wok)
			}
		}
	}
	for step := range 40000 {
		k := keys[rng.IntN(len(keys))]
		switch r := rng.IntN(1000); {
		case r == 0:
			c.reset()
			clear(m)
		case r < 500:
			rec := Record(1, uint64(step))
			c.put(k, rec)
			m[k] = rec
		default:
			got, ok := c.get([]byte(k))
			want, wok := m[k]
			if ok != wok || got != want {
				t.Fatalf("step %d: %q: %v %v, the map %v %v", step, k, got, ok, want, wok)
			}
		}
		if step%1000 == 0 {
			check(step)
		}
	}
	check(-1)
	if weak {
		return
	}

	// Up to the cap, every key is found with its record, and one more
	// index would not number them.
	c = &listCache{}
	for i := range maxCachedLists {
		c.put(string([]byte{'j', byte(i), byte(i >> 8), 0, 0}), Record(1, uint64(i)))
	}
	for i := range maxCachedLists {
		if got, ok := c.get([]byte{'j', byte(i), byte(i >> 8), 0, 0}); !ok || got != Record(1, uint64(i)) {
			t.Fatalf("key %d of %d: %v %v", i, maxCachedLists, got, ok)
		}
	}
	if _, ok := c.get([]byte{'j', 0, 0, 0, 1}); ok {
		t.Error("found a key never put")
	}
	var nilCache *listCache
	if _, ok := nilCache.get([]byte("h\x00")); ok || nilCache.len() != 0 || nilCache.footprint() != 0 {
		t.Error("a nil cache is not empty")
	}
}
