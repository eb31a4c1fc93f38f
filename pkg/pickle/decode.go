package pickle

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// Limits that keep hostile input from exhausting memory. No single object
// of a snapshot comes near them.
const (
	// MaxStringLen caps one str or bytes object.
	MaxStringLen = 64 << 20
	// maxLongLen caps the bytes of one LONG1/LONG4 integer.
	maxLongLen = 1024
	// maxLineLen caps the text line of a protocol-0 opcode.
	maxLineLen = 1 << 20
	// maxMemoGap is how far past the memo's end a BINPUT may write:
	// every known pickler writes dense indices.
	maxMemoGap = 8
	// chunk is the initial read buffer for streamed input; it doubles as
	// needed, and up to maxChunk as the input proves long.
	chunk    = 64 << 10
	maxChunk = 1 << 20
)

// ErrTruncated is wrapped by errors for input that ends before STOP.
var ErrTruncated = errors.New("unexpected end of data")

// ErrRefused is wrapped by errors for opcodes that name or build Python
// objects: memstat never imports or calls anything a pickle names.
var ErrRefused = errors.New("refused opcode")

// Error is a decoding error at a byte offset.
type Error struct {
	Offset int64  // offset of the opcode
	Op     string // opcode name, "" if the byte is no opcode
	Msg    string
	Err    error // ErrTruncated, ErrRefused, the reader's error, or nil
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("pickle: ")
	if e.Op != "" {
		fmt.Fprintf(&b, "%s at offset %d: ", e.Op, e.Offset)
	} else {
		fmt.Fprintf(&b, "offset %d: ", e.Offset)
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Compactor may replace a container by a record when the container is
// complete: when a parent container takes it as an item or key, or when it
// is the pickle's result. Compact returns ok=false to keep the container as
// it is; an error stops decoding.
//
// A record made of a list must depend on the list's items alone: a list
// built again from the same memo references (the frames of a stack that
// recurs, in a snapshot) gets the record of the first one without being
// decoded again (see Decoder.cachedList).
type Compactor interface {
	Compact(vs *Values, v Value) (r Value, ok bool, err error)
}

// Decoder decodes one pickle.
type Decoder struct {
	vs        *Values
	compactor Compactor

	r    io.Reader
	buf  []byte
	pos  int
	end  int
	base int64 // input offset of buf[0]
	eof  bool

	stack []Value
	marks []int
	memo  memo
	proto int

	opStart int64
	op      byte

	// lists maps the memo-reference opcodes of a list (EMPTY_LIST,
	// MEMOIZE, MARK, the references, APPENDS) to the record the compactor
	// made of it; pending holds the lists being built whose record is to
	// be cached when they are frozen. See cachedList.
	lists   *listCache
	pending map[uint64]pendingList

	// flat is the compactor's FlatDictCompactor, if it is one and the
	// path is on (see flatBatch); the rest is its scratch.
	flat      FlatDictCompactor
	flatTape  []flatEntry
	flatItems []Value
	flatList  []Value
	flatOut   []Value

	// budget, when set, is called with Footprint every budgetStep bytes
	// of input decoded; nextCheck is the input offset of the next call.
	budget    func(held int64) error
	nextCheck int64
	// pendingKeyBytes counts the key bytes of pending.
	pendingKeyBytes int64

	// lazy, for a decoder that started past a skim (Skim.Decoder) or
	// decodes an object before it, decodes the objects the memo holds
	// before the skim's stop when they are referred to (lazy.go).
	lazy *lazyState
}

// budgetStep is how many input bytes the decoder decodes between two
// calls of its budget: an opcode is at least one byte and adds at most
// some 100 bytes, so the memory a budget can miss is a few MiB.
const budgetStep = 32 << 10

// SetBudget makes the decoder call check with its Footprint while it
// decodes, every few KiB of input, and stop with check's error, so that a
// caller can bound memory by what the input cost (a gzip bomb expands 200
// times; its opcodes add up to 100 bytes each) before it is spent.
func (d *Decoder) SetBudget(check func(held int64) error) {
	d.budget = check
	d.nextCheck = d.base + int64(d.pos)
}

// Stack returns the decoder's stack and the stack positions of its open
// MARKs, for a compactor that needs to know where the value it compacts
// lies (which list of a list of lists a trace entry is in, for a reader
// that hands entries on as they decode): while Compact runs on items a
// container takes (APPEND, APPENDS, SETITEM, SETITEMS), that container is
// the stack's last value and the items are no longer on it. Both slices
// are the decoder's own: read them only, and only until Compact returns.
func (d *Decoder) Stack() (stack []Value, marks []int) { return d.stack, d.marks }

// Footprint estimates the bytes the decoder holds: its store's (see
// Values.Footprint), its stack, memo, input buffer and list cache.
func (d *Decoder) Footprint() int64 {
	n := d.vs.Footprint() + int64(cap(d.stack))*16 + int64(cap(d.marks))*8 +
		int64(len(d.memo.pages))*memoPage*4 + int64(cap(d.memo.pages))*24 + int64(cap(d.memo.spill))*16
	if d.r != nil {
		n += int64(cap(d.buf)) // a bytes decoder's input is the caller's
	}
	n += int64(cap(d.flatItems)+cap(d.flatList)+cap(d.flatOut))*16 + int64(cap(d.flatTape))*int64(unsafe.Sizeof(flatEntry{}))
	// A cached list's key is its reference opcodes, up to 5 bytes each.
	n += d.lists.footprint() + d.pendingKeyBytes + int64(len(d.pending))*64
	return n
}

func (d *Decoder) checkBudget() error {
	d.nextCheck = d.base + int64(d.pos) + budgetStep
	return d.budget(d.Footprint())
}

// pendingList is a list whose record goes into Decoder.lists under key,
// if it still has the n items of the references when it is frozen.
type pendingList struct {
	key string
	n   int
}

// maxCachedLists bounds Decoder.lists: distinct stacks past it are decoded
// as they come.
const maxCachedLists = 1 << 16

// memo is the pickle memo in pages of memoPage words, so that a memo of
// millions of entries grows without copying. A word is 0 for an index
// never stored, else a packed Value (see pack): 4 bytes, where CPython
// memoizes every dict, list and string of a snapshot (a million trace
// entries, a million words). Values that do not fit a word (ints and
// floats past 27 bits, which no known pickler memoizes) spill to a side
// table of at most memoSpillMax.
type memo struct {
	pages [][]uint32
	len   int // one past the highest index stored
	// stored counts the entries stored, gaps left by BINPUT not included:
	// MEMOIZE stores at that index, as CPython does (the length of its memo
	// dict), which is the end of the memo only without gaps.
	stored int
	spill  []Value
}

const (
	memoPageBits = 12
	memoPage     = 1 << memoPageBits
	// A word with recordBit set is a record: its tag in the 3 bits above
	// recordBits, its payload below. Any other value is its kind plus one
	// above payloadBits and its payload below; kind spillKind is an index
	// into spill.
	recordBit   = 1 << 31
	recordBits  = 28
	payloadBits = 27
	spillKind   = 15
)

// memoSpillMax bounds the memo's side table (its index is a word's
// payload); tests lower it.
var memoSpillMax = 1 << payloadBits

func (m *memo) word(i int) uint32 { return m.pages[i>>memoPageBits][i&(memoPage-1)] }

func (m *memo) get(i uint64) (Value, bool) {
	if i >= uint64(m.len) {
		return None, false
	}
	w := m.word(int(i))
	switch k := w >> payloadBits; {
	case w&recordBit != 0:
		return Value{Kind: KindRecord, Tag: uint8(w >> recordBits & 7), N: uint64(w & (1<<recordBits - 1))}, true
	case k == 0:
		return None, false
	case k == spillKind:
		return m.spill[w&(1<<payloadBits-1)], true
	default:
		return Value{Kind: Kind(k - 1), N: uint64(w & (1<<payloadBits - 1))}, true
	}
}

// plain returns the value at index i when its word is a record or a str,
// as get would: the values a snapshot's dicts refer to by the million
// (their keys, their frames), which are never containers, so the caller
// needs no Resolve and counts no reference. It is false for anything else,
// an index never stored included: the caller goes get's way.
func (m *memo) plain(i int) (Value, bool) {
	if uint(i) >= uint(m.len) {
		return None, false
	}
	w := m.pages[i>>memoPageBits][i&(memoPage-1)]
	if w&recordBit != 0 {
		return Value{Kind: KindRecord, Tag: uint8(w >> recordBits & 7), N: uint64(w & (1<<recordBits - 1))}, true
	}
	if w>>payloadBits == uint32(KindString)+1 {
		return Value{Kind: KindString, N: uint64(w & (1<<payloadBits - 1))}, true
	}
	return None, false
}

// pack returns v as a word; false if it does not fit one.
func pack(v Value) (uint32, bool) {
	if v.Kind == KindRecord {
		if v.Tag < 8 && v.N < 1<<recordBits {
			return recordBit | uint32(v.Tag)<<recordBits | uint32(v.N), true
		}
		return 0, false
	}
	if v.Tag == 0 && v.N < 1<<payloadBits && v.Kind+1 < spillKind {
		return uint32(v.Kind+1)<<payloadBits | uint32(v.N), true
	}
	return 0, false
}

// storable reports whether set can store v: it fits a word, or the side
// table has room.
func (m *memo) storable(v Value) bool {
	_, ok := pack(v)
	return ok || len(m.spill) < memoSpillMax
}

// set stores v at i < m.len; it returns false, storing nothing, when v
// is not storable.
func (m *memo) set(i int, v Value) bool {
	w, ok := pack(v)
	if !ok {
		if len(m.spill) >= memoSpillMax {
			return false
		}
		w = spillKind<<payloadBits | uint32(len(m.spill))
		m.spill = append(m.spill, v)
	}
	pg := m.pages[i>>memoPageBits]
	if &pg[0] == &memoZeroPage[0] {
		pg = make([]uint32, memoPage)
		m.pages[i>>memoPageBits] = pg
	}
	p := &pg[i&(memoPage-1)]
	if *p == 0 {
		m.stored++
	}
	*p = w
	return true
}

// reserve stores nothing yet at index i, the next one, but counts it
// stored: a dict of a flat batch holds it while its items are memoized
// after it; fillReserved stores its value.
func (m *memo) reserve(i int) {
	m.grow(i)
	m.stored++
}

func (m *memo) fillReserved(i int, v Value) {
	if m.set(i, v) {
		m.stored--
	}
}

// grow makes index i storable. The pages it adds are memoZeroPage until
// set stores in them: a decoder started past a skim (Skim.Decoder) makes
// room for the millions of objects before its stop and fills a few
// thousand, and 15 MB of fresh pages cost some 3.5 ms of faults before its
// first entry.
func (m *memo) grow(i int) {
	for len(m.pages)<<memoPageBits <= i {
		m.pages = append(m.pages, memoZeroPage)
	}
	m.len = max(m.len, i+1)
}

// memoZeroPage stands for a page of the memo nothing was stored in: read
// as zeros, never written (set replaces it with a page of its own).
var memoZeroPage = make([]uint32, memoPage)

// NewDecoder returns a decoder reading r. Values go into vs (a new store if
// nil); c may be nil.
func NewDecoder(r io.Reader, vs *Values, c Compactor) *Decoder {
	if vs == nil {
		vs = NewValues()
	}
	d := &Decoder{vs: vs, compactor: c, r: r, buf: make([]byte, 0, chunk)}
	d.SetFlatDicts(true)
	return d
}

// NewBytesDecoder decodes a pickle held in memory without copying it.
func NewBytesDecoder(data []byte, vs *Values, c Compactor) *Decoder {
	if vs == nil {
		vs = NewValues()
	}
	d := &Decoder{vs: vs, compactor: c, buf: data, end: len(data), eof: true}
	d.SetFlatDicts(true)
	return d
}

// Values returns the store the decoder fills.
func (d *Decoder) Values() *Values { return d.vs }

// Protocol returns the protocol named by the PROTO opcode (0 if none).
func (d *Decoder) Protocol() int { return d.proto }

// Offset returns the input offset of the next byte to decode.
func (d *Decoder) Offset() int64 { return d.base + int64(d.pos) }

// Loads decodes a pickle held in memory into a fresh store.
func Loads(data []byte) (Value, *Values, error) {
	d := NewBytesDecoder(data, nil, nil)
	v, err := d.Decode()
	return v, d.vs, err
}

// fill makes sure n bytes are buffered after pos. It reads only what
// arrives, so a claimed length never allocates more than the input holds
// (plus one chunk).
func (d *Decoder) fill(n int) error {
	if d.end-d.pos >= n {
		return nil
	}
	if d.eof || d.r == nil {
		return d.truncated(n)
	}
	// Move the unread tail to the front.
	if d.pos > 0 {
		copy(d.buf[:cap(d.buf)], d.buf[d.pos:d.end])
		d.base += int64(d.pos)
		d.end -= d.pos
		d.pos = 0
		d.buf = d.buf[:d.end]
	}
	if d.end == 0 && cap(d.buf) < maxChunk && d.base >= 4*int64(cap(d.buf)) {
		// The input has proved large: read it in bigger pieces (fewer
		// reads; a reader that fills p directly copies nothing twice).
		d.buf = make([]byte, 0, 2*cap(d.buf))
	}
	for d.end < n {
		if d.end == cap(d.buf) {
			// Grow only when the buffer is full of data that arrived, so
			// a claimed length costs no more than the bytes that exist.
			grown := make([]byte, d.end, max(2*cap(d.buf), chunk))
			copy(grown, d.buf[:d.end])
			d.buf = grown
		}
		m, err := d.r.Read(d.buf[d.end:cap(d.buf)])
		d.end += m
		d.buf = d.buf[:d.end]
		if err == io.EOF {
			d.eof = true
			if d.end < n {
				return d.truncated(n)
			}
			break
		}
		if err != nil {
			return &Error{Offset: d.opStart, Op: opName(d.op), Msg: "reading input: " + err.Error(), Err: err}
		}
	}
	return nil
}

func (d *Decoder) truncated(n int) error {
	return &Error{Offset: d.opStart, Op: opName(d.op), Err: ErrTruncated,
		Msg: fmt.Sprintf("needs %d more bytes but the data ends at offset %d (truncated file?)", n, d.base+int64(d.end))}
}

func (d *Decoder) errf(format string, args ...any) error {
	return &Error{Offset: d.opStart, Op: opName(d.op), Msg: fmt.Sprintf(format, args...)}
}

// take returns the next n bytes (valid until the next read).
func (d *Decoder) take(n int) ([]byte, error) {
	if err := d.fill(n); err != nil {
		return nil, err
	}
	b := d.buf[d.pos : d.pos+n]
	d.pos += n
	return b, nil
}

// takeLen returns n bytes of a string whose length the pickle claims; it
// checks the claim against MaxStringLen before reading anything.
func (d *Decoder) takeLen(n uint64) ([]byte, error) {
	if n > MaxStringLen {
		return nil, d.errf("claims a %d-byte object, over the %d-byte limit", n, MaxStringLen)
	}
	return d.take(int(n))
}

func (d *Decoder) line() ([]byte, error) {
	// scanned counts the bytes after pos already searched for the newline,
	// so that a line arriving in many small reads is scanned once, not
	// once per read (quadratic in the line's length: a 1 MiB line read a
	// byte at a time took 17 s instead of 30 ms).
	scanned := 0
	for {
		if i := bytes.IndexByte(d.buf[d.pos+scanned:d.end], '\n'); i >= 0 {
			l := d.buf[d.pos : d.pos+scanned+i]
			d.pos += scanned + i + 1
			return l, nil
		}
		scanned = d.end - d.pos
		if scanned > maxLineLen {
			return nil, d.errf("text argument longer than %d bytes", maxLineLen)
		}
		if err := d.fill(scanned + 1); err != nil {
			return nil, err
		}
	}
}

// quote returns input text for an error message: quoted, and cut to its
// first bytes, so that a message stays one short line however long the
// offending text is (a protocol-0 line may be 1 MiB).
func quote(b []byte) string {
	const keep = 32
	if len(b) <= keep {
		return strconv.Quote(string(b))
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(string(b[:keep])), len(b))
}

// push puts v on the stack; a container counts the stack slots holding it.
func (d *Decoder) push(v Value) {
	if v.IsContainer() {
		d.vs.conts[v.N].refs++
	}
	d.stack = append(d.stack, v)
}

// pop takes the top value off the stack. The caller owns the stack slot's
// reference: it freezes the value or discards it.
func (d *Decoder) pop() (Value, error) {
	base := 0
	if len(d.marks) > 0 {
		base = d.marks[len(d.marks)-1]
	}
	if len(d.stack) <= base {
		return None, d.errf("stack underflow (malformed pickle)")
	}
	v := d.stack[len(d.stack)-1]
	d.stack = d.stack[:len(d.stack)-1]
	return v, nil
}

func (d *Decoder) top() (*Value, error) {
	base := 0
	if len(d.marks) > 0 {
		base = d.marks[len(d.marks)-1]
	}
	if len(d.stack) <= base {
		return nil, d.errf("stack underflow (malformed pickle)")
	}
	return &d.stack[len(d.stack)-1], nil
}

// popMark returns the items above the last MARK (valid until the next push)
// and removes them and the mark. The caller owns their references.
func (d *Decoder) popMark() ([]Value, error) {
	if len(d.marks) == 0 {
		return nil, d.errf("no MARK on the stack (malformed pickle)")
	}
	m := d.marks[len(d.marks)-1]
	d.marks = d.marks[:len(d.marks)-1]
	items := d.stack[m:]
	d.stack = d.stack[:m]
	return items, nil
}

// release gives up one stack slot's reference to v; a container a
// compactor replaced is recycled when nothing holds it any more (the memo
// slot that held it holds its record since the replacement).
func (d *Decoder) release(v Value) {
	if !v.IsContainer() {
		return
	}
	c := &d.vs.conts[v.N]
	c.refs--
	if c.refs == 0 && c.flags&(fReplaced|fMultiMemo) == fReplaced {
		d.vs.recycle(v.N)
	}
}

// freeze offers a complete container to the compactor, once, and releases
// the stack slot's reference to it.
func (d *Decoder) freeze(v Value) (Value, error) {
	if !v.IsContainer() {
		return v, nil
	}
	vs := d.vs
	c := &vs.conts[v.N]
	r := v
	switch {
	case c.flags&fReplaced != 0:
		r = c.alias()
	case c.flags&fFrozen != 0 || d.compactor == nil:
		c.flags |= fFrozen
	default:
		c.flags |= fFrozen
		rec, ok, err := d.compactor.Compact(vs, v)
		if err != nil {
			return None, &Error{Offset: d.opStart, Op: opName(d.op), Msg: err.Error()}
		}
		c = &vs.conts[v.N]
		if p, found := d.pending[v.N]; found {
			delete(d.pending, v.N)
			d.pendingKeyBytes -= int64(len(p.key))
			if ok && d.lists.len() < maxCachedLists && d.madeOf(v, p) {
				d.lists.put(p.key, rec)
			}
		}
		if ok {
			vs.replace(v.N, rec)
			// The memo slot that holds the container holds its record
			// from now on, so that the container can be recycled.
			if m := c.memo; m != 0 && c.flags&fMultiMemo == 0 {
				if x, _ := d.memo.get(uint64(m - 1)); x == v && !d.memo.set(int(m-1), rec) {
					// The memo keeps the container (which resolves to
					// the record): it must not be recycled.
					c.flags |= fMultiMemo
				}
			}
			r = rec
		}
	}
	d.release(v)
	return r, nil
}

// freezeAll freezes items in place, first to last (see Values.beginBatch).
// Most batches hold no container at all (the frames of a stack are memo
// references to records): those cost one pass over the items.
func (d *Decoder) freezeAll(items []Value) error {
	first := -1
	for i, it := range items {
		if it.IsContainer() {
			first = i
			break
		}
	}
	if first < 0 {
		return nil
	}
	d.vs.beginBatch()
	for i, it := range items[first:] {
		if !it.IsContainer() {
			continue
		}
		v, err := d.freeze(it)
		if err != nil {
			d.vs.endBatch()
			return err
		}
		items[first+i] = v
	}
	d.vs.endBatch()
	return nil
}

// appendTo appends frozen items to the container id.
func (d *Decoder) appendTo(id uint64, items ...Value) error {
	if err := d.vs.appendItems(id, items...); err != nil {
		return d.errf("%v", err)
	}
	return nil
}

// target checks that v is an open container of one of the kinds.
func (d *Decoder) target(v Value, kinds ...Kind) error {
	for _, k := range kinds {
		if v.Kind == k {
			if d.vs.conts[v.N].flags&fReplaced != 0 {
				return d.errf("modifies a %s after it was used (not a shape PyTorch or CPython writes)", k)
			}
			return nil
		}
	}
	return d.errf("target is a %s, not a %s", v.Kind, kinds[0])
}

// newTuple builds a tuple from items (which it freezes).
func (d *Decoder) newTuple(items []Value) (Value, error) {
	return d.newContainer(KindTuple, items)
}

// newContainer builds a container of kind k from items (which it freezes).
func (d *Decoder) newContainer(k Kind, items []Value) (Value, error) {
	if err := d.freezeAll(items); err != nil {
		return None, err
	}
	t := d.vs.NewContainer(k)
	if err := d.appendTo(t.N, items...); err != nil {
		return None, err
	}
	return t, nil
}

func (d *Decoder) memoPut(i uint64, v Value) error {
	if i > uint64(d.memo.len)+maxMemoGap {
		return d.errf("memo index %d is far past the %d entries stored (malformed pickle)", i, d.memo.len)
	}
	if d.lazy != nil && i < d.lazy.l.count {
		if skip, err := d.lazy.put(d, i); skip || err != nil {
			return err
		}
	}
	if i < uint64(d.memo.len) && d.lists.len() > 0 {
		if _, taken := d.memo.get(i); taken {
			// A reference now means something else: the lists cached
			// by references are stale.
			d.lists.reset()
		}
	}
	d.memo.grow(int(i))
	v = d.vs.Resolve(v)
	if v.IsContainer() {
		c := &d.vs.conts[v.N]
		switch c.memo {
		case 0:
			c.memo = uint32(i) + 1
		case uint32(i) + 1:
		default:
			c.flags |= fMultiMemo
		}
	}
	if !d.memo.set(int(i), v) {
		return d.errf("the memo holds more than %d values that are not records, strings or containers (large ints, floats), past the limit", memoSpillMax)
	}
	return nil
}

func (d *Decoder) memoGet(i uint64) error {
	v, ok := d.memo.get(i)
	if !ok && d.lazy != nil {
		var err error
		if v, ok, err = d.lazy.l.resolve(d, i); err != nil {
			return err
		}
	}
	if !ok {
		return d.errf("memo index %d was never stored (malformed pickle)", i)
	}
	d.push(d.vs.Resolve(v))
	return nil
}

// cachedList decodes the EMPTY_LIST at buf[0]. A list made only of memo
// references, [MEMOIZE] MARK (BINGET|LONG_BINGET)... APPENDS or
// [MEMOIZE] (BINGET|LONG_BINGET) APPEND, whose opcodes were seen before
// and made a record, is that record: the opcodes are skipped (a stack that
// recurs in a trace costs one lookup instead of a list built, frozen and
// interned again). Otherwise the list is made as usual and, when it has
// that shape, its record is cached when it is frozen. It returns the bytes
// consumed. References stay valid because a memo index that is stored
// again empties the cache (see memoPut), and a list is cached only if it
// holds what its references hold when it is frozen (see madeOf).
func (d *Decoder) cachedList(buf []byte) int {
	v, n := d.openList(buf)
	d.push(v)
	return n
}

// openList is cachedList without the push: the cached record and the
// bytes of the whole list when the list is cached (memoized as the list
// would have been), else a new list and 1, its record to be cached when it
// is frozen if it has the cached shape.
func (d *Decoder) openList(buf []byte) (Value, int) {
	key, memoize, end, n := listKey(buf)
	if n == 0 {
		return d.vs.NewContainer(KindList), 1
	}
	if rec, ok := d.cachedRecord(key, memoize); ok {
		if memoize {
			_ = d.memoPut(uint64(d.memo.stored), rec)
		}
		return rec, end
	}
	v := d.vs.NewContainer(KindList)
	if d.lists.len() < maxCachedLists {
		if d.lists == nil {
			d.lists = &listCache{}
			d.pending = make(map[uint64]pendingList)
		}
		if old, ok := d.pending[v.N]; ok {
			d.pendingKeyBytes -= int64(len(old.key))
		}
		d.pending[v.N] = pendingList{key: string(key), n: n}
		d.pendingKeyBytes += int64(len(key))
	}
	return v, 1
}

// listKey returns the reference opcodes of the list at buf[0] when it has
// the shape cachedList caches, whether MEMOIZE follows its EMPTY_LIST, the
// bytes of the whole list and how many references it holds (0: not that
// shape).
func listKey(buf []byte) (key []byte, memoize bool, end, n int) {
	p := 1
	memoize = len(buf) > p && buf[p] == opMemoize
	if memoize {
		p++
	}
	marked := p < len(buf) && buf[p] == opMark
	if marked {
		p++
	}
	refs := p
scan:
	for p < len(buf) {
		switch buf[p] {
		case opBinGet:
			p += 2
		case opLongBinGet:
			p += 5
		default:
			break scan
		}
		n++
		if !marked {
			break
		}
	}
	refsEnd := p
	closing := byte(opAppends)
	if !marked {
		closing = opAppend
	}
	if n == 0 || p >= len(buf) || refsEnd > len(buf) || buf[p] != closing {
		return nil, false, 0, 0
	}
	return buf[refs:refsEnd], memoize, p + 1, n
}

// cachedRecord returns the record cached for a list of the references in
// key, if one is and it can be memoized when the list is.
func (d *Decoder) cachedRecord(key []byte, memoize bool) (Value, bool) {
	rec, ok := d.lists.get(key)
	return rec, ok && (!memoize || d.memo.storable(rec))
}

// madeOf reports whether the list v holds exactly the values of the memo
// references of p: nothing appended to it later, and not a recycled id
// now used by another list.
func (d *Decoder) madeOf(v Value, p pendingList) bool {
	items := d.vs.Items(v)
	if len(items) != p.n {
		return false
	}
	key := p.key
	for i := range items {
		var idx uint64
		switch key[0] {
		case opBinGet:
			idx, key = uint64(key[1]), key[2:]
		default:
			idx, key = uint64(binary.LittleEndian.Uint32([]byte(key[1:5]))), key[5:]
		}
		m, ok := d.memo.get(idx)
		if !ok || d.vs.Resolve(m) != items[i] {
			return false
		}
	}
	return true
}

// Decode runs the pickle to its STOP opcode and returns the result.
func (d *Decoder) Decode() (Value, error) {
	switch err := d.run(); err {
	case errStop:
		v, err := d.pop()
		if err != nil {
			return None, err
		}
		return d.freeze(v)
	case errEnd:
		return None, &Error{Offset: d.opStart, Err: ErrTruncated,
			Msg: "data ends before the STOP opcode (truncated file?)"}
	default:
		return None, err
	}
}

// run decodes opcodes until STOP (errStop), the end of the input between
// two opcodes (errEnd) or an error: Decode's loop, and a lazy decoder's
// for a stored object's span, which ends without STOP.
func (d *Decoder) run() error {
	for {
		if d.budget != nil && d.base+int64(d.pos) >= d.nextCheck {
			if err := d.checkBudget(); err != nil {
				return err
			}
		}
		if d.end-d.pos >= fastLen {
			d.fastRun()
		}
		d.opStart = d.base + int64(d.pos)
		if d.pos >= d.end {
			d.op = 0
			if err := d.fill(1); err != nil {
				if errors.Is(err, ErrTruncated) {
					return errEnd
				}
				// A read error (corrupt gzip, I/O), not the end of the
				// data: say what it was.
				return err
			}
		}
		op := d.buf[d.pos]
		d.pos++
		d.op = op
		if err := d.step(op); err != nil {
			return err
		}
	}
}

var (
	errStop = errors.New("stop")
	errEnd  = errors.New("end of input")
)

// fastRun decodes common opcodes (see fast) for as long as they come and
// are buffered, without returning to Decode's loop for each.
func (d *Decoder) fastRun() {
	buf, pos, end := d.buf, d.pos, d.end
	stop := end
	if d.budget != nil {
		// Return to Decode at the next budget check.
		stop = min(end, max(pos+1, int(d.nextCheck-d.base)))
	}
	for end-pos >= fastLen && pos < stop {
		n := d.fast(buf[pos:end])
		if n == 0 {
			break
		}
		pos += n
	}
	d.pos = pos
}

// fastLen is the buffered length from which fast may decode an opcode:
// the longest fixed-size opcode (BINFLOAT, FRAME) is 9 bytes.
const fastLen = 10

// fast decodes the opcode at buf[0] when it is one of the common ones, its
// arguments are in buf and it cannot fail, and returns its length; it
// returns 0 to leave the opcode to step, which also reports errors. Memo
// references, small ints, MARK, MEMOIZE and empty containers are most of
// the opcodes of a snapshot (60% are BINGET or LONG_BINGET).
func (d *Decoder) fast(buf []byte) int {
	_ = buf[fastLen-1]
	switch buf[0] {
	case opLongBinGet:
		v, ok := d.memo.get(uint64(binary.LittleEndian.Uint32(buf[1:5])))
		if !ok {
			return 0
		}
		d.push(d.vs.Resolve(v))
		return 5
	case opBinGet:
		v, ok := d.memo.get(uint64(buf[1]))
		if !ok {
			return 0
		}
		d.push(d.vs.Resolve(v))
		return 2
	case opMark:
		d.marks = append(d.marks, len(d.stack))
		return 1
	case opMemoize:
		if len(d.stack) == 0 || len(d.marks) > 0 && d.marks[len(d.marks)-1] == len(d.stack) {
			return 0
		}
		// The index is the count of entries, never past the end: the
		// only error is a full side table, which step reports again.
		if d.memoPut(uint64(d.memo.stored), d.stack[len(d.stack)-1]) != nil {
			return 0
		}
		return 1
	case opBinInt1:
		d.stack = append(d.stack, Int(int64(buf[1])))
		return 2
	case opBinInt2:
		d.stack = append(d.stack, Int(int64(binary.LittleEndian.Uint16(buf[1:3]))))
		return 3
	case opBinInt:
		d.stack = append(d.stack, Int(int64(int32(binary.LittleEndian.Uint32(buf[1:5])))))
		return 5
	case opLong1:
		n := int(buf[1])
		if n == 0 || n > 8 {
			return 0
		}
		var u uint64
		for i := n + 1; i >= 2; i-- {
			u = u<<8 | uint64(buf[i])
		}
		if buf[n+1]&0x80 != 0 && n < 8 {
			u |= ^uint64(0) << (8 * uint(n)) // sign-extend
		}
		d.stack = append(d.stack, Int(int64(u)))
		return n + 2
	case opEmptyDict:
		if d.flat != nil && d.inAppends() {
			return 0 // step decodes it on the flat-dict path
		}
		d.push(d.vs.NewContainer(KindDict))
		return 1
	case opEmptyList:
		if d.compactor != nil {
			return d.cachedList(buf)
		}
		d.push(d.vs.NewContainer(KindList))
		return 1
	case opShortBinUnicode:
		n := int(buf[1])
		if len(buf) < n+2 {
			return 0
		}
		d.stack = append(d.stack, d.vs.StrBytes(buf[2:n+2]))
		return n + 2
	case opNone:
		d.stack = append(d.stack, None)
		return 1
	case opNewTrue:
		d.stack = append(d.stack, Bool(true))
		return 1
	case opNewFalse:
		d.stack = append(d.stack, Bool(false))
		return 1
	case opFrame:
		return 9
	}
	return 0
}

func (d *Decoder) step(op byte) error {
	vs := d.vs
	switch op {
	case opProto:
		b, err := d.take(1)
		if err != nil {
			return err
		}
		if b[0] > 5 {
			return d.errf("unsupported pickle protocol %d", b[0])
		}
		d.proto = int(b[0])
	case opFrame:
		// A framing hint; the data is decoded the same either way.
		if _, err := d.take(8); err != nil {
			return err
		}
	case opStop:
		return errStop
	case opMark:
		d.marks = append(d.marks, len(d.stack))
	case opPop:
		if len(d.marks) > 0 && d.marks[len(d.marks)-1] == len(d.stack) {
			// POP right after MARK discards the mark, as CPython does.
			d.marks = d.marks[:len(d.marks)-1]
			return nil
		}
		v, err := d.pop()
		if err != nil {
			return err
		}
		d.release(v)
	case opPopMark:
		items, err := d.popMark()
		if err != nil {
			return err
		}
		for _, v := range items {
			d.release(v)
		}
	case opDup:
		t, err := d.top()
		if err != nil {
			return err
		}
		d.push(*t)

	case opNone:
		d.push(None)
	case opNewTrue:
		d.push(Bool(true))
	case opNewFalse:
		d.push(Bool(false))
	case opBinInt:
		b, err := d.take(4)
		if err != nil {
			return err
		}
		d.push(Int(int64(int32(binary.LittleEndian.Uint32(b)))))
	case opBinInt1:
		b, err := d.take(1)
		if err != nil {
			return err
		}
		d.push(Int(int64(b[0])))
	case opBinInt2:
		b, err := d.take(2)
		if err != nil {
			return err
		}
		d.push(Int(int64(binary.LittleEndian.Uint16(b))))
	case opLong1:
		b, err := d.take(1)
		if err != nil {
			return err
		}
		return d.long(int(b[0]))
	case opLong4:
		b, err := d.take(4)
		if err != nil {
			return err
		}
		n := int32(binary.LittleEndian.Uint32(b))
		if n < 0 {
			return d.errf("negative byte count %d", n)
		}
		return d.long(int(n))
	case opBinFloat:
		b, err := d.take(8)
		if err != nil {
			return err
		}
		d.push(Float(math.Float64frombits(binary.BigEndian.Uint64(b))))
	case opInt:
		l, err := d.line()
		if err != nil {
			return err
		}
		return d.textInt(l, false)
	case opLong:
		l, err := d.line()
		if err != nil {
			return err
		}
		return d.textInt(l, true)
	case opFloat:
		l, err := d.line()
		if err != nil {
			return err
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(string(l)), 64)
		if err != nil {
			return d.errf("bad float %s", quote(l))
		}
		d.push(Float(f))

	case opShortBinUnicode:
		b, err := d.take(1)
		if err != nil {
			return err
		}
		s, err := d.take(int(b[0]))
		if err != nil {
			return err
		}
		d.push(vs.StrBytes(s))
	case opBinUnicode:
		b, err := d.take(4)
		if err != nil {
			return err
		}
		s, err := d.takeLen(uint64(binary.LittleEndian.Uint32(b)))
		if err != nil {
			return err
		}
		d.push(vs.StrBytes(s))
	case opBinUnicode8:
		b, err := d.take(8)
		if err != nil {
			return err
		}
		s, err := d.takeLen(binary.LittleEndian.Uint64(b))
		if err != nil {
			return err
		}
		d.push(vs.StrBytes(s))
	case opShortBinString, opShortBinBytes:
		b, err := d.take(1)
		if err != nil {
			return err
		}
		s, err := d.take(int(b[0]))
		if err != nil {
			return err
		}
		d.pushBytes(op, s)
	case opBinString, opBinBytes:
		b, err := d.take(4)
		if err != nil {
			return err
		}
		n := binary.LittleEndian.Uint32(b)
		if op == opBinString && int32(n) < 0 {
			return d.errf("negative byte count")
		}
		s, err := d.takeLen(uint64(n))
		if err != nil {
			return err
		}
		d.pushBytes(op, s)
	case opBinBytes8, opByteArray8:
		b, err := d.take(8)
		if err != nil {
			return err
		}
		s, err := d.takeLen(binary.LittleEndian.Uint64(b))
		if err != nil {
			return err
		}
		d.push(vs.bytesValue(s))
	case opString:
		l, err := d.line()
		if err != nil {
			return err
		}
		s, err := unquotePyString(l)
		if err != nil {
			return d.errf("%v", err)
		}
		d.push(vs.Str(s))
	case opUnicode:
		l, err := d.line()
		if err != nil {
			return err
		}
		d.push(vs.Str(rawUnicodeEscape(l)))

	case opEmptyList:
		d.push(vs.NewContainer(KindList))
	case opEmptyDict:
		if d.flat != nil && d.inAppends() {
			d.pos--
			if ok, err := d.flatBatch(); ok || err != nil {
				return err
			}
			d.pos++
		}
		d.push(vs.NewContainer(KindDict))
	case opEmptyTuple:
		d.push(vs.NewContainer(KindTuple))
	case opEmptySet:
		d.push(vs.NewContainer(KindSet))
	case opTuple1, opTuple2, opTuple3:
		n := int(op-opTuple1) + 1
		base := 0
		if len(d.marks) > 0 {
			base = d.marks[len(d.marks)-1]
		}
		if len(d.stack)-base < n {
			return d.errf("stack underflow (malformed pickle)")
		}
		items := d.stack[len(d.stack)-n:]
		t, err := d.newTuple(items)
		if err != nil {
			return err
		}
		d.stack = d.stack[:len(d.stack)-n]
		d.push(t)
	case opTuple, opFrozenSet, opList:
		items, err := d.popMark()
		if err != nil {
			return err
		}
		k := KindTuple
		switch op {
		case opFrozenSet:
			k = KindSet
		case opList:
			k = KindList
		}
		t, err := d.newContainer(k, items)
		if err != nil {
			return err
		}
		d.push(t)
	case opDict:
		items, err := d.popMark()
		if err != nil {
			return err
		}
		if len(items)%2 != 0 {
			return d.errf("odd number of items (%d) for a dict", len(items))
		}
		m, err := d.newContainer(KindDict, items)
		if err != nil {
			return err
		}
		d.push(m)
	case opAppend:
		v, err := d.pop()
		if err != nil {
			return err
		}
		t, err := d.top()
		if err != nil {
			return err
		}
		if err := d.target(*t, KindList); err != nil {
			return err
		}
		if v, err = d.freeze(v); err != nil {
			return err
		}
		return d.appendTo(t.N, v)
	case opAppends, opAddItems:
		items, err := d.popMark()
		if err != nil {
			return err
		}
		t, err := d.top()
		if err != nil {
			return err
		}
		want := KindList
		if op == opAddItems {
			want = KindSet
		}
		if err := d.target(*t, want); err != nil {
			return err
		}
		if err := d.freezeAll(items); err != nil {
			return err
		}
		return d.appendTo(t.N, items...)
	case opSetItem:
		v, err := d.pop()
		if err != nil {
			return err
		}
		k, err := d.pop()
		if err != nil {
			return err
		}
		t, err := d.top()
		if err != nil {
			return err
		}
		if err := d.target(*t, KindDict); err != nil {
			return err
		}
		if v, err = d.freeze(v); err != nil {
			return err
		}
		if k, err = d.freeze(k); err != nil {
			return err
		}
		return d.appendTo(t.N, k, v)
	case opSetItems:
		items, err := d.popMark()
		if err != nil {
			return err
		}
		if len(items)%2 != 0 {
			return d.errf("odd number of items (%d) for a dict", len(items))
		}
		t, err := d.top()
		if err != nil {
			return err
		}
		if err := d.target(*t, KindDict); err != nil {
			return err
		}
		if err := d.freezeAll(items); err != nil {
			return err
		}
		return d.appendTo(t.N, items...)

	case opMemoize:
		t, err := d.top()
		if err != nil {
			return err
		}
		return d.memoPut(uint64(d.memo.stored), *t)
	case opBinPut:
		b, err := d.take(1)
		if err != nil {
			return err
		}
		t, err := d.top()
		if err != nil {
			return err
		}
		return d.memoPut(uint64(b[0]), *t)
	case opLongBinPut:
		b, err := d.take(4)
		if err != nil {
			return err
		}
		t, err := d.top()
		if err != nil {
			return err
		}
		return d.memoPut(uint64(binary.LittleEndian.Uint32(b)), *t)
	case opPut:
		l, err := d.line()
		if err != nil {
			return err
		}
		i, err := strconv.ParseUint(string(l), 10, 32)
		if err != nil {
			return d.errf("bad memo index %s", quote(l))
		}
		t, err := d.top()
		if err != nil {
			return err
		}
		return d.memoPut(i, *t)
	case opBinGet:
		b, err := d.take(1)
		if err != nil {
			return err
		}
		return d.memoGet(uint64(b[0]))
	case opLongBinGet:
		b, err := d.take(4)
		if err != nil {
			return err
		}
		return d.memoGet(uint64(binary.LittleEndian.Uint32(b)))
	case opGet:
		l, err := d.line()
		if err != nil {
			return err
		}
		i, err := strconv.ParseUint(string(l), 10, 32)
		if err != nil {
			return d.errf("bad memo index %s", quote(l))
		}
		return d.memoGet(i)

	case opGlobal, opStackGlobal, opInst, opObj, opReduce, opBuild, opNewObj, opNewObjEx,
		opPersID, opBinPersID, opExt1, opExt2, opExt4:
		return &Error{Offset: d.opStart, Op: opName(op), Err: ErrRefused,
			Msg: "the pickle names or builds a Python object; memstat reads plain data only and never imports or calls what a pickle names"}
	case opNextBuffer, opReadOnlyBuffer:
		return &Error{Offset: d.opStart, Op: opName(op), Err: ErrRefused,
			Msg: "out-of-band buffers are not supported"}
	default:
		return &Error{Offset: d.opStart, Msg: fmt.Sprintf("byte 0x%02x is not a pickle opcode (not a pickle, or corrupt)", op)}
	}
	return nil
}

func (d *Decoder) pushBytes(op byte, s []byte) {
	// Python 3 reads protocol-2 str (BINSTRING) as str by default.
	if op == opBinString || op == opShortBinString {
		d.push(d.vs.StrBytes(s))
		return
	}
	d.push(d.vs.bytesValue(s))
}

// long decodes n bytes of little-endian two's complement.
func (d *Decoder) long(n int) error {
	if n > maxLongLen {
		return d.errf("%d-byte integer is over the %d-byte limit", n, maxLongLen)
	}
	b, err := d.take(n)
	if err != nil {
		return err
	}
	if n == 0 {
		d.push(Int(0))
		return nil
	}
	if n <= 8 {
		var u uint64
		for i := n - 1; i >= 0; i-- {
			u = u<<8 | uint64(b[i])
		}
		if b[n-1]&0x80 != 0 && n < 8 {
			u |= ^uint64(0) << (8 * uint(n)) // sign-extend
		}
		d.push(Int(int64(u)))
		return nil
	}
	be := make([]byte, n)
	for i := range b {
		be[n-1-i] = b[i]
	}
	x := new(big.Int).SetBytes(be)
	if b[n-1]&0x80 != 0 {
		x.Sub(x, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
	}
	d.push(d.vs.bigValue(x))
	return nil
}

func (d *Decoder) textInt(l []byte, long bool) error {
	s := strings.TrimSpace(string(l))
	if long {
		s = strings.TrimSuffix(s, "L")
	} else if s == "00" || s == "01" {
		d.push(Bool(s == "01"))
		return nil
	}
	if len(s) > 2*maxLongLen {
		return d.errf("integer text longer than %d digits", 2*maxLongLen)
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		d.push(Int(i))
		return nil
	}
	x, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return d.errf("bad integer %s", quote([]byte(s)))
	}
	d.push(d.vs.bigValue(x))
	return nil
}

// unquotePyString decodes the repr of a Python 2 str as protocol 0 writes it.
func unquotePyString(l []byte) (string, error) {
	s := strings.TrimRight(string(l), " \r")
	if len(s) < 2 || (s[0] != '\'' && s[0] != '"') || s[len(s)-1] != s[0] {
		return "", fmt.Errorf("bad STRING argument %s", quote(l))
	}
	s = s[1 : len(s)-1]
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch e := s[i]; e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'x':
			if i+2 < len(s)+0 && i+2 <= len(s)-1 {
				v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
				if err == nil {
					b.WriteByte(byte(v))
					i += 2
					continue
				}
			}
			b.WriteString(`\x`)
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String(), nil
}

// rawUnicodeEscape decodes Python's raw-unicode-escape: \uXXXX and
// \UXXXXXXXX escapes, every other byte a Latin-1 character.
func rawUnicodeEscape(l []byte) string {
	var b strings.Builder
	for i := 0; i < len(l); i++ {
		if l[i] == '\\' && i+1 < len(l) && (l[i+1] == 'u' || l[i+1] == 'U') {
			n := 4
			if l[i+1] == 'U' {
				n = 8
			}
			if i+2+n <= len(l) {
				if v, err := strconv.ParseUint(string(l[i+2:i+2+n]), 16, 32); err == nil && utf8.ValidRune(rune(v)) {
					b.WriteRune(rune(v))
					i += 1 + n
					continue
				}
			}
		}
		b.WriteRune(rune(l[i]))
	}
	return b.String()
}
