package pickle

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// skimPickle writes {"a": [A], "b": [B], "key": [refs to A, to s, to B],
// "after": ref to A} at protocol 4, A being a list of n ints (memo 3) and B
// [1, 2, s] (memo 6, the string s memo 7): what comes before "key" is
// skimmed, A, s and B decoded when the key's value refers to them (B's
// decoding meets s decoded already).
func skimPickle(n int) []byte {
	var b bytes.Buffer
	sbu := func(s string) { b.WriteByte(opShortBinUnicode); b.WriteByte(byte(len(s))); b.WriteString(s) }
	get := func(i uint32) { b.WriteByte(opLongBinGet); binary.Write(&b, binary.LittleEndian, i) }
	b.WriteString("\x80\x04}\x94(")
	sbu("a")
	b.WriteString("\x94]\x94(]\x94") // memo 1, 2, 3
	for i := 0; i < n; i += 1000 {
		b.WriteByte(opMark)
		for j := i; j < min(i+1000, n); j++ {
			b.WriteByte(opBinInt)
			binary.Write(&b, binary.LittleEndian, int32(j))
		}
		b.WriteByte(opAppends)
	}
	b.WriteString("e")
	sbu("b")
	b.WriteString("\x94]\x94(]\x94(K\x01K\x02") // memo 4, 5, 6
	sbu("s")
	b.WriteString("\x94ee") // memo 7
	sbu("key")
	b.WriteString("\x94](") // memo 8, 9
	get(3)
	get(7)
	get(6)
	b.WriteString("e")
	sbu("after")
	get(3)
	b.WriteString("u.")
	return b.Bytes()
}

// TestSkimDecoder: a decoder started at the skim's stop decodes the key's
// value as a decoder from the start does, the objects before it decoded
// when referred to, small ones from memory and one over lazyBytesMax as
// it is read.
func TestSkimDecoder(t *testing.T) {
	for _, n := range []int{3, 300_000} {
		data := skimPickle(n)
		sk, err := SkimTo(bytes.NewReader(data), "key", 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if sk.Memo != 8 || data[sk.Stop] != opShortBinUnicode || string(data[sk.Stop+2:sk.Stop+5]) != "key" {
			t.Fatalf("skim stopped at %d with %d objects stored", sk.Stop, sk.Memo)
		}
		if n > 1000 && int64(len(data)) < lazyBytesMax {
			t.Fatalf("the list is not over lazyBytesMax")
		}
		want, wvs, err := Loads(data)
		if err != nil {
			t.Fatal(err)
		}
		d := sk.Decoder(bytes.NewReader(data[sk.Stop:]), bytes.NewReader(data), nil, nil, nil)
		got, err := d.Decode()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"key", "after"} {
			w, _ := wvs.Get(want, k)
			g, _ := d.Values().Get(got, k)
			if Canonical(wvs, w) != Canonical(d.Values(), g) {
				t.Fatalf("n=%d: %q decodes to %.80s, from the start %.80s", n, k, Canonical(d.Values(), g), Canonical(wvs, w))
			}
		}
		if d.LazyResolved() != 3 {
			t.Fatalf("n=%d: %d objects decoded on demand, want 3", n, d.LazyResolved())
		}
	}
}

// TestSkimRefuses: the skim walks only what it can split into objects
// that never change once complete, and says so with ErrSkim.
func TestSkimRefuses(t *testing.T) {
	for name, data := range map[string]string{
		"a list changed after it was complete": "\x80\x04}\x94(\x8c\x01a\x94]\x94\x8c\x01b\x94h\x02K\x01a\x8c\x03key\x94K\x01u.",
		"no key":                               "\x80\x04}\x94(\x8c\x01a\x94K\x01u.",
		"protocol 0":                           "(dp0\nVkey\np1\nI1\ns.",
		"a key below the top level":            "\x80\x04}\x94(\x8c\x01a\x94}\x94\x8c\x03key\x94K\x01su.",
		"DUP":                                  "\x80\x04}\x942\x8c\x03key\x94K\x01s.",
		"truncated":                            "\x80\x04}\x94(\x8c\x01a\x94]\x94(K\x01",
		"a reference never stored":             "\x80\x04}\x94(\x8c\x01a\x94h\x05\x8c\x03key\x94K\x01u.",
	} {
		if _, err := SkimTo(strings.NewReader(data), "key", 1<<20); !errors.Is(err, ErrSkim) {
			t.Errorf("%s: %v, want ErrSkim", name, err)
		}
	}
}
