package pickle

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
)

// reframe rewrites a protocol-4 pickle with its FRAME opcodes dropped and
// one put before every `every` opcodes (nil for a pickle with an opcode
// the skim does not walk): a piece of a split skim can then start at any
// of those opcodes.
func reframe(data []byte, every int) []byte {
	if len(data) < 2 || data[0] != opProto || data[1] < 4 {
		return nil
	}
	var out, frame bytes.Buffer
	out.Write(data[:2])
	flush := func() {
		if frame.Len() == 0 {
			return
		}
		out.WriteByte(opFrame)
		binary.Write(&out, binary.LittleEndian, uint64(frame.Len()))
		out.Write(frame.Bytes())
		frame.Reset()
	}
	ops := 0
	for pos := 2; pos < len(data); {
		op := data[pos]
		n := 0 // argument bytes
		rd := func(w int) (uint64, bool) {
			if pos+1+w > len(data) {
				return 0, false
			}
			var v uint64
			for i := w - 1; i >= 0; i-- {
				v = v<<8 | uint64(data[pos+1+i])
			}
			return v, true
		}
		switch op {
		case opBinGet, opBinInt1, opBinPut, opProto:
			n = 1
		case opBinInt2:
			n = 2
		case opLongBinGet, opLongBinPut, opBinInt:
			n = 4
		case opBinFloat:
			n = 8
		case opShortBinUnicode, opShortBinBytes, opShortBinString, opLong1:
			l, ok := rd(1)
			if !ok {
				return nil
			}
			n = 1 + int(l)
		case opBinUnicode, opBinBytes, opBinString, opLong4:
			l, ok := rd(4)
			if !ok {
				return nil
			}
			n = 4 + int(l)
		case opBinUnicode8, opBinBytes8:
			l, ok := rd(8)
			if !ok || l > uint64(len(data)) {
				return nil
			}
			n = 8 + int(l)
		case opFrame:
			pos += 9
			continue
		case opMemoize, opMark, opEmptyDict, opEmptyList, opEmptyTuple, opNone, opNewTrue, opNewFalse,
			opAppend, opAppends, opSetItem, opSetItems, opTuple, opTuple1, opTuple2, opTuple3, opList, opDict,
			opPop, opStop:
		default:
			return nil
		}
		if pos+1+n > len(data) {
			return nil
		}
		if ops%every == 0 {
			flush()
		}
		ops++
		frame.Write(data[pos : pos+1+n])
		pos += 1 + n
	}
	flush()
	return out.Bytes()
}

// skimsMatch fails the test unless the split skim found what SkimTo did,
// or both failed alike.
func skimsMatch(t testing.TB, name string, a *Skim, aerr error, b *Skim, berr error) {
	t.Helper()
	if aerr != nil || berr != nil {
		if (aerr == nil) != (berr == nil) || errors.Is(aerr, ErrSkim) != errors.Is(berr, ErrSkim) ||
			(!errors.Is(aerr, ErrSkim) && aerr.Error() != berr.Error()) {
			t.Fatalf("%s: SkimTo says %v, the split skim %v", name, aerr, berr)
		}
		return
	}
	if a.Stop != b.Stop || a.Memo != b.Memo || a.proto != b.proto || a.span.count() != b.span.count() {
		t.Fatalf("%s: SkimTo stops at %d with %d objects (protocol %d), the split skim at %d with %d (protocol %d)",
			name, a.Stop, a.Memo, a.proto, b.Stop, b.Memo, b.proto)
	}
	for i := range a.span.count() {
		if *a.span.at(i) != *b.span.at(i) {
			t.Fatalf("%s: object %d spans %v in SkimTo, %v in the split skim", name, i, *a.span.at(i), *b.span.at(i))
		}
		if a.first(i) != b.first(i) {
			t.Fatalf("%s: object %d's first is %d in SkimTo, %d in the split skim", name, i, a.first(i), b.first(i))
		}
	}
	if !slices.Equal(a.dicts, b.dicts) || !slices.Equal(a.marks, b.marks) {
		t.Fatalf("%s: the stack at the stop is %v %v in SkimTo, %v %v in the split skim", name, a.dicts, a.marks, b.dicts, b.marks)
	}
}

// checkSplitSkim skims data with SkimTo and split in pieces of every
// frame, on 2 and 3 goroutines, and compares.
func checkSplitSkim(t testing.TB, name string, data []byte, key string) (joined int64) {
	t.Helper()
	want, werr := SkimTo(bytes.NewReader(data), key, 1<<20)
	joined = skimJoined.Load()
	for _, split := range []int64{1, 100} {
		for _, workers := range []int{1, 2, 3} {
			got, gerr := SkimAt(bytes.NewReader(data), int64(len(data)), key, 1<<20, SkimOptions{Workers: workers, PieceBytes: split})
			skimsMatch(t, fmt.Sprintf("%s (pieces from %d bytes, %d goroutines)", name, split, workers), want, werr, got, gerr)
		}
	}
	return skimJoined.Load() - joined
}

// tuplePickle writes a dict whose values hold tuples of memoized items,
// nested lists and dicts built with SETITEM and APPEND, at protocol 4: a
// piece may start inside any of them.
func tuplePickle() []byte {
	var b bytes.Buffer
	sbu := func(s string) { b.WriteByte(opShortBinUnicode); b.WriteByte(byte(len(s))); b.WriteString(s) }
	b.WriteString("\x80\x04}\x94(")
	sbu("t")
	b.WriteString("\x94")
	sbu("x")
	b.WriteString("\x94")
	sbu("y")
	b.WriteString("\x94\x86\x94") // ("x", "y"): memo 1, 2, 3, 4
	sbu("u")
	b.WriteString("\x94(K\x01") // memo 5
	sbu("z")
	b.WriteString("\x94]\x94K\x02a}\x94")
	sbu("k")
	b.WriteString("\x94K\x03st\x94") // (1, "z", [2], {"k": 3}): memo 6 .. 10
	sbu("v")
	b.WriteString("\x94](h\x04h\x07K\x05\x85\x94)\x94K\x06K\x07\x87\x94e") // memo 11 .. 15
	sbu("key")
	b.WriteString("\x94h\x0a")
	// Bytes after the key: the skim stops short of the input's last 16.
	sbu("after")
	b.WriteString("\x94]\x94(K\x01K\x02K\x03K\x04K\x05K\x06K\x07K\x08eu.")
	return b.Bytes()
}

// TestSkimSplitMatches: skimmed in pieces (one a frame, frames of one
// opcode or a few), a pickle gives what SkimTo gives: where the key is,
// every object's span, the stack there; on hand-made pickles and the
// published snapshots.
func TestSkimSplitMatches(t *testing.T) {
	inputs := map[string][]byte{
		"skimPickle(3)":      skimPickle(3),
		"skimPickle(30_000)": skimPickle(30_000),
		"tuples":             tuplePickle(),
	}
	for name, data := range inputs {
		for _, every := range []int{1, 2, 3, 7, 1000} {
			framed := reframe(data, every)
			if framed == nil {
				t.Fatalf("%s: reframe refused it", name)
			}
			if _, err := SkimTo(bytes.NewReader(framed), "key", 1<<20); err != nil {
				t.Fatalf("%s framed every %d opcodes: SkimTo: %v", name, every, err)
			}
			if checkSplitSkim(t, fmt.Sprintf("%s framed every %d opcodes", name, every), framed, "key") == 0 && every < 10 {
				t.Fatalf("%s framed every %d opcodes: no piece joined", name, every)
			}
		}
	}
	files := realdata.FilesIfPresent()
	if len(files) == 0 {
		t.Log("skipping the published snapshots: ../shared/testdata/real is absent")
	}
	took := 0
	for _, fn := range files {
		data, err := os.ReadFile(fn)
		if err != nil {
			t.Fatal(err)
		}
		if zr, err := gzip.NewReader(bytes.NewReader(data)); err == nil {
			if data, err = io.ReadAll(zr); err != nil {
				continue
			}
		}
		checkSplitSkim(t, fn, data, "device_traces")
		if framed := reframe(data, 97); framed != nil && len(framed) < 64<<20 {
			if checkSplitSkim(t, fn+" framed every 97 opcodes", framed, "device_traces") > 0 {
				took++
			}
		}
	}
	if len(files) > 0 && took < len(files)/2 {
		t.Fatalf("%d of %d published snapshots skimmed in pieces", took, len(files))
	}
	t.Logf("%d of %d published snapshots skimmed in pieces", took, len(files))
}

// TestSkimSplitHostile: frames whose lengths do not lead to an opcode, a
// piece that needs objects never stored or pops a stack that is not
// there, a key below the top level or a string equal to it inside a
// payload: the split skim finds what SkimTo finds or fails as it does.
func TestSkimSplitHostile(t *testing.T) {
	base := reframe(skimPickle(300), 5)
	tup := reframe(tuplePickle(), 1)
	cases := map[string][]byte{
		"a never stored reference": reframe([]byte("\x80\x04}\x94(\x8c\x01a\x94]\x94h\x09a\x8c\x03key\x94K\x01u."), 1),
		"a key below the top level": reframe([]byte("\x80\x04}\x94(\x8c\x01a\x94}\x94\x8c\x03key\x94K\x01s"+
			"\x8c\x03key\x94K\x02u."), 1),
		"the key in a payload": reframe([]byte("\x80\x04}\x94(\x8c\x01a\x94\x8c\x05a key\x94\x8c\x03key\x94K\x01u."), 1),
		"a pop past the stack": reframe([]byte("\x80\x04}\x94(\x8c\x01a\x94K\x01u00\x8c\x03key\x94K\x01s."), 1),
		"a list changed after": reframe([]byte("\x80\x04}\x94(\x8c\x01a\x94]\x94\x8c\x01b\x94h\x02K\x01a\x8c\x03key\x94K\x01u."), 1),
		"SETITEMS odd":         reframe([]byte("\x80\x04}\x94(\x8c\x01a\x94K\x01\x8c\x01b\x94u\x8c\x03key\x94K\x01s."), 1),
		"BINPUT":               reframe([]byte("\x80\x04}q\x00(\x8c\x01aq\x01K\x01\x8c\x03keyq\x02K\x01u."), 1),
	}
	for name, data := range cases {
		if data == nil {
			t.Fatalf("%s: reframe refused it", name)
		}
	}
	// Frame lengths that lie: each frame header's length off by a few.
	for _, data := range [][]byte{base, tup} {
		for i := 2; i+9 <= len(data); i++ {
			if data[i] != opFrame {
				continue
			}
			for _, d := range []int64{-2, -1, 1, 3, 1 << 40} {
				bad := slices.Clone(data)
				l := int64(binary.LittleEndian.Uint64(bad[i+1:]))
				binary.LittleEndian.PutUint64(bad[i+1:], uint64(l+d))
				cases[fmt.Sprintf("frame at %d of %d long by %d", i, len(data), d)] = bad
			}
		}
	}
	for name, data := range cases {
		checkSplitSkim(t, name, data, "key")
	}
	// Truncated anywhere.
	for n := 0; n < len(tup); n++ {
		checkSplitSkim(t, fmt.Sprintf("truncated at %d", n), tup[:n], "key")
	}
	if !strings.Contains(string(cases["the key in a payload"]), "a key") {
		t.Fatal("the payload case lost its payload")
	}
}

// FuzzSkimSplit: on any input, and on it reframed a frame an opcode or
// a few, the split skim finds what SkimTo finds or fails as it does (and
// SkimTo's walk what runRef finds).
//
//	go test -run='^$' -fuzz='^FuzzSkimSplit$' -fuzztime=30s ./pkg/pickle
func FuzzSkimSplit(f *testing.F) {
	f.Add(skimPickle(3), uint8(1))
	f.Add(reframe(skimPickle(300), 3), uint8(2))
	f.Add(tuplePickle(), uint8(1))
	f.Add(reframe(tuplePickle(), 1), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, every uint8) {
		checkSkimRef(t, "input", data, "key")
		checkSplitSkim(t, "input", data, "key")
		if every > 0 {
			if framed := reframe(data, int(every)); framed != nil {
				checkSplitSkim(t, "input reframed", framed, "key")
			}
		}
	})
}

// TestSkimArena: spans kept in a spanArena (pages from one mapping, then
// from the heap once it is used up) are SkimTo's, and Release drops them.
func TestSkimArena(t *testing.T) {
	for _, every := range []int{0, 3} {
		data := tuplePickle()
		if every > 0 {
			data = reframe(skimPickle(30_000), every)
		}
		want, werr := SkimTo(bytes.NewReader(data), "key", 1<<20)
		// Room for one page: the rest come from the heap.
		arena := newSpanArena(1)
		got, gerr := skimAt(bytes.NewReader(data), int64(len(data)), "key", 1<<20,
			SkimOptions{Workers: 2, PieceBytes: 1}, arena, nil)
		skimsMatch(t, fmt.Sprintf("framed every %d", every), want, werr, got, gerr)
		if gerr != nil || got.arena != arena {
			t.Fatalf("the skim does not hold its arena: %v", gerr)
		}
		got.Release()
		got.Release()
		if got.span.count() != 0 || got.arena != nil {
			t.Fatalf("Release kept %d spans", got.span.count())
		}
	}
}
