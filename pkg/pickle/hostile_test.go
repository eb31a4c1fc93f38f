package pickle

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/memstat/memstat/internal/chunkread"
	"github.com/memstat/memstat/internal/realdata"
)

// hostileCase is a crafted input and what decoding it must give: an error
// containing want, or success when want is "".
type hostileCase struct {
	name string
	data []byte
	want string
}

func opU32(op byte, n uint32) string {
	return string(binary.LittleEndian.AppendUint32([]byte{op}, n))
}

func opU64(op byte, n uint64) string {
	return string(binary.LittleEndian.AppendUint64([]byte{op}, n))
}

const oneTB = 1 << 40

// hostileCases are small crafted inputs (each also a FuzzDecode seed).
func hostileCases() []hostileCase {
	c := func(name, data, want string) hostileCase { return hostileCase{name, []byte(data), want} }
	digits := strings.Repeat("7", 3000)
	return []hostileCase{
		// Lengths that claim far more than the input holds.
		c("BINUNICODE8 claims 1 TB", "\x80\x04"+opU64(opBinUnicode8, oneTB)+"abc", "claims a 1099511627776-byte object, over the 67108864-byte limit"),
		c("BINBYTES8 claims 1 TB", "\x80\x04"+opU64(opBinBytes8, oneTB)+"abc", "claims a 1099511627776-byte object"),
		c("BYTEARRAY8 claims 1 TB", "\x80\x05"+opU64(opByteArray8, oneTB)+"abc", "claims a 1099511627776-byte object"),
		c("BINUNICODE8 claims 2^64-1", opU64(opBinUnicode8, 1<<64-1), "over the 67108864-byte limit"),
		c("BINUNICODE claims 4 GiB", opU32(opBinUnicode, 0xffffffff)+"abc", "claims a 4294967295-byte object"),
		c("BINBYTES claims 4 GiB", opU32(opBinBytes, 0xffffffff), "claims a 4294967295-byte object"),
		c("BINSTRING negative length", opU32(opBinString, 0xffffffff), "negative byte count"),
		c("BINUNICODE claims 60 MB of 3", opU32(opBinUnicode, 60e6)+"abc", "needs 60000000 more bytes but the data ends at offset 8"),
		c("SHORT_BINUNICODE claims 255 of 1", "\x8c\xffa", "needs 255 more bytes"),
		c("FRAME claims 1 TB, nothing follows", "\x80\x04"+opU64(opFrame, oneTB), "data ends before the STOP opcode"),
		// FRAME is only a hint here: the length is never trusted or used,
		// so a complete pickle inside an overlong frame still decodes.
		c("FRAME claims 1 TB, a pickle follows", "\x80\x04"+opU64(opFrame, oneTB)+"N.", ""),
		c("FRAME length cut short", "\x80\x04\x95\x01\x00", "needs 8 more bytes"),
		c("LONG4 claims 2 GiB", opU32(opLong4, 0x7fffffff), "2147483647-byte integer is over the 1024-byte limit"),
		c("LONG4 negative length", opU32(opLong4, 0xffffffff), "negative byte count -1"),
		c("LONG4 of 1024 bytes", opU32(opLong4, 1024)+strings.Repeat("\xff", 1024)+".", ""),
		c("LONG4 of 1025 bytes", opU32(opLong4, 1025)+strings.Repeat("\xff", 1025)+".", "1025-byte integer is over the 1024-byte limit"),
		c("LONG1 of 255 bytes", "\x8a\xff"+strings.Repeat("\x01", 255)+".", ""),
		c("INT of 3000 digits", "I"+digits+"\n.", "integer text longer than 2048 digits"),
		c("LONG of 3000 digits", "L"+digits+"L\n.", "integer text longer than 2048 digits"),
		c("FLOAT of 3000 bad bytes", "F"+digits+"x\n.", "bad float"),
		c("STRING of 3000 unquoted bytes", "S"+digits+"\n.", "bad STRING argument"),
		c("PUT of 3000 digits", "Np"+digits+"\n.", "bad memo index"),
		c("GET of 3000 digits", "g"+digits+"\n.", "bad memo index"),
		c("INT line with no end", "I"+digits, "needs 3001 more bytes"),

		// Memo indices.
		c("LONG_BINPUT 0x10000000", "\x80\x02N"+opU32(opLongBinPut, 0x10000000)+".", "memo index 268435456 is far past the 0 entries stored"),
		c("BINPUT past the gap limit", "Nq\x09.", "memo index 9 is far past"),
		c("BINPUT at the gap limit", "Nq\x08h\x08.", ""),
		c("PUT of index 2^32-1", "Np4294967295\n.", "memo index 4294967295 is far past"),
		c("BINGET of an undefined index", "h\x05", "memo index 5 was never stored"),
		c("LONG_BINGET of 2^32-1", opU32(opLongBinGet, 0xffffffff), "memo index 4294967295 was never stored"),
		c("GET of an undefined index", "g7\n", "memo index 7 was never stored"),
		c("BINGET of a gap", "Nq\x03h\x01.", "memo index 1 was never stored"),
		// CPython's MEMOIZE stores at the number of entries, not at the
		// end of a memo with gaps.
		c("MEMOIZE after a gap", "Nq\x02\x88\x94h\x01.", ""),

		// Missing STOP, MARKs and the stack.
		c("empty input", "", "data ends before the STOP opcode"),
		c("missing STOP", "\x80\x04\x95\x02\x00\x00\x00\x00\x00\x00\x00N", "data ends before the STOP opcode"),
		c("missing STOP in an open list", "\x80\x04](K\x01K\x02", "data ends before the STOP opcode"),
		c("STOP on an empty stack", ".", "stack underflow"),
		c("STOP right after MARK", "N(.", "stack underflow"),
		c("MARKs left open", "((((N.", ""),
		c("POP_MARK without MARK", "N1", "no MARK on the stack"),
		c("APPENDS without MARK", "]Ne", "no MARK on the stack"),
		c("SETITEMS without MARK", "}NNu", "no MARK on the stack"),
		c("TUPLE without MARK", "Nt", "no MARK on the stack"),
		c("LIST without MARK", "Nl", "no MARK on the stack"),
		c("DICT without MARK", "NNd", "no MARK on the stack"),
		c("FROZENSET without MARK", "N\x91", "no MARK on the stack"),
		c("APPEND under a MARK", "]N(a", "stack underflow"),
		c("SETITEM under a MARK", "}NN(s", "stack underflow"),
		c("TUPLE1 under a MARK", "N(\x85", "stack underflow"),
		c("TUPLE3 short", "NN\x87", "stack underflow"),
		c("DUP under a MARK", "N(2", "stack underflow"),
		c("MEMOIZE under a MARK", "N(\x94", "stack underflow"),
		c("BINPUT under a MARK", "N(q\x00", "stack underflow"),
		c("POP on an empty stack", "0", "stack underflow"),
		c("POP right after MARK drops the MARK", "N(0.", ""),
		c("APPENDS with its list under another MARK", "]((Ne", "stack underflow"),

		// Container types and counts.
		c("odd SETITEMS", "}(K\x01u.", "odd number of items (1) for a dict"),
		c("odd SETITEMS of 3", "}(K\x01K\x02K\x03u.", "odd number of items (3) for a dict"),
		c("odd DICT", "(K\x01d.", "odd number of items (1) for a dict"),
		c("APPEND to an int", "K\x01K\x02a", "target is a int, not a list"),
		c("APPEND to a dict", "}K\x02a", "target is a dict, not a list"),
		c("APPEND to a tuple", ")K\x02a", "target is a tuple, not a list"),
		c("APPENDS to a dict", "}(K\x01e", "target is a dict, not a list"),
		c("APPENDS to None", "N(K\x01e", "target is a None, not a list"),
		c("SETITEM to a list", "]K\x01K\x02s", "target is a list, not a dict"),
		c("SETITEMS to a tuple", ")(K\x01K\x02u", "target is a tuple, not a dict"),
		c("ADDITEMS to a list", "](K\x01\x90", "target is a list, not a set"),
		c("a list that holds itself", "]\x94h\x00a.", ""),

		// Refused and unknown opcodes.
		c("PROTO 6", "\x80\x06N.", "unsupported pickle protocol 6"),
		c("GLOBAL os.system", "cos\nsystem\n(S'echo hi'\ntR.", "names or builds a Python object"),
		c("STACK_GLOBAL", "\x80\x04\x8c\x02os\x8c\x06system\x93", "names or builds a Python object"),
		c("NEXT_BUFFER", "\x80\x05\x97", "out-of-band buffers are not supported"),
		c("zeros", "\x00\x00\x00", "byte 0x00 is not a pickle opcode"),
		c("text", "hello, world\n", "memo index"),
	}
}

// interleavedAppends makes m lists (memoized), then appends to them round
// robin (BINGET, BININT1, APPEND, POP) for about n bytes: every append
// lands on a list that is not at the arena's end.
func interleavedAppends(n, m int) string {
	var b strings.Builder
	b.WriteString("\x80\x02(")
	for i := range m {
		b.WriteString("]" + opU32(opLongBinPut, uint32(i)))
	}
	for i := 0; b.Len() < n; i++ {
		b.WriteString(opU32(opLongBinGet, uint32(i%m)) + "K\x07a0")
	}
	b.WriteString("l.")
	return b.String()
}

// memoGaps stores one value under every (maxMemoGap+1)th memo index, the
// sparsest the decoder accepts, for about n bytes.
func memoGaps(n int) string {
	var b strings.Builder
	b.WriteString("N")
	for i := uint32(maxMemoGap); b.Len() < n; i += maxMemoGap + 1 {
		b.WriteString(opU32(opLongBinPut, i))
	}
	b.WriteString(".")
	return b.String()
}

// nestedLists nests n/2 lists: n/2 EMPTY_LISTs, then APPENDs.
func nestedLists(n int) string {
	return strings.Repeat("]", n/2) + strings.Repeat("a", n/2-1) + "."
}

// deepBombs nest n lists, or open n MARKs.
func deepBombs(n int) []hostileCase {
	rep := strings.Repeat
	c := func(name, data, want string) hostileCase { return hostileCase{name, []byte(data), want} }
	return []hostileCase{
		c("nested lists (EMPTY_LIST, APPEND)", nestedLists(2*n), ""),
		c("nested lists (MARK, LIST)", rep("(", n)+rep("l", n)+".", ""),
		c("MARK bomb", rep("(", n)+".", "stack underflow"),
		c("MARK bomb, no STOP", rep("(", n), "data ends before the STOP opcode"),
	}
}

// bombCases are inputs of about n bytes that stress one structure.
func bombCases(n int) []hostileCase {
	rep := strings.Repeat
	c := func(name, data, want string) hostileCase { return hostileCase{name, []byte(data), want} }
	dict := rep("}K\x00", n/4) + "}" + rep("s", n/4) + "."
	return append(deepBombs(n/2), []hostileCase{
		c("nested tuples (MARK, TUPLE)", rep("(", n/2)+rep("t", n/2)+".", ""),
		c("nested tuples (TUPLE1)", "N"+rep("\x85", n)+".", ""),
		c("nested dicts (SETITEM)", dict, ""),
		c("EMPTY_LIST soup", rep("]", n)+".", ""),
		c("EMPTY_DICT soup", rep("}", n)+".", ""),
		c("DUP bomb", "N"+rep("2", n)+".", ""),
		c("MEMOIZE bomb", "N"+rep("\x94", n)+".", ""),
		c("LONG_BINPUT gap bomb", memoGaps(n), ""),
		c("interleaved APPENDs to 200 lists", interleavedAppends(n, 200), ""),
		c("interleaved APPENDs to 20000 lists", interleavedAppends(n, 20000), ""),
		c("POP_MARK churn", rep("(1", n/2)+"N.", ""),
		c("string soup", "\x80\x04"+rep("\x8c\x03abc0", n/6)+"N.", ""),
		c("big ints", "\x80\x04"+rep("\x8a\x09\x01\x02\x03\x04\x05\x06\x07\x08\x09", n/11)+"(t.", ""),
	}...)
}

// decodeBoth decodes data in memory and streamed in small chunks, checks
// that both give the same error or value, and returns the error and the
// larger of the two allocation figures.
func decodeBoth(t *testing.T, data []byte, newCompactor func() Compactor) (error, uint64) {
	t.Helper()
	var err1, err2 error
	var v1, v2 Value
	var vs1, vs2 *Values
	a1 := allocatedBy(func() {
		d := NewBytesDecoder(data, nil, compactorOf(newCompactor))
		v1, err1 = d.Decode()
		vs1 = d.Values()
	})
	a2 := allocatedBy(func() {
		d := NewDecoder(chunkread.New(data), nil, compactorOf(newCompactor))
		v2, err2 = d.Decode()
		vs2 = d.Values()
	})
	if (err1 == nil) != (err2 == nil) || (err1 != nil && err1.Error() != err2.Error()) {
		t.Fatalf("in-memory and streamed decodes disagree:\n  memory: %v\nstreamed: %v", err1, err2)
	}
	if err1 == nil && (v1 != v2 || vs1.ArenaLen() != vs2.ArenaLen()) {
		t.Fatalf("in-memory and streamed decodes differ: %v %v", v1, v2)
	}
	return err1, max(a1, a2)
}

func compactorOf(newCompactor func() Compactor) Compactor {
	if newCompactor == nil {
		return nil
	}
	return newCompactor()
}

func checkOutcome(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("want success, got %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("want an error saying %q, got none", want)
	}
	checkErrorText(t, err)
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}

func checkAlloc(t *testing.T, n int, alloc uint64) {
	t.Helper()
	if limit := allocBytesPerInputByte*uint64(n) + allocSlackBytes; alloc > limit {
		t.Errorf("decoding %d bytes allocated %d bytes (%.0f per byte), over the %d-byte bound",
			n, alloc, float64(alloc)/float64(n), limit)
	}
}

// TestHostileInputs decodes crafted inputs: each gives the expected one-line
// error (or value), never panics, and allocates within the linear bound.
func TestHostileInputs(t *testing.T) {
	for _, c := range hostileCases() {
		t.Run(c.name, func(t *testing.T) {
			err, alloc := decodeBoth(t, c.data, nil)
			checkOutcome(t, err, c.want)
			checkAlloc(t, len(c.data), alloc)
		})
	}
}

// TestBombs decodes inputs of a million opcodes that fill the stack, the
// memo or the container table, or interleave appends, and inputs of ten
// million opcodes (a million with -short) that nest lists ten million deep
// or open ten million MARKs, and checks the outcome and the allocation
// bound. Nothing in the decoder recurses, so depth costs only its bytes.
func TestBombs(t *testing.T) {
	cases := bombCases(1_000_000)
	if !testing.Short() {
		for _, c := range deepBombs(10_000_000) {
			c.name = "10M " + c.name
			cases = append(cases, c)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err, alloc := decodeBoth(t, c.data, nil)
			checkOutcome(t, err, c.want)
			checkAlloc(t, len(c.data), alloc)
			t.Logf("%d bytes: %.1f bytes allocated per input byte", len(c.data), float64(alloc)/float64(len(c.data)))
		})
	}
}

// TestEveryOpcodeByteAlone decodes each byte 0x00-0xff alone, after PROTO 4,
// and followed by STOP: none panics and every failure is a one-line error.
func TestEveryOpcodeByteAlone(t *testing.T) {
	for b := range 256 {
		for _, data := range [][]byte{{byte(b)}, {opProto, 4, byte(b)}, {byte(b), opStop}, {opProto, 4, opNone, byte(b), opStop}} {
			err, _ := decodeBoth(t, data, nil)
			if err == nil {
				if data[len(data)-1] != opStop {
					t.Errorf("% x decoded without a STOP", data)
				}
				continue
			}
			checkErrorText(t, err)
		}
		if opName(byte(b)) == "" {
			_, _, err := Loads([]byte{byte(b)})
			if want := fmt.Sprintf("byte 0x%02x is not a pickle opcode", b); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("byte 0x%02x: got %v, want %q", b, err, want)
			}
		}
	}
}

// recordCompactor replaces every dict (and, if lists is set, every list)
// by a record, or fails on the first dict with fail.
type recordCompactor struct {
	lists bool
	fail  error
	n     uint64
}

func (c *recordCompactor) Compact(vs *Values, v Value) (Value, bool, error) {
	if v.Kind == KindDict || (c.lists && v.Kind == KindList) {
		if c.fail != nil {
			return v, false, c.fail
		}
		c.n++
		return Record(1, c.n), true, nil
	}
	return v, false, nil
}

// TestCompactorHostileInputs covers containers that are changed after the
// compactor replaced them, and a compactor that fails.
func TestCompactorHostileInputs(t *testing.T) {
	dicts := func() Compactor { return &recordCompactor{} }
	lists := func() Compactor { return &recordCompactor{lists: true} }
	failing := func() Compactor { return &recordCompactor{fail: errors.New("compactor says no")} }
	cases := []struct {
		hostileCase
		c func() Compactor
	}{
		// The dict is memoized, appended to a list (so replaced), then
		// changed through the copy still on the stack.
		{hostileCase{"SETITEMS after replacement", []byte("}\x94]h\x00a0(K\x01K\x02u."), "modifies a dict after it was used"}, dicts},
		{hostileCase{"SETITEM after replacement", []byte("}\x94]h\x00a0K\x01K\x02s."), "modifies a dict after it was used"}, dicts},
		{hostileCase{"APPEND after replacement", []byte("]\x94]h\x00a0K\x01a."), "modifies a list after it was used"}, lists},
		{hostileCase{"APPENDS after replacement", []byte("]\x94](h\x00e0(K\x01e."), "modifies a list after it was used"}, lists},
		// A memo reference after replacement is the record itself.
		{hostileCase{"BINGET after replacement", []byte("}\x94]h\x00ah\x00\x86."), ""}, dicts},
		{hostileCase{"DUP of a replaced dict", []byte("}\x94]h\x00a02\x86."), ""}, dicts},
		{hostileCase{"a list that holds itself", []byte("]\x94h\x00a."), ""}, lists},
		{hostileCase{"compactor fails on an item", []byte("](}e."), "compactor says no"}, failing},
		{hostileCase{"compactor fails on the result", []byte("}."), "compactor says no"}, failing},
		{hostileCase{"compactor fails in a tuple", []byte("}\x85."), "compactor says no"}, failing},
		{hostileCase{"compactor fails in SETITEM", []byte("}K\x01}s."), "compactor says no"}, failing},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err, _ := decodeBoth(t, c.data, c.c)
			checkOutcome(t, err, c.want)
		})
	}
	// Freeze reports the compactor's error once; the container stays as
	// it was and is not offered again.
	vs := NewValues()
	d := vs.NewContainer(KindDict)
	c := &recordCompactor{fail: errors.New("no")}
	if _, err := vs.Freeze(d, c); err == nil {
		t.Fatal("Freeze hid the compactor's error")
	}
	if v, err := vs.Freeze(d, c); err != nil || v != d {
		t.Fatalf("second Freeze: %v %v", v, err)
	}
}

// TestLongTextLineStreamedByteByByte reads a protocol-0 line of almost
// maxLineLen bytes through a reader that returns one byte per call. The
// line scan must resume where it stopped: rescanning the buffered line
// after every byte read is quadratic (about 5*10^11 byte comparisons here,
// minutes of CPU, where the fixed decoder takes milliseconds).
func TestLongTextLineStreamedByteByByte(t *testing.T) {
	text := strings.Repeat("x", maxLineLen-10)
	data := []byte("V" + text + "\n.")
	d := NewDecoder(&slowByteReader{data: data}, nil, nil)
	v, err := d.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Values().Text(v); got != text {
		t.Fatalf("decoded %d bytes, want %d", len(got), len(text))
	}
	// One byte over the limit is refused, after reading about the limit.
	data = []byte("V" + strings.Repeat("x", maxLineLen+10) + "\n.")
	_, err = NewDecoder(&slowByteReader{data: data}, nil, nil).Decode()
	checkOutcome(t, err, "text argument longer than 1048576 bytes")
}

type slowByteReader struct {
	data []byte
	n    int
}

func (r *slowByteReader) Read(p []byte) (int, error) {
	if r.n >= len(r.data) {
		return 0, errors.New("EOF") // not io.EOF: the decoder must not read this far
	}
	p[0] = r.data[r.n]
	r.n++
	return 1, nil
}

// TestReadErrorsAreReported: a reader's error is reported as it is, not
// as a truncated file, wherever it comes (between opcodes or inside one).
func TestReadErrorsAreReported(t *testing.T) {
	data := []byte("\x80\x04]\x94(K\x01" + opU32(opBinUnicode, 5) + "abcde" + "e.")
	for cut := 1; cut < len(data); cut++ {
		r := io.MultiReader(bytes.NewReader(data[:cut]), iotest.ErrReader(errors.New("disk on fire")))
		_, err := NewDecoder(r, nil, nil).Decode()
		checkOutcome(t, err, "reading input: disk on fire")
		if errors.Is(err, ErrTruncated) {
			t.Errorf("cut %d: a read error reported as truncation: %v", cut, err)
		}
	}
}

// nestedStructure returns a pickle of a list holding k copies of a
// snapshot-like structure (a dict of lists of dicts with memo-shared
// strings and frames), each copy written out in full.
func nestedStructure(k int) []byte {
	var b bytes.Buffer
	b.WriteString("\x80\x04](")
	memo := 0
	put := func() int { b.WriteByte(opMemoize); memo++; return memo - 1 }
	get := func(i int) { b.WriteString(opU32(opLongBinGet, uint32(i))) }
	str := func(s string) int {
		b.WriteByte(opShortBinUnicode)
		b.WriteByte(byte(len(s)))
		b.WriteString(s)
		return put()
	}
	for c := range k {
		b.WriteString("}")
		put()
		b.WriteString("(")
		str("frames")
		b.WriteString("](")
		var frames []int
		for f := range 20 {
			b.WriteString("}")
			frames = append(frames, put())
			b.WriteString("(")
			str("filename")
			str(fmt.Sprintf("/src/file%d.py", f%7))
			str("line")
			b.WriteString(opU32(opBinInt, uint32(c*100+f)))
			b.WriteString("u")
		}
		b.WriteString("e")
		str("entries")
		b.WriteString("](")
		for range 50 {
			b.WriteString("}(")
			str("addr")
			b.WriteString("\x8a\x08" + string(binary.LittleEndian.AppendUint64(nil, uint64(c)<<40)))
			str("frames")
			b.WriteString("](")
			for _, f := range frames[:10] {
				get(f)
			}
			b.WriteString("eu")
		}
		b.WriteString("eu")
	}
	b.WriteString("e.")
	return b.Bytes()
}

// TestWorkIsLinear checks linear time without timing anything: it doubles
// the size of inputs whose structure repeats (copies of a nested
// structure, rounds of interleaved appends, more interleaved lists, memo
// gap fills, nesting depth, random programs) and checks that the bytes
// allocated and the arena words used grow like the input: at most 1.6x the
// input's growth per doubling (slice growth and the containers that all
// move at the same round make steps) and 1.5x over the whole 16x range.
// Quadratic work shows as 2x per doubling and 16x over the range.
func TestWorkIsLinear(t *testing.T) {
	inputs := map[string]func(k int) []byte{
		"copies of a nested structure": nestedStructure,
		"interleaved appends, rounds": func(k int) []byte {
			return []byte(interleavedAppends(k*20000, 500))
		},
		"interleaved appends, lists": func(k int) []byte {
			return []byte(interleavedAppends(k*20000, k*100))
		},
		"memo gaps": func(k int) []byte {
			return []byte(memoGaps(k * 20000))
		},
		"nesting depth": func(k int) []byte {
			return []byte(nestedLists(k * 20000))
		},
		"random programs": func(k int) []byte {
			return genProgram(rand.New(rand.NewSource(3)), k*20000, false)
		},
	}
	for name, gen := range inputs {
		t.Run(name, func(t *testing.T) {
			var prevAlloc, firstAlloc uint64
			var prevArena, prevLen, firstLen int
			for k := 4; k <= 64; k *= 2 {
				data := gen(k)
				var vs *Values
				var err error
				runtime.GC()
				alloc := allocatedBy(func() { _, vs, err = Loads(data) })
				if err != nil {
					t.Fatalf("k=%d: %v", k, err)
				}
				arena := vs.ArenaLen()
				t.Logf("k=%2d: %8d bytes in, %9d allocated, %7d arena words", k, len(data), alloc, arena)
				if prevLen > 0 {
					grow := float64(len(data)) / float64(prevLen)
					if r := float64(alloc) / float64(prevAlloc); r > 1.6*grow {
						t.Errorf("k=%d: input grew %.2fx, bytes allocated %.2fx", k, grow, r)
					}
					if r := float64(arena) / float64(max(prevArena, 1)); prevArena > 0 && r > 1.6*grow {
						t.Errorf("k=%d: input grew %.2fx, arena %.2fx", k, grow, r)
					}
				} else {
					firstAlloc, firstLen = alloc, len(data)
				}
				prevAlloc, prevArena, prevLen = alloc, arena, len(data)
			}
			grow := float64(prevLen) / float64(firstLen)
			if r := float64(prevAlloc) / float64(firstAlloc); r > 1.5*grow {
				t.Errorf("input grew %.1fx, bytes allocated %.1fx", grow, r)
			}
		})
	}
}

// TestMemoryIsLinearInInputSize bounds what decoding N bytes may allocate:
// at most K*N + C bytes (TotalAlloc, garbage included) with K = 512 and
// C = 1 MiB, and at most 128*N + C bytes still live afterwards.
//
// Why K = 512: an input byte adds at most 64 bytes of live state. The
// costliest one-byte opcodes are EMPTY_LIST/DICT/TUPLE/SET (a 16-byte stack
// word and a 32-byte container record) and TUPLE1 (a container record and
// a 16-byte arena word); MEMOIZE adds 8 bytes (memo pages of 32 KiB, never
// copied), MARK 8, LONG_BINPUT at most 9 memo words for 5 bytes (15 per
// byte), a string at most its bytes plus
// about 60 bytes of index for 4 input bytes; an APPEND to a container that
// is not at the arena's end moves it with twice the room, which at most
// triples its words. Those grow in slices that Go's append enlarges by 1.25x
// once large, so all the arrays a slice ever had add up to at most 5 times
// its final capacity, which is at most 1.25x (plus size-class rounding,
// under 12.5%) its length: 64 * 5 * 1.25 * 1.125 = 450 < 512. Live memory
// is 64 * 1.25 * 1.125 = 90 < 128 per byte. C covers the streaming buffer
// (64 KiB) and the store's maps. The measured worst case (EMPTY_LIST soup,
// TUPLE1 chains) is about 320 bytes allocated and 80 live per input byte;
// real snapshots take 8-60 and 1-2 (most containers are replaced by records
// as they complete, and strings are shared).
func TestMemoryIsLinearInInputSize(t *testing.T) {
	const n = 1 << 20
	type input struct {
		name string
		data []byte
	}
	var inputs []input
	for _, c := range bombCases(n) {
		inputs = append(inputs, input{c.name, c.data})
	}
	r := rand.New(rand.NewSource(7))
	for i := range 4 {
		inputs = append(inputs, input{fmt.Sprintf("random program %d", i), genProgram(r, n<<(i%3), i%2 == 0)})
	}
	// Byte soup: random opcodes with random arguments. Most stop at an
	// early error; the bound holds either way.
	ops := []byte("(.012FIJKLMNSTUVXabdeghjlpqrstu}])G")
	ops = append(ops, 0x80, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x8f, 0x90, 0x91, 0x94, 0x95)
	for i := range 8 {
		soup := make([]byte, n)
		for j := range soup {
			if r.Intn(3) == 0 {
				soup[j] = ops[r.Intn(len(ops))]
			} else {
				soup[j] = byte(r.Intn(256 >> uint(i%8)))
			}
		}
		inputs = append(inputs, input{fmt.Sprintf("byte soup %d", i), soup})
	}
	for _, f := range realdata.FilesIfPresent() {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Base(f)
		inputs = append(inputs, input{base, data}, input{base + " (first third)", data[:len(data)/3]})
	}
	worst, worstLive := 0.0, 0.0
	for _, in := range inputs {
		t.Run(in.name, func(t *testing.T) {
			var keep *Values
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, keep, _ = Loads(in.data)
			runtime.ReadMemStats(&after)
			runtime.GC()
			var kept runtime.MemStats
			runtime.ReadMemStats(&kept)
			runtime.KeepAlive(keep)
			total := after.TotalAlloc - before.TotalAlloc
			live := int64(kept.HeapAlloc) - int64(before.HeapAlloc)
			checkAlloc(t, len(in.data), total)
			if limit := 128*int64(len(in.data)) + allocSlackBytes; live > limit {
				t.Errorf("%d bytes decoded keep %d bytes live, over %d", len(in.data), live, limit)
			}
			_, streamed := decodeBoth(t, in.data, nil)
			checkAlloc(t, len(in.data), streamed)
			ratio, liveRatio := float64(max(total, streamed))/float64(len(in.data)), float64(live)/float64(len(in.data))
			if len(in.data) >= 64<<10 { // smaller ones are all slack
				worst, worstLive = max(worst, ratio), max(worstLive, liveRatio)
			}
			t.Logf("%8d bytes: %6.1f allocated, %5.1f live per byte", len(in.data), ratio, liveRatio)
		})
	}
	t.Logf("worst: %.1f bytes allocated and %.1f live per input byte (bounds %d and 128)", worst, worstLive, allocBytesPerInputByte)
}

// TestErrorsQuoteInputBriefly: error messages that quote the input quote at
// most a short prefix, however long the offending text is.
func TestErrorsQuoteInputBriefly(t *testing.T) {
	long := strings.Repeat("\x01é", maxLineLen/4)
	for _, data := range []string{
		"F" + long + "\n.",
		"S" + long + "\n.",
		"S'" + long + "\n.",
		"I" + long + "\n.",
		"p" + long + "\n.",
		"g" + long + "\n.",
		"I" + strconv.Itoa(7) + long[:100] + "\n.",
	} {
		_, _, err := Loads([]byte(data))
		if err == nil {
			t.Fatalf("%.20q: no error", data)
		}
		checkErrorText(t, err)
	}
}
