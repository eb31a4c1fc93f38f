package pickle

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

// TestStrCache: StrBytes, with its cache of recent texts, gives every text
// the id the map alone gives it (Str), in the same order of first sight,
// on texts of every length around the cache's bounds, repeated, sharing a
// slot (same length, first and last 8 bytes, a different middle), and
// interleaved with bytes objects of the same text (ids of their own).
func TestStrCache(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	var texts []string
	for n := range strCacheMax + 3 {
		texts = append(texts, strings.Repeat("p", n), fmt.Sprintf("%0*d", n, r.Intn(1000)))
	}
	for i := range 300 {
		// One slot, many texts.
		texts = append(texts, "/opt/env/"+fmt.Sprintf("%08d", i)+"/file_1.py")
	}
	for range 5000 {
		b := make([]byte, r.Intn(strCacheMax+20))
		for i := range b {
			b[i] = "ab/_."[r.Intn(5)]
		}
		texts = append(texts, string(b))
	}
	if strCacheSlot([]byte(texts[len(texts)-5300])) != strCacheSlot([]byte(texts[len(texts)-5001])) {
		t.Fatal("the texts meant to share a slot do not")
	}
	cached, plain := NewValues(), NewValues()
	for i := range 200000 {
		s := texts[r.Intn(len(texts))]
		if i%3 == 0 {
			s = texts[len(texts)-5300+r.Intn(300)] // the shared slot
		}
		if i%7 == 0 {
			got, want := cached.bytesValue([]byte(s)), plain.bytesValue([]byte(s))
			if got != want {
				t.Fatalf("bytes %q: %v, want %v", s, got, want)
			}
			continue
		}
		got, want := cached.StrBytes([]byte(s)), plain.Str(s)
		if got != want || cached.Text(got) != s {
			t.Fatalf("str %q: %v (%q), want %v", s, got, cached.Text(got), want)
		}
	}
	if cached.strCache == nil || plain.strCache != nil {
		t.Error("the cache is made by StrBytes alone")
	}
}
