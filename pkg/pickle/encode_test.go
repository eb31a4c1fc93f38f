package pickle

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// viewerOps are the opcodes PyTorch's MemoryViz.js reads (protocols 2-4),
// the set shared/tools/check_snapshot.py enforces.
var viewerOps = map[byte]bool{
	opProto: true, opFrame: true, opStop: true, opMark: true, opEmptyDict: true, opDict: true,
	opSetItem: true, opSetItems: true, opEmptyList: true, opList: true, opAppend: true, opAppends: true,
	opEmptyTuple: true, opTuple: true, opTuple1: true, opTuple2: true, opTuple3: true, opNone: true,
	opNewTrue: true, opNewFalse: true, opBinInt: true, opBinInt1: true, opBinInt2: true, opLong1: true,
	opBinFloat: true, opShortBinUnicode: true, opBinUnicode: true, opBinGet: true, opLongBinGet: true,
	opBinPut: true, opLongBinPut: true, opMemoize: true,
}

// encoderOps are the opcodes the Encoder itself may write (a subset of
// viewerOps: no SETITEM/APPEND/DICT/LIST/BINPUT).
var encoderOps = map[byte]bool{
	opProto: true, opFrame: true, opStop: true, opMark: true, opEmptyDict: true, opSetItems: true,
	opEmptyList: true, opAppends: true, opEmptyTuple: true, opTuple: true, opTuple1: true, opTuple2: true,
	opTuple3: true, opNone: true, opNewTrue: true, opNewFalse: true, opBinInt: true, opBinInt1: true,
	opBinInt2: true, opLong1: true, opBinFloat: true, opShortBinUnicode: true, opBinUnicode: true,
	opBinGet: true, opLongBinGet: true, opMemoize: true,
}

// scanStats is what scanOps found.
type scanStats struct {
	ops      map[string]int
	frames   []int // data length of each FRAME
	outside  int   // opcode bytes outside any frame (after the first FRAME)
	maxLong1 int   // longest LONG1 payload
}

// scanOps walks the opcodes of a pickle written in the viewer's subset,
// checking that every opcode is allowed, that each FRAME's length matches
// whole opcodes, and that the pickle ends with STOP at its last byte.
func scanOps(data []byte, allowed map[byte]bool) (scanStats, error) {
	st := scanStats{ops: map[string]int{}}
	frameEnd := -1 // end offset of the current frame, -1 outside frames
	framed := false
	pos := 0
	need := func(n int) error {
		if pos+n > len(data) {
			return fmt.Errorf("opcode at %d needs %d bytes, data ends at %d", pos, n, len(data))
		}
		return nil
	}
	for pos < len(data) {
		start := pos
		if frameEnd >= 0 && pos == frameEnd {
			frameEnd = -1
		}
		op := data[pos]
		name := opName(op)
		if !allowed[op] {
			return st, fmt.Errorf("opcode %q (0x%02x) at %d is not allowed", name, op, pos)
		}
		st.ops[name]++
		pos++
		var arg int
		switch op {
		case opProto, opBinInt1, opBinGet:
			arg = 1
		case opBinInt2:
			arg = 2
		case opBinInt, opLongBinGet, opLongBinPut:
			arg = 4
		case opBinPut:
			arg = 1
		case opBinFloat, opFrame:
			arg = 8
		case opLong1, opShortBinUnicode:
			if err := need(1); err != nil {
				return st, err
			}
			arg = 1 + int(data[pos])
			if op == opLong1 && int(data[pos]) > st.maxLong1 {
				st.maxLong1 = int(data[pos])
			}
		case opBinUnicode:
			if err := need(4); err != nil {
				return st, err
			}
			arg = 4 + int(binary.LittleEndian.Uint32(data[pos:]))
		}
		if err := need(arg); err != nil {
			return st, err
		}
		if op == opFrame {
			if frameEnd >= 0 {
				return st, fmt.Errorf("FRAME at %d inside the frame ending at %d", start, frameEnd)
			}
			n := int(binary.LittleEndian.Uint64(data[pos:]))
			st.frames = append(st.frames, n)
			frameEnd = pos + 8 + n
			if frameEnd > len(data) {
				return st, fmt.Errorf("FRAME at %d claims %d bytes past the end", start, n)
			}
			framed = true
		} else if frameEnd >= 0 && pos+arg > frameEnd {
			return st, fmt.Errorf("%s at %d crosses the end of its frame at %d", name, start, frameEnd)
		} else if frameEnd < 0 && framed {
			st.outside += 1 + arg
		}
		pos += arg
		if op == opStop {
			if pos != len(data) {
				return st, fmt.Errorf("STOP at %d but %d bytes follow", start, len(data)-pos)
			}
			if frameEnd >= 0 && frameEnd != pos {
				return st, fmt.Errorf("STOP at %d inside a frame that ends at %d", start, frameEnd)
			}
			return st, nil
		}
	}
	return st, errors.New("no STOP")
}

// Trees: Go values the tests encode, with their canonical text computed
// independently of the decoder.
type (
	tDict   []any // key, value, key, value ...
	tTuple  []any
	tShared struct {
		key  Key
		node any
		size int // expanded size
	}
)

func encodeTree(e *Encoder, v any) {
	switch x := v.(type) {
	case nil:
		e.None()
	case bool:
		e.Bool(x)
	case int:
		e.Int(int64(x))
	case int64:
		e.Int(x)
	case uint64:
		e.Uint(x)
	case *big.Int:
		e.BigInt(x)
	case float64:
		e.Float(x)
	case string:
		e.Str(x)
	case []any:
		e.BeginList()
		for _, it := range x {
			encodeTree(e, it)
		}
		e.EndList()
	case tDict:
		e.BeginDict()
		for i := 0; i < len(x); i += 2 {
			if s, ok := x[i].(string); ok {
				e.Key(s)
			} else {
				encodeTree(e, x[i])
			}
			encodeTree(e, x[i+1])
		}
		e.EndDict()
	case tTuple:
		e.BeginTuple(len(x))
		for _, it := range x {
			encodeTree(e, it)
		}
		e.EndTuple()
	case *tShared:
		if e.Ref(x.key) {
			return
		}
		switch n := x.node.(type) {
		case []any:
			e.BeginList()
			e.Memo(x.key)
			for _, it := range n {
				encodeTree(e, it)
			}
			e.EndList()
		case tDict:
			e.BeginDict()
			e.Memo(x.key)
			for i := 0; i < len(n); i += 2 {
				encodeTree(e, n[i])
				encodeTree(e, n[i+1])
			}
			e.EndDict()
		default:
			encodeTree(e, n)
			e.Memo(x.key)
		}
	default:
		panic(fmt.Sprintf("tree node %T", v))
	}
}

func treeCanon(v any, b *strings.Builder) {
	switch x := v.(type) {
	case nil:
		b.WriteString("N")
	case bool:
		if x {
			b.WriteString("T")
		} else {
			b.WriteString("F")
		}
	case int:
		fmt.Fprintf(b, "i%d", x)
	case int64:
		fmt.Fprintf(b, "i%d", x)
	case uint64:
		fmt.Fprintf(b, "i%d", x)
	case *big.Int:
		fmt.Fprintf(b, "i%s", x)
	case float64:
		var w [8]byte
		binary.BigEndian.PutUint64(w[:], math.Float64bits(x))
		b.WriteString("f" + hex.EncodeToString(w[:]))
	case string:
		b.WriteString("s" + hex.EncodeToString([]byte(x)))
	case []any:
		b.WriteString("[")
		for i, it := range x {
			if i > 0 {
				b.WriteString(",")
			}
			treeCanon(it, b)
		}
		b.WriteString("]")
	case tTuple:
		b.WriteString("(")
		for i, it := range x {
			if i > 0 {
				b.WriteString(",")
			}
			treeCanon(it, b)
		}
		b.WriteString(")")
	case tDict:
		b.WriteString("{")
		for i := 0; i < len(x); i += 2 {
			if i > 0 {
				b.WriteString(",")
			}
			treeCanon(x[i], b)
			b.WriteString(":")
			treeCanon(x[i+1], b)
		}
		b.WriteString("}")
	case *tShared:
		treeCanon(x.node, b)
	default:
		panic(fmt.Sprintf("tree node %T", v))
	}
}

func canonOfTree(v any) string {
	var b strings.Builder
	treeCanon(v, &b)
	return b.String()
}

func encodeBytes(t testing.TB, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	e := NewEncoder(&buf)
	encodeTree(e, v)
	if err := e.Close(); err != nil {
		t.Fatalf("encode: %v", err)
	}
	return buf.Bytes()
}

// randTree makes a random tree of about size nodes, sharing some small
// subtrees (whose expanded size is bounded, so canonical texts stay linear).
func randTree(r *rand.Rand, size int, shared *[]*tShared) any {
	v, _ := randNode(r, size, shared)
	return v
}

func randNode(r *rand.Rand, size int, shared *[]*tShared) (any, int) {
	if size <= 1 || (size < 100 && r.IntN(4) == 0) {
		switch r.IntN(12) {
		case 0:
			return nil, 1
		case 1:
			return r.IntN(2) == 0, 1
		case 2:
			return int64(r.IntN(300)) - 20, 1
		case 3:
			return int64(r.Uint64()), 1
		case 4:
			return r.Uint64() >> uint(r.IntN(64)), 1
		case 5:
			return r.NormFloat64() * 1e6, 1
		case 6:
			return []string{"", "addr", "size", "frames", "é日本", "x\x00y", strings.Repeat("long", 80)}[r.IntN(7)], 1
		case 7:
			return "s" + strconv.Itoa(r.IntN(50)), 1
		case 8:
			if len(*shared) > 0 {
				s := (*shared)[r.IntN(len(*shared))]
				return s, s.size
			}
			return nil, 1
		case 9:
			return int64(r.IntN(1<<20)) << uint(r.IntN(44)), 1
		default:
			return -int64(r.Uint64() >> uint(r.IntN(64))), 1
		}
	}
	n := r.IntN(min(size, 40)) + 1
	if r.IntN(30) == 0 {
		n = max(BatchSize*r.IntN(3)+r.IntN(3)-1, 0) // batch boundaries
	}
	per := max(size/max(n, 1), 1)
	var node any
	total := 1
	switch r.IntN(5) {
	case 0:
		d := tDict{}
		for i := 0; i < n; i++ {
			v, sz := randNode(r, per, shared)
			d = append(d, "k"+strconv.Itoa(i), v) // distinct: Python keeps one of equal keys
			total += sz + 1
		}
		node = d
	case 1:
		t := tTuple{}
		for i := 0; i < n%6; i++ {
			v, sz := randNode(r, per, shared)
			t = append(t, v)
			total += sz
		}
		return t, total
	default:
		l := []any{}
		for i := 0; i < n; i++ {
			v, sz := randNode(r, per, shared)
			l = append(l, v)
			total += sz
		}
		node = l
	}
	if total <= 300 && r.IntN(3) == 0 {
		// Keys in dense spaces and in the map (large space or sparse ID).
		key := Key{Space: uint32(r.IntN(3)), ID: uint64(len(*shared))}
		switch r.IntN(4) {
		case 0:
			key.Space = 1 << 20
		case 1:
			key.ID |= 1 << 40
		}
		s := &tShared{key: key, node: node, size: total}
		*shared = append(*shared, s)
		return s, total
	}
	return node, total
}

// TestEncodeRandomTreesDecode encodes random values and checks that the Go
// decoder reads back exactly the values, that only the viewer's opcodes
// appear and that frames are well formed.
func TestEncodeRandomTreesDecode(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		var shared []*tShared
		tree := randTree(r, 1+r.IntN(3000), &shared)
		data := encodeBytes(t, tree)
		if _, err := scanOps(data, encoderOps); err != nil {
			t.Fatalf("tree %d: %v", i, err)
		}
		v, vs, err := Loads(data)
		if err != nil {
			t.Fatalf("tree %d: decode: %v", i, err)
		}
		if got, want := Canonical(vs, v), canonOfTree(tree); got != want {
			t.Fatalf("tree %d: decoded value differs\n got: %.300s\nwant: %.300s", i, got, want)
		}
	}
}

// TestEncodeAgreesWithCPython writes random values (many frames, batches,
// shared subtrees, large strings between frames) and checks that CPython
// loads each to the value that was encoded.
func TestEncodeAgreesWithCPython(t *testing.T) {
	py := python(t)
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(3, 4))
	var files []string
	var want []string
	for i := range 8 {
		var shared []*tShared
		tree := randTree(r, 2000+r.IntN(30000), &shared)
		if i == 0 {
			// A string too large for a frame, used twice.
			big := strings.Repeat("0123456789abcdef", 5000)
			tree = []any{tree, big, int64(7), big}
		}
		data := encodeBytes(t, tree)
		st, err := scanOps(data, encoderOps)
		if err != nil {
			t.Fatalf("tree %d: %v", i, err)
		}
		if i == 0 && st.outside == 0 {
			t.Errorf("the 80 KB string was not written outside the frames")
		}
		f := filepath.Join(dir, fmt.Sprintf("t%d.pickle", i))
		if err := os.WriteFile(f, data, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		want = append(want, canonOfTree(tree))
	}
	for i, f := range files {
		if got := pythonCanon(t, py, f); got != want[i] {
			t.Errorf("%s: CPython reads a different value\n got: %.300s\nwant: %.300s", filepath.Base(f), got, want[i])
		}
	}
}

// TestEncodeByteIdenticalToCPython re-encodes, with Value, pickles CPython
// wrote with protocol 4 and checks the bytes are the same: Value memoizes
// every container as CPython does, and the sample avoids the two shapes
// where the Encoder differs on purpose: one-item containers, which CPython
// writes with APPEND/SETITEM; the empty string, which it memoizes; and dicts
// of an exact multiple of 1000 items, after which CPython's C pickler adds
// an empty MARK SETITEMS batch.
func TestEncodeByteIdenticalToCPython(t *testing.T) {
	py := python(t)
	dir := t.TempDir()
	script := `
import pickle, sys
def intern(v):
    if isinstance(v, str): return sys.intern(v)
    if isinstance(v, list): return [intern(x) for x in v]
    if isinstance(v, tuple): return tuple(intern(x) for x in v)
    if isinstance(v, dict): return {intern(k): intern(x) for k, x in v.items()}
    return v
frame = {"name": "forward", "filename": "/x/model.py", "line": 42}
stack = [frame, {"name": "<module>", "filename": "train.py", "line": -7}]
v = {
  "ints": [0, 1, 255, 256, 65535, 65536, -1, -2**31, 2**31-1, 2**31, -2**31-1, 2**47+12345,
           2**53, 2**63-1, -2**63, 2**63, 2**64-1, 10**40, -10**40, -128, -129, -32768, -2**39],
  "floats": [0.0, -0.0, 1.5, -2.25, 1e300, float("inf"), 3.141592653589793],
  "strs": ["a", "é", "日本語", "x" * 300, "emoji \U0001F600", "quote ' \" \\ \n"],
  "consts": [None, True, False],
  "tuples": [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), (0, 0), ("a", ("b", "c"))],
  "nested": {"a": {"b": {"c": [[], {}, [[1, 2], [3, 4]]], "d": 0}, "e": 1}, "f": 2},
  "shared": [stack, stack, frame, frame],
  "big_list": list(range(2500)),
  "big_dict": {str(i): i for i in range(2100)},
  "list_1000": list(range(1000, 2000)),
}
with open(sys.argv[1], "wb") as f:
    pickle.dump(intern(v), f, protocol=4)
`
	src := filepath.Join(dir, "make.py")
	if err := os.WriteFile(src, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "cpython.pickle")
	if out, err := exec.Command(py, src, file).CombinedOutput(); err != nil {
		t.Fatalf("make.py: %v\n%s", err, out)
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	v, vs, err := Loads(want)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	e := NewEncoder(&buf)
	e.Value(vs, v)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	got := buf.Bytes()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("bytes differ from CPython's at offset %d (len %d vs %d)\n got: % x\nwant: % x",
			i, len(got), len(want), got[max(i-16, 0):min(i+16, len(got))], want[max(i-16, 0):min(i+16, len(want))])
	}
}

func TestEncodeIntOpcodes(t *testing.T) {
	cases := []struct {
		v    any // int64 or uint64
		want string
	}{
		{int64(0), "4b00"},
		{int64(255), "4bff"},
		{int64(256), "4d0001"},
		{int64(65535), "4dffff"},
		{int64(65536), "4a00000100"},
		{int64(-1), "4affffffff"},
		{int64(math.MaxInt32), "4affffff7f"},
		{int64(math.MinInt32), "4a00000080"},
		{int64(1 << 31), "8a050000008000"},
		{int64(-1<<31 - 1), "8a05ffffff7fff"},
		{int64(-1 << 39), "8a050000000080"},
		{int64(0x7f0000000000), "8a0600000000007f"},
		{int64(0x800000000000), "8a07000000000080" + "00"},
		{int64(1735689600000000), "8a0700600cba992a06"},
		{int64(math.MaxInt64), "8a08ffffffffffffff7f"},
		{int64(math.MinInt64), "8a080000000000000080"},
		{uint64(1 << 40), "8a060000000000" + "01"},
		{uint64(1 << 63), "8a09000000000000008000"},
		{uint64(math.MaxUint64), "8a09ffffffffffffffff00"},
	}
	for _, c := range cases {
		var buf bytes.Buffer
		e := NewEncoder(&buf)
		switch x := c.v.(type) {
		case int64:
			e.Int(x)
		case uint64:
			e.Uint(x)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		data := buf.Bytes()
		// PROTO 4, FRAME n (none when the frame is under 4 bytes), the
		// int, STOP.
		skip := 2
		if data[2] == opFrame {
			skip = 11
		}
		body := hex.EncodeToString(data[skip : len(data)-1])
		if body != c.want {
			t.Errorf("%v: got %s, want %s", c.v, body, c.want)
		}
		v, vs, err := Loads(data)
		if err != nil {
			t.Fatalf("%v: %v", c.v, err)
		}
		if got, want := Canonical(vs, v), fmt.Sprintf("i%d", c.v); got != want {
			t.Errorf("%v: decodes to %s", c.v, got)
		}
	}
	// Big ints: minimal two's complement of any length up to 255 bytes.
	for _, s := range []string{"18446744073709551616", "-18446744073709551617", "-9223372036854775809", "1" + strings.Repeat("0", 40)} {
		x, _ := new(big.Int).SetString(s, 10)
		data := encodeBytes(t, x)
		v, vs, err := Loads(data)
		if err != nil {
			t.Fatal(err)
		}
		if got := Canonical(vs, v); got != "i"+s {
			t.Errorf("%s decodes to %s", s, got)
		}
	}
	huge := new(big.Int).Lsh(big.NewInt(1), 8*255)
	e := NewEncoder(&bytes.Buffer{})
	e.BigInt(huge)
	if err := e.Close(); !errors.Is(err, ErrEncoder) {
		t.Errorf("a 256-byte int: %v, want an ErrEncoder", err)
	}
}

func TestEncodeExactBytes(t *testing.T) {
	// {"a": [1, 2], "b": "a", "c": ()} with the list memoized, as the
	// opcodes are spelled out by hand.
	var buf bytes.Buffer
	e := NewEncoder(&buf)
	e.BeginDict()
	e.Key("a")
	e.BeginList()
	e.Memo(Key{ID: 1})
	e.Int(1)
	e.Int(2)
	e.EndList()
	e.Key("b")
	e.Str("a")
	e.Key("c")
	e.BeginTuple(0)
	e.EndTuple()
	e.Key("d")
	if !e.Ref(Key{ID: 1}) {
		t.Fatal("Ref of a memoized key reports false")
	}
	if e.Ref(Key{ID: 2}) {
		t.Fatal("Ref of an unknown key reports true")
	}
	e.Key("e")
	e.BeginList()
	e.EndList()
	e.EndDict()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	body := "}(" + "\x8c\x01a\x94" + "]\x94(K\x01K\x02e" + "\x8c\x01b\x94" + "h\x00" + "\x8c\x01c\x94" + ")" +
		"\x8c\x01d\x94" + "h\x01" + "\x8c\x01e\x94" + "]" + "u."
	want := "\x80\x04\x95" + string(binary.LittleEndian.AppendUint64(nil, uint64(len(body)))) + body
	if got := buf.String(); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestEncodeBatches(t *testing.T) {
	count := func(n int, dict bool) map[string]int {
		var buf bytes.Buffer
		e := NewEncoder(&buf)
		if dict {
			e.BeginDict()
			for i := range n {
				e.Key("k" + strconv.Itoa(i))
				e.Int(int64(i))
			}
			e.EndDict()
		} else {
			e.BeginList()
			for i := range n {
				e.Int(int64(i))
			}
			e.EndList()
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		st, err := scanOps(buf.Bytes(), encoderOps)
		if err != nil {
			t.Fatal(err)
		}
		v, vs, err := Loads(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if vs.Len(v) != n {
			t.Errorf("%d items decode to %d", n, vs.Len(v))
		}
		return st.ops
	}
	for _, c := range []struct{ n, batches int }{{0, 0}, {1, 1}, {999, 1}, {1000, 1}, {1001, 2}, {2500, 3}, {3000, 3}} {
		for _, dict := range []bool{false, true} {
			ops := count(c.n, dict)
			closeOp := "APPENDS"
			if dict {
				closeOp = "SETITEMS"
			}
			if ops["MARK"] != c.batches || ops[closeOp] != c.batches {
				t.Errorf("n=%d dict=%v: %d MARK, %d %s; want %d each", c.n, dict, ops["MARK"], ops[closeOp], closeOp, c.batches)
			}
		}
	}
}

func TestEncodeFramesAndDeterminism(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var shared []*tShared
	tree := randTree(r, 400000, &shared)
	a := encodeBytes(t, tree)
	b := encodeBytes(t, tree)
	if !bytes.Equal(a, b) {
		t.Fatal("the same calls gave different bytes")
	}
	st, err := scanOps(a, encoderOps)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.frames) < 3 {
		t.Fatalf("%d bytes in %d frames; want several", len(a), len(st.frames))
	}
	for i, n := range st.frames {
		if n > FrameSize {
			t.Errorf("frame %d holds %d bytes, over %d", i, n, FrameSize)
		}
		if i < len(st.frames)-1 && n < FrameSize-64 {
			t.Errorf("frame %d holds only %d bytes though more followed", i, n)
		}
	}
	if st.outside != 0 {
		t.Errorf("%d bytes outside frames with no large string", st.outside)
	}
	t.Logf("%d bytes, %d frames, opcodes %v", len(a), len(st.frames), st.ops)
}

func TestEncodeTinyPickleHasNoFrame(t *testing.T) {
	// Like CPython, a frame of fewer than 4 bytes goes without FRAME.
	var buf bytes.Buffer
	e := NewEncoder(&buf)
	e.None()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != "\x80\x04N." {
		t.Errorf("got %q", got)
	}
}

func TestEncodeStrings(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain", "plain"},
		{"", ""},
		{"a\xffb", "a\uFFFDb"},
		{"\xed\xa0\x80", "\xed\xa0\x80"}, // a lone surrogate, kept for CPython's surrogatepass
		{"\xe6\x97", "\uFFFD\uFFFD"},
		{strings.Repeat("é", 200), strings.Repeat("é", 200)},
	}
	for _, c := range cases {
		data := encodeBytes(t, []any{c.in, c.in})
		v, vs, err := Loads(data)
		if err != nil {
			t.Fatal(err)
		}
		items := vs.Items(v)
		if got := vs.Text(items[0]); got != c.want {
			t.Errorf("%q decodes to %q, want %q", c.in, got, c.want)
		}
		if items[0] != items[1] {
			t.Errorf("%q: second use is not the same string", c.in)
		}
	}
	// The second use of a non-empty string is a memo reference.
	data := encodeBytes(t, []any{"frames", "frames", "frames"})
	st, err := scanOps(data, encoderOps)
	if err != nil {
		t.Fatal(err)
	}
	if st.ops["SHORT_BINUNICODE"] != 1 || st.ops["BINGET"] != 2 {
		t.Errorf("three uses of one string: %v", st.ops)
	}
}

func TestEncodeMemoIndexWidths(t *testing.T) {
	// Past 256 memo entries references become LONG_BINGET.
	var items []any
	for i := range 600 {
		items = append(items, "s"+strconv.Itoa(i))
	}
	items = append(items, "s3", "s599")
	data := encodeBytes(t, items)
	st, err := scanOps(data, encoderOps)
	if err != nil {
		t.Fatal(err)
	}
	if st.ops["BINGET"] != 1 || st.ops["LONG_BINGET"] != 1 {
		t.Errorf("ops %v", st.ops)
	}
	v, vs, err := Loads(data)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Canonical(vs, v), canonOfTree(items); got != want {
		t.Error("decoded value differs")
	}
}

func TestEncoderMisuse(t *testing.T) {
	cases := map[string]func(e *Encoder){
		"EndList with none open":  func(e *Encoder) { e.EndList() },
		"EndDict closes a list":   func(e *Encoder) { e.BeginList(); e.EndDict() },
		"Key in a list":           func(e *Encoder) { e.BeginList(); e.Key("a") },
		"Key where a value is":    func(e *Encoder) { e.BeginDict(); e.Key("a"); e.Key("b") },
		"dict ends after a key":   func(e *Encoder) { e.BeginDict(); e.Key("a"); e.EndDict() },
		"two top-level values":    func(e *Encoder) { e.Int(1); e.Int(2) },
		"open container at Close": func(e *Encoder) { e.BeginList() },
		"nothing written":         func(e *Encoder) {},
		"Memo after BeginTuple":   func(e *Encoder) { e.BeginTuple(1); e.Memo(Key{}) },
		"Memo twice on one value": func(e *Encoder) { e.BeginList(); e.Int(1); e.EndList(); e.Memo(Key{}); e.Memo(Key{}) },
		"Memo before any value":   func(e *Encoder) { e.Memo(Key{}) },
		"Memo twice":              func(e *Encoder) { e.BeginList(); e.Memo(Key{}); e.BeginList(); e.Memo(Key{}) },
		"tuple too long":          func(e *Encoder) { e.BeginTuple(1); e.Int(1); e.Int(2) },
		"tuple too short":         func(e *Encoder) { e.BeginTuple(2); e.Int(1); e.EndTuple() },
		"EndTuple with none open": func(e *Encoder) { e.BeginList(); e.EndTuple() },
		"Value of a set": func(e *Encoder) {
			vs := NewValues()
			e.Value(vs, vs.NewContainer(KindSet))
		},
		"Value of bytes": func(e *Encoder) {
			vs := NewValues()
			e.Value(vs, vs.bytesValue([]byte("x")))
		},
	}
	for name, f := range cases {
		var buf bytes.Buffer
		e := NewEncoder(&buf)
		f(e)
		err := e.Close()
		if !errors.Is(err, ErrEncoder) {
			t.Errorf("%s: Close gives %v, want an ErrEncoder", name, err)
		}
		if e.Err() != err {
			t.Errorf("%s: Err and Close disagree", name)
		}
		// Sticky: later calls change nothing.
		n := buf.Len()
		e.Int(1)
		e.BeginList()
		if e.Close() != err || buf.Len() != n {
			t.Errorf("%s: the error is not sticky", name)
		}
	}
}

// failWriter accepts limit bytes and then fails.
type failWriter struct {
	limit, n int
	short    bool
}

var errDiskFull = errors.New("disk full")

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n+len(p) <= w.limit {
		w.n += len(p)
		return len(p), nil
	}
	k := w.limit - w.n
	w.n = w.limit
	if w.short {
		return k, nil
	}
	return k, errDiskFull
}

func TestEncoderWriterErrors(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var shared []*tShared
	tree := randTree(r, 300000, &shared)
	full := encodeBytes(t, tree)
	for _, limit := range []int{0, 1, 2, 100, FrameSize, FrameSize + 11, len(full) / 2, len(full) - 1} {
		for _, short := range []bool{false, true} {
			w := &failWriter{limit: limit, short: short}
			e := NewEncoder(w)
			encodeTree(e, tree)
			err := e.Close()
			want := errDiskFull
			if short {
				want = io.ErrShortWrite
			}
			if !errors.Is(err, want) {
				t.Errorf("limit %d short=%v: Close gives %v", limit, short, err)
			}
			if e.Written() != int64(limit) {
				t.Errorf("limit %d: Written reports %d", limit, e.Written())
			}
		}
	}
	w := &failWriter{limit: len(full)}
	e := NewEncoder(w)
	encodeTree(e, tree)
	if err := e.Close(); err != nil || e.Written() != int64(len(full)) {
		t.Errorf("exact room: %v, %d bytes", err, e.Written())
	}
}

// BenchmarkEncoder writes snapshot-shaped trace entries: small dicts with
// memoized keys, pointer-sized ints and shared stacks.
func BenchmarkEncoder(b *testing.B) {
	var buf bytes.Buffer
	encodeEntries(b, &buf)
	b.SetBytes(int64(buf.Len()))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		encodeEntries(b, &buf)
	}
}

// BenchmarkDecode decodes what BenchmarkEncoder writes into a generic
// value tree (no compactor: every dict and list is kept), in memory and
// streamed; MB/s is input bytes per second.
func BenchmarkDecode(b *testing.B) {
	var buf bytes.Buffer
	encodeEntries(b, &buf)
	data := buf.Bytes()
	b.Run("memory", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := Loads(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stream", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := NewDecoder(bytes.NewReader(data), nil, nil).Decode(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// encodeEntries writes 50,000 snapshot-shaped trace entries into buf.
func encodeEntries(b *testing.B, buf *bytes.Buffer) {
	const entries = 50000
	run := func() {
		buf.Reset()
		e := NewEncoder(buf)
		e.BeginList()
		for i := range entries {
			e.BeginDict()
			e.Key("action")
			e.Str([]string{"alloc", "free_requested", "free_completed"}[i%3])
			e.Key("addr")
			e.Uint(0x7f0000000000 + uint64(i)*512)
			e.Key("size")
			e.Int(int64(i%4096) * 512)
			e.Key("stream")
			e.Int(0)
			e.Key("time_us")
			e.Int(1735689600000000 + int64(i))
			e.Key("compile_context")
			e.Str("N/A")
			e.Key("user_metadata")
			e.Str("")
			e.Key("frames")
			k := Key{Space: 1, ID: uint64(i % 700)}
			if !e.Ref(k) {
				e.BeginList()
				e.Memo(k)
				for f := range 20 {
					fk := Key{Space: 2, ID: uint64((i%700)*7 + f)}
					if e.Ref(fk) {
						continue
					}
					e.BeginDict()
					e.Memo(fk)
					e.Key("name")
					e.Str("fn" + strconv.Itoa(f))
					e.Key("filename")
					e.Str("/src/file" + strconv.Itoa(f%5) + ".py")
					e.Key("line")
					e.Int(int64(i%700*7 + f))
					e.EndDict()
				}
				e.EndList()
			}
			e.EndDict()
		}
		e.EndList()
		if err := e.Close(); err != nil {
			b.Fatal(err)
		}
	}
	run()
}
