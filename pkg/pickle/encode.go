package pickle

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/bits"
	"unicode/utf8"
	"unsafe"
)

// Encoder limits and shapes.
const (
	// EncodeProtocol is the protocol the Encoder writes: the newest one
	// every MemoryViz.js release reads (5 is refused by viewers before
	// 2026).
	EncodeProtocol = 4
	// FrameSize is the most data one FRAME holds. Like CPython's framer the
	// Encoder cuts frames at opcode boundaries; unlike it, it cuts before an
	// opcode that would overflow the target, so no frame exceeds FrameSize.
	FrameSize = 64 << 10
	// BatchSize is how many list items or dict pairs one MARK ... APPENDS /
	// MARK ... SETITEMS batch holds (CPython's _BATCHSIZE).
	BatchSize = 1000
	// MaxSafeInt is the largest integer a JavaScript Number holds exactly
	// (2^53 - 1): the viewer reads every LONG1 of up to 8 bytes into a
	// Number, so larger magnitudes lose precision there (CPython reads them
	// exactly).
	MaxSafeInt = 1<<53 - 1
)

const frameHdr = 9 // FRAME opcode + 8-byte length

// strHotSize is the size of the direct-mapped cache of recently written
// strings: dict keys are the same few string constants over and over, and
// finding them by their address costs a fraction of a map lookup.
const strHotSize = 256

type hotStr struct {
	s   string
	idx uint32
}

// denseSpaces is how many Key spaces get dense memo tables: Keys with
// small, mostly consecutive IDs (the stack and frame ids of a snapshot) are
// found by a slice index instead of a map lookup.
const denseSpaces = 16

// Key names a container (or any value) the caller memoizes with Memo and
// references again with Ref. Space separates the caller's kinds of objects
// (frames, stacks, ...); ID names one object within its space.
type Key struct {
	Space uint32
	ID    uint64
}

// ErrEncoder is wrapped by errors for calls that would not make a valid
// pickle (an EndList with no open list, a second top-level value, ...).
var ErrEncoder = errors.New("pickle encoder misuse")

// level is one open container.
type level struct {
	kind   Kind // KindList, KindDict or KindTuple
	marked bool // a MARK of the current batch is on the stack
	batch  int  // items in the current batch (a dict counts keys and values)
	n      int  // tuples: items so far
	want   int  // tuples: declared length
}

// Encoder writes one pickle, protocol 4, using only the opcodes PyTorch's
// web viewer (MemoryViz.js) reads: PROTO, FRAME, EMPTY_DICT, EMPTY_LIST,
// EMPTY_TUPLE, MARK, SETITEMS, APPENDS, TUPLE1-3, TUPLE, SHORT_BINUNICODE,
// BINUNICODE, BININT1, BININT2, BININT, LONG1, BINFLOAT, NEWTRUE, NEWFALSE,
// NONE, MEMOIZE, BINGET, LONG_BINGET and STOP. CPython loads everything it
// writes.
//
// The caller describes the value depth first:
//
//	e := pickle.NewEncoder(w)
//	e.BeginDict()
//	e.Key("segments")
//	e.BeginList()
//	...
//	e.EndList()
//	e.EndDict()
//	err := e.Close()
//
// Strings are memoized by value: the second use of a string is a BINGET.
// Containers are memoized only when the caller asks, by a Key of its own:
// Ref(k) writes a reference and reports true when k was memoized before;
// otherwise the caller writes the value and calls Memo(k) right after
// BeginList/BeginDict (or after the value is complete). This is how shared
// stack frames and stacks are written once, as PyTorch's py_symbolize
// shares them.
//
// Lists and dicts are written as EMPTY_LIST/EMPTY_DICT followed by
// MARK ... APPENDS / MARK ... SETITEMS batches of at most BatchSize items
// (even for one item); empty containers have no MARK. The output depends
// only on the sequence of calls, so the same calls give the same bytes.
//
// Data goes to the writer one frame (at most FrameSize bytes) at a time, so
// the Encoder needs no bufio.Writer in front of w. Errors are sticky: after
// the first one (from w, or a misuse) every call does nothing and Err and
// Close return it. An Encoder is not safe for concurrent use.
//
// Integers: int64 values take the smallest of BININT1, BININT2, BININT and
// LONG1 (minimal two's complement, at most 8 bytes). Uint values of 2^63 or
// more, and big.Ints outside int64, need a LONG1 of 9 bytes or more, which
// viewers before 2026 cannot read (they throw "Unsupported number bigger
// than 8 bytes"): callers writing snapshots should not produce them.
// Magnitudes above MaxSafeInt are exact in CPython but not in the viewer's
// JavaScript Numbers.
//
// The empty string is written out each time (2 bytes, no memo entry), so
// the output differs from CPython's there; and one-item containers use
// MARK ... APPENDS/SETITEMS where CPython writes APPEND/SETITEM.
type Encoder struct {
	w       io.Writer
	buf     []byte // pending output; the current frame's header slot is at start
	start   int    // offset in buf of the current frame's header slot
	written int64
	err     error

	strMemo map[string]uint32
	strHot  [strHotSize]hotStr    // cache in front of strMemo, by string address
	memo    map[Key]uint32        // Keys outside the dense tables
	dense   [denseSpaces][]uint32 // memo index + 1 by Space and ID; 0: none
	valMemo map[uint64]uint32     // Value containers by store id (Value)
	nmemo   uint32

	stack   []level
	canMemo bool // the value just completed is on top of the pickle stack
	topDone bool // the top-level value is complete
	closed  bool
}

// NewEncoder returns an encoder writing to w.
func NewEncoder(w io.Writer) *Encoder {
	e := &Encoder{
		w:       w,
		buf:     make([]byte, 0, 2+frameHdr+FrameSize),
		strMemo: make(map[string]uint32),
		memo:    make(map[Key]uint32),
	}
	e.buf = append(e.buf, opProto, EncodeProtocol)
	e.start = 2
	e.buf = e.buf[:e.start+frameHdr]
	return e
}

// Err returns the first error the encoder met, if any.
func (e *Encoder) Err() error { return e.err }

// Written returns how many bytes the encoder has handed to its writer.
func (e *Encoder) Written() int64 { return e.written }

// MemoLen returns how many memo entries the pickle has so far (strings and
// memoized containers).
func (e *Encoder) MemoLen() int { return int(e.nmemo) }

func (e *Encoder) fail(format string, args ...any) {
	if e.err == nil {
		e.err = fmt.Errorf("%w: "+format, append([]any{ErrEncoder}, args...)...)
	}
}

// flushFrame writes the pending bytes: the current frame with its FRAME
// header when it holds at least 4 bytes (CPython's _FRAME_SIZE_MIN), bare
// otherwise.
func (e *Encoder) flushFrame() {
	if e.err != nil {
		return
	}
	data := len(e.buf) - e.start - frameHdr
	out := e.buf
	if data >= 4 {
		e.buf[e.start] = opFrame
		binary.LittleEndian.PutUint64(e.buf[e.start+1:], uint64(data))
	} else {
		copy(e.buf[e.start:], e.buf[e.start+frameHdr:])
		out = e.buf[:e.start+data]
	}
	if len(out) > 0 {
		e.write(out)
	}
	e.start = 0
	e.buf = e.buf[:frameHdr]
}

func (e *Encoder) write(p []byte) {
	if e.err != nil {
		return
	}
	n, err := e.w.Write(p)
	e.written += int64(n)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		e.err = fmt.Errorf("pickle: writing: %w", err)
	}
}

// room makes sure an opcode of n bytes fits the current frame, starting a
// new frame if not (n must be at most FrameSize).
func (e *Encoder) room(n int) {
	if len(e.buf)-e.start-frameHdr+n > FrameSize {
		e.flushFrame()
	}
}

func (e *Encoder) op1(op byte) {
	e.room(1)
	e.buf = append(e.buf, op)
}

// beforeItem does the bookkeeping of the container the next value goes
// into: a new MARK batch for lists and dicts, the length for tuples. It
// reports false (after recording an error) when no value may come here.
func (e *Encoder) beforeItem() bool {
	if e.err != nil {
		return false
	}
	e.canMemo = false
	if len(e.stack) == 0 {
		if e.topDone || e.closed {
			e.fail("a second top-level value (a pickle holds one)")
			return false
		}
		return true
	}
	l := &e.stack[len(e.stack)-1]
	switch l.kind {
	case KindList:
		if l.batch == BatchSize {
			e.op1(opAppends)
			l.marked, l.batch = false, 0
		}
	case KindDict:
		if l.batch == 2*BatchSize {
			e.op1(opSetItems)
			l.marked, l.batch = false, 0
		}
	case KindTuple:
		if l.n == l.want {
			e.fail("tuple declared with %d items gets more", l.want)
			return false
		}
		l.n++
		return true
	}
	if !l.marked {
		e.op1(opMark)
		l.marked = true
	}
	l.batch++
	return true
}

// afterValue records that a complete value is on top of the pickle stack.
func (e *Encoder) afterValue() {
	e.canMemo = true
	if len(e.stack) == 0 {
		e.topDone = true
	}
}

// memoize writes MEMOIZE for the value on top of the stack and returns its
// memo index.
func (e *Encoder) memoize() uint32 {
	if e.nmemo == math.MaxUint32 {
		e.fail("more than %d memo entries", uint32(math.MaxUint32))
		return 0
	}
	e.op1(opMemoize)
	i := e.nmemo
	e.nmemo++
	return i
}

func (e *Encoder) get(i uint32) {
	if i < 256 {
		e.room(2)
		e.buf = append(e.buf, opBinGet, byte(i))
		return
	}
	e.room(5)
	e.buf = append(e.buf, opLongBinGet)
	e.buf = binary.LittleEndian.AppendUint32(e.buf, i)
}

// None writes None.
func (e *Encoder) None() {
	if !e.beforeItem() {
		return
	}
	e.op1(opNone)
	e.afterValue()
}

// Bool writes True or False.
func (e *Encoder) Bool(b bool) {
	if !e.beforeItem() {
		return
	}
	if b {
		e.op1(opNewTrue)
	} else {
		e.op1(opNewFalse)
	}
	e.afterValue()
}

// Int writes an integer in the shortest opcode.
func (e *Encoder) Int(i int64) {
	if !e.beforeItem() {
		return
	}
	e.int(i)
	e.afterValue()
}

func (e *Encoder) int(i int64) {
	e.room(10)
	switch {
	case i >= 0 && i < 1<<8:
		e.buf = append(e.buf, opBinInt1, byte(i))
	case i >= 0 && i < 1<<16:
		e.buf = append(e.buf, opBinInt2, byte(i), byte(i>>8))
	case i >= math.MinInt32 && i <= math.MaxInt32:
		e.buf = append(e.buf, opBinInt)
		e.buf = binary.LittleEndian.AppendUint32(e.buf, uint32(i))
	default:
		// Minimal two's complement: one sign bit more than the magnitude
		// needs (for negatives, the magnitude of ^i = -i-1).
		m := uint64(i)
		if i < 0 {
			m = ^m
		}
		n := bits.Len64(m)/8 + 1 // 5..8 here
		e.buf = append(e.buf, opLong1, byte(n))
		for k := 0; k < n; k++ {
			e.buf = append(e.buf, byte(uint64(i)>>(8*k)))
		}
	}
}

// Uint writes an unsigned integer (addresses, stream handles). Values of
// 2^63 or more take a 9-byte LONG1 (see Encoder).
func (e *Encoder) Uint(u uint64) {
	if !e.beforeItem() {
		return
	}
	if u <= math.MaxInt64 {
		e.int(int64(u))
	} else {
		e.room(11)
		e.buf = append(e.buf, opLong1, 9)
		e.buf = binary.LittleEndian.AppendUint64(e.buf, u)
		e.buf = append(e.buf, 0)
	}
	e.afterValue()
}

// BigInt writes an integer of any size that fits a LONG1 (up to 255 bytes;
// LONG4 is not in the viewer's subset).
func (e *Encoder) BigInt(x *big.Int) {
	if x.IsInt64() {
		e.Int(x.Int64())
		return
	}
	// Minimal two's complement, little-endian.
	var mag *big.Int
	if x.Sign() < 0 {
		mag = new(big.Int).Not(x) // -x-1
	} else {
		mag = x
	}
	n := mag.BitLen()/8 + 1
	if n > 255 {
		e.fail("integer of %d bytes is too large for LONG1", n)
		return
	}
	if !e.beforeItem() {
		return
	}
	tc := x
	if x.Sign() < 0 {
		tc = new(big.Int).Add(x, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
	}
	be := tc.FillBytes(make([]byte, n))
	e.room(2 + n)
	e.buf = append(e.buf, opLong1, byte(n))
	for k := n - 1; k >= 0; k-- {
		e.buf = append(e.buf, be[k])
	}
	e.afterValue()
}

// Float writes a float (BINFLOAT).
func (e *Encoder) Float(f float64) {
	if !e.beforeItem() {
		return
	}
	e.room(9)
	e.buf = append(e.buf, opBinFloat)
	e.buf = binary.BigEndian.AppendUint64(e.buf, math.Float64bits(f))
	e.afterValue()
}

// Str writes a string, memoized by value: a string written before is a
// BINGET of its first copy. Text that is not valid UTF-8 has each bad byte
// replaced by U+FFFD, except encoded UTF-16 surrogates (ED A0..BF xx),
// which CPython reads back as the lone surrogate it wrote.
func (e *Encoder) Str(s string) {
	if !e.beforeItem() {
		return
	}
	e.str(s)
	e.afterValue()
}

// Key writes a dict key (a Str that must stand where a key goes).
func (e *Encoder) Key(s string) {
	if e.err != nil {
		return
	}
	if len(e.stack) == 0 || e.stack[len(e.stack)-1].kind != KindDict || e.stack[len(e.stack)-1].batch%2 != 0 {
		e.fail("Key(%q) outside a dict or where a value is due", s)
		return
	}
	e.Str(s)
}

func (e *Encoder) str(s string) {
	if s == "" {
		e.room(2)
		e.buf = append(e.buf, opShortBinUnicode, 0)
		return
	}
	h := &e.strHot[hotIndex(s)]
	if h.s == s {
		e.get(h.idx)
		return
	}
	if i, ok := e.strMemo[s]; ok {
		*h = hotStr{s, i}
		e.get(i)
		return
	}
	text := s
	if !utf8.ValidString(text) {
		text = fixUTF8(text)
	}
	n := len(text)
	switch {
	case n < 256:
		e.room(2 + n)
		e.buf = append(e.buf, opShortBinUnicode, byte(n))
		e.buf = append(e.buf, text...)
	case n+5 <= FrameSize:
		e.room(5 + n)
		e.buf = append(e.buf, opBinUnicode)
		e.buf = binary.LittleEndian.AppendUint32(e.buf, uint32(n))
		e.buf = append(e.buf, text...)
	case uint64(n) <= math.MaxUint32:
		// Too large for a frame: written between frames, as CPython's
		// framer does with large strings.
		e.flushFrame()
		var hdr [5]byte
		hdr[0] = opBinUnicode
		binary.LittleEndian.PutUint32(hdr[1:], uint32(n))
		e.write(hdr[:])
		e.write([]byte(text))
	default:
		e.fail("a %d-byte string is too long for BINUNICODE", n)
		return
	}
	i := e.memoize()
	e.strMemo[s] = i
	*h = hotStr{s, i}
}

// hotIndex places a string in the hot cache by its address and length, so
// that a constant is found without hashing its text.
func hotIndex(s string) int {
	p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	return int((p>>3 ^ p>>11 ^ uintptr(len(s))*0x9e37) % strHotSize)
}

// fixUTF8 replaces the bytes of s that are not UTF-8 by U+FFFD, keeping
// 3-byte encodings of surrogates (which CPython's surrogatepass reads).
func fixUTF8(s string) string {
	out := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			if i+2 < len(s) && s[i] == 0xED && s[i+1] >= 0xA0 && s[i+1] <= 0xBF && s[i+2] >= 0x80 && s[i+2] <= 0xBF {
				out = append(out, s[i:i+3]...)
				i += 3
				continue
			}
			out = utf8.AppendRune(out, utf8.RuneError)
			i++
			continue
		}
		out = append(out, s[i:i+size]...)
		i += size
	}
	return string(out)
}

// BeginList opens a list; items follow, then EndList.
func (e *Encoder) BeginList() {
	if !e.beforeItem() {
		return
	}
	e.op1(opEmptyList)
	e.stack = append(e.stack, level{kind: KindList})
	e.canMemo = true
}

// EndList closes the list BeginList opened.
func (e *Encoder) EndList() { e.end(KindList, opAppends) }

// BeginDict opens a dict; Key, value pairs follow, then EndDict.
func (e *Encoder) BeginDict() {
	if !e.beforeItem() {
		return
	}
	e.op1(opEmptyDict)
	e.stack = append(e.stack, level{kind: KindDict})
	e.canMemo = true
}

// EndDict closes the dict BeginDict opened.
func (e *Encoder) EndDict() { e.end(KindDict, opSetItems) }

func (e *Encoder) end(k Kind, op byte) {
	if e.err != nil {
		return
	}
	if len(e.stack) == 0 || e.stack[len(e.stack)-1].kind != k {
		e.fail("End of a %s with no open %s", k, k)
		return
	}
	l := e.stack[len(e.stack)-1]
	if k == KindDict && l.batch%2 != 0 {
		e.fail("dict closed after a key with no value")
		return
	}
	if l.marked {
		e.op1(op)
	}
	e.stack = e.stack[:len(e.stack)-1]
	e.afterValue()
}

// BeginTuple opens a tuple of exactly n items; they follow, then EndTuple.
// Tuples of up to 3 items use TUPLE1-3 (EMPTY_TUPLE for none), longer ones
// MARK ... TUPLE.
func (e *Encoder) BeginTuple(n int) {
	if n < 0 {
		e.fail("tuple of %d items", n)
		return
	}
	if !e.beforeItem() {
		return
	}
	if n > 3 {
		e.op1(opMark)
	}
	e.stack = append(e.stack, level{kind: KindTuple, want: n})
}

// EndTuple closes the tuple BeginTuple opened.
func (e *Encoder) EndTuple() {
	if e.err != nil {
		return
	}
	if len(e.stack) == 0 || e.stack[len(e.stack)-1].kind != KindTuple {
		e.fail("EndTuple with no open tuple")
		return
	}
	l := e.stack[len(e.stack)-1]
	if l.n != l.want {
		e.fail("tuple declared with %d items got %d", l.want, l.n)
		return
	}
	switch l.want {
	case 0:
		e.op1(opEmptyTuple)
	case 1:
		e.op1(opTuple1)
	case 2:
		e.op1(opTuple2)
	case 3:
		e.op1(opTuple3)
	default:
		e.op1(opTuple)
	}
	e.stack = e.stack[:len(e.stack)-1]
	e.afterValue()
}

// Ref writes a reference to the value memoized under k and reports true,
// or writes nothing and reports false when k was never memoized.
func (e *Encoder) Ref(k Key) bool {
	if e.err != nil {
		return false
	}
	i, ok := e.lookup(k)
	if !ok {
		return false
	}
	if !e.beforeItem() {
		return true
	}
	e.get(i)
	e.afterValue()
	return true
}

// Memo memoizes the value on top of the pickle stack under k: call it right
// after BeginList or BeginDict (before any item), or right after a value is
// complete. Later Ref(k) calls reference it.
func (e *Encoder) Memo(k Key) {
	if e.err != nil {
		return
	}
	if !e.canMemo {
		e.fail("Memo(%v) not right after a value or the start of a container", k)
		return
	}
	if _, dup := e.lookup(k); dup {
		e.fail("Memo(%v) twice", k)
		return
	}
	i := e.memoize()
	if k.Space < denseSpaces {
		// Dense when the table need grow by no more than half again (and
		// some slack), so that sparse ids cannot make it huge.
		t := e.dense[k.Space]
		if k.ID < uint64(len(t)) {
			t[k.ID] = i + 1
			return
		}
		if k.ID < uint64(len(t)+len(t)/2+4096) {
			t = append(t, make([]uint32, int(k.ID)+1-len(t)+len(t)/2)...)
			e.dense[k.Space] = t
			t[k.ID] = i + 1
			return
		}
	}
	e.memo[k] = i
}

func (e *Encoder) lookup(k Key) (uint32, bool) {
	if k.Space < denseSpaces {
		if t := e.dense[k.Space]; k.ID < uint64(len(t)) && t[k.ID] != 0 {
			return t[k.ID] - 1, true
		}
	}
	if len(e.memo) == 0 {
		return 0, false
	}
	i, ok := e.memo[k]
	return i, ok
}

// Value writes a value decoded into vs: None, bools, ints, floats, strings,
// lists, tuples and dicts. A container used twice (a memo reference in the
// pickle it came from) is written once and referenced after. Bytes, sets
// and compactor records have no opcode in the viewer's subset and are an
// error.
func (e *Encoder) Value(vs *Values, v Value) {
	if e.err != nil {
		return
	}
	v = vs.Resolve(v)
	switch v.Kind {
	case KindNone:
		e.None()
	case KindBool:
		e.Bool(v.N != 0)
	case KindInt:
		e.Int(int64(v.N))
	case KindBigInt:
		e.BigInt(vs.BigInt(v))
	case KindFloat:
		e.Float(math.Float64frombits(v.N))
	case KindString:
		e.Str(vs.Text(v))
	case KindList, KindDict, KindTuple:
		if i, ok := e.valMemo[v.N]; ok {
			if e.beforeItem() {
				e.get(i)
				e.afterValue()
			}
			return
		}
		items := vs.Items(v)
		switch v.Kind {
		case KindList:
			e.BeginList()
		case KindDict:
			e.BeginDict()
		default:
			e.BeginTuple(len(items))
		}
		if v.Kind != KindTuple && e.err == nil {
			e.memoValue(v.N)
		}
		for _, it := range items {
			e.Value(vs, it)
		}
		switch v.Kind {
		case KindList:
			e.EndList()
		case KindDict:
			e.EndDict()
		default:
			e.EndTuple()
			if e.err == nil && len(items) > 0 {
				// CPython memoizes every tuple but the empty one.
				e.memoValue(v.N)
			}
		}
	default:
		e.fail("cannot write a %s value", v.Kind)
	}
}

func (e *Encoder) memoValue(id uint64) {
	if e.valMemo == nil {
		e.valMemo = make(map[uint64]uint32)
	}
	e.valMemo[id] = e.memoize()
}

// Close writes STOP after the complete top-level value and hands the last
// frame to the writer. It does not close the writer.
func (e *Encoder) Close() error {
	if e.err != nil {
		return e.err
	}
	if e.closed {
		return nil
	}
	if len(e.stack) > 0 {
		e.fail("Close with %d containers still open", len(e.stack))
		return e.err
	}
	if !e.topDone {
		e.fail("Close before any value was written")
		return e.err
	}
	e.op1(opStop)
	e.flushFrame()
	e.closed = true
	return e.err
}
