package pickle

import (
	"cmp"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"slices"
)

// Skim is what a skim of a pickle's first part found (see SkimTo): where a
// given key of the top-level dict is pushed, and for each object the memo
// stored before it, the bytes that make that object. A decoder can then
// start at the key (Skim.Decoder) and decode a stored object from its
// bytes only when a later opcode refers to it: what comes before the key
// costs a walk over its opcodes, not its decoding.
type Skim struct {
	// Stop is the input offset of the opcode that pushes the key.
	Stop int64
	// Memo is how many objects the memo holds at Stop.
	Memo int
	// Pieces is how many pieces skimmed on goroutines of their own were
	// joined (SkimAt; 0 for a skim in order).
	Pieces int
	proto  int
	// span[i] is the memo's object i: its first byte and one past its
	// last (0 while the object is still being built at Stop).
	span spanPages
	// firsts holds, for the objects whose first byte comes before other
	// objects stored (a tuple of memoized items), how many objects the
	// memo held at that byte; for any other object it is its own index.
	firsts map[int]uint32
	// arena holds span's pages, if not nil (Release).
	arena *spanArena
	// stack is the decoder's stack at Stop: a dict where the top-level
	// dict is, None elsewhere (nothing there is read before the key's
	// value is complete); marks its open MARKs.
	dicts []bool
	marks []int
}

type skimSpan struct {
	start, end uint32
}

// spanPages holds the spans in pages that are never copied as they grow:
// its own n, the spans of objects first to first+n-1, and the spans of
// the objects before, joined from other walks (see skimsplit.go), in
// prev.
type spanPages struct {
	pages [][]skimSpan
	n     int
	first int
	prev  []spanPages
	total int // first + n
	// arena, if not nil, holds the pages (see spanArena).
	arena *spanArena
}

const spanPageBits = 12

func (p *spanPages) add(s skimSpan) {
	if p.n>>spanPageBits == len(p.pages) {
		p.newPage()
	}
	p.pages[p.n>>spanPageBits][p.n&(1<<spanPageBits-1)] = s
	p.n++
	p.total++
}

func (p *spanPages) newPage() {
	pg := p.arena.page()
	if pg == nil {
		pg = make([]skimSpan, 1<<spanPageBits)
	}
	p.pages = append(p.pages, pg)
}

// inPages reports whether object i's span is in p's own pages (page), not
// in those joined before them.
func (p *spanPages) inPages(i int) bool { return i >= p.first && i < p.total }

// page is at for an object in p's own pages.
func (p *spanPages) page(i int) *skimSpan {
	i -= p.first
	return &p.pages[i>>spanPageBits][i&(1<<spanPageBits-1)]
}

// count is how many objects have spans.
func (p *spanPages) count() int { return p.total }

func (p *spanPages) at(i int) *skimSpan {
	if i < p.first {
		return p.prevAt(i)
	}
	i -= p.first
	return &p.pages[i>>spanPageBits][i&(1<<spanPageBits-1)]
}

func (p *spanPages) prevAt(i int) *skimSpan {
	k, _ := slices.BinarySearchFunc(p.prev, i, func(q spanPages, i int) int { return cmp.Compare(q.first+q.n, i+1) })
	return p.prev[k].at(i)
}

// join makes q's spans (numbered from 0) follow p's.
func (p *spanPages) join(q spanPages) {
	if p.n > 0 {
		p.prev = append(p.prev, spanPages{pages: p.pages, n: p.n, first: p.first, arena: p.arena})
	}
	p.pages, p.first, p.n = q.pages, p.first+p.n, q.n
	p.total = p.first + p.n
}

// ErrSkim says the skim met a pickle it does not walk: the caller decodes
// it from the start as usual. It is never a statement about the pickle's
// validity.
var ErrSkim = errors.New("not a pickle the skim walks")

// skimSlot is a stack slot of the skim: where its object starts, and its
// kind in the low bits of info, then slotFix, then the memo index it was
// stored at plus one (0: none).
type skimSlot struct {
	start, info uint32
}

const (
	slotOther uint32 = iota
	slotList
	slotDict
	slotGot      // pushed by a memo reference: never a target
	slotKindBits = 2
	slotKinds    = 1<<slotKindBits - 1
	// slotFix says start is not an offset but a fixup of a piece's walk
	// (see skimPieceWalk): the object starts in what came before the
	// piece.
	slotFix       uint32 = 1 << slotKindBits
	slotMemoShift        = slotKindBits + 1
)

type skimMark struct {
	at    int // stack length
	start uint32
	fix   bool // start is a fixup (a mark before the piece; see popMark)
}

// skimChunk is how much input the skim reads at a time.
const skimChunk = 1 << 20

// SkimTo walks the pickle r from its start without building values until
// an opcode pushes the string key as a key of the top-level dict (the
// dict is the stack's first value: SETITEM's [dict, key] or SETITEMS'
// [dict, MARK, key, value, ..., key]). It walks only what CPython's
// pickler writes for plain data at protocol 2 and up (PROTO, FRAME, MARK,
// ints, floats, strings, bytes, None, bools, empty containers, APPEND(S),
// SETITEM(S), TUPLE*, LIST, DICT, POP, sequential MEMOIZE/BINPUT, memo
// references) and only objects that no later opcode changes (a memo
// reference never the target of APPEND or SETITEM): anything else, a key
// never found, input past 4 GiB or more than maxMemo objects stored, is
// ErrSkim. A read error is returned as it is.
func SkimTo(r io.Reader, key string, maxMemo int) (*Skim, error) {
	s := newSkimmer(r, key, maxMemo, skimChunk+64)
	return s.run()
}

func newSkimmer(r io.Reader, key string, maxMemo, bufSize int) *skimmer {
	// A slot's memo index shares a word with its kind.
	maxMemo = min(maxMemo, 1<<(32-slotMemoShift)-2)
	s := &skimmer{r: r, key: key, maxMemo: maxMemo, limit: math.MaxInt64}
	if bufSize > 0 {
		s.buf = make([]byte, 0, bufSize)
	}
	return s
}

type skimmer struct {
	r       io.Reader
	buf     []byte
	pos     int
	base    int64 // input offset of buf[0]
	eof     bool
	key     string
	maxMemo int

	stack  []skimSlot
	marks  []skimMark
	span   spanPages
	firsts map[int]uint32
	proto  int

	// limit: the walk stops at the first FRAME opcode at limit or after
	// it (errSkimLimit, pos at the opcode).
	limit int64
	// stopped is where the walk stopped, at errSkimLimit or errSkimKey.
	stopped int64
	// piece is set for the walk of a piece after the first (see
	// skimsplit.go): it starts with what came before unknown.
	piece *skimPieceWalk
}

// fill makes n bytes available at pos, false at the end of the input.
func (s *skimmer) fill(n int) (bool, error) {
	if len(s.buf)-s.pos >= n {
		return true, nil
	}
	if s.eof {
		return false, nil
	}
	rest := copy(s.buf[:cap(s.buf)], s.buf[s.pos:])
	s.base += int64(s.pos)
	s.pos = 0
	s.buf = s.buf[:rest]
	if n > cap(s.buf) {
		return false, ErrSkim
	}
	for len(s.buf) < n {
		k, err := s.r.Read(s.buf[len(s.buf):cap(s.buf)])
		s.buf = s.buf[:len(s.buf)+k]
		if err == io.EOF {
			s.eof = true
			return len(s.buf) >= n, nil
		}
		if err != nil {
			return false, err
		}
	}
	return true, nil
}

// skip passes n bytes after pos.
func (s *skimmer) skip(n uint64) (bool, error) {
	if avail := uint64(len(s.buf) - s.pos); n <= avail {
		s.pos += int(n)
		return true, nil
	}
	n -= uint64(len(s.buf) - s.pos)
	s.base += int64(len(s.buf))
	s.buf, s.pos = s.buf[:0], 0
	for n > 0 {
		if s.eof {
			return false, nil
		}
		k, err := s.r.Read(s.buf[:cap(s.buf)])
		if err == io.EOF {
			s.eof = true
		} else if err != nil {
			return false, err
		}
		if uint64(k) > n {
			s.buf = s.buf[:k]
			s.pos = int(n)
			return true, nil
		}
		s.base += int64(k)
		n -= uint64(k)
	}
	return true, nil
}

// pop removes the top n slots (above the last mark).
func (s *skimmer) pop(n int) bool {
	base := 0
	if len(s.marks) > 0 {
		base = s.marks[len(s.marks)-1].at
	}
	if len(s.stack)-n < base {
		if s.piece != nil && len(s.marks) == 0 {
			// Slots before the piece: what they are is checked when
			// the pieces are joined.
			s.piece.log = append(s.piece.log, skimLogOp{op: logPop, n: uint32(n - len(s.stack))})
			s.stack = s.stack[:0]
			return true
		}
		return false
	}
	s.stack = s.stack[:len(s.stack)-n]
	return true
}

// popMark removes the slots above the last mark and the mark.
func (s *skimmer) popMark() (skimMark, bool) {
	if len(s.marks) == 0 {
		if s.piece != nil {
			// The mark is before the piece: where it starts is known
			// when the pieces are joined.
			f := s.piece.fixup()
			s.piece.log = append(s.piece.log, skimLogOp{op: logPopMark, n: f})
			s.stack = s.stack[:0]
			return skimMark{start: f, fix: true}, true
		}
		return skimMark{}, false
	}
	m := s.marks[len(s.marks)-1]
	s.stack = s.stack[:m.at]
	s.marks = s.marks[:len(s.marks)-1]
	return m, true
}

// target reports whether the top slot is an open container of kind k,
// and marks its object complete at end (as far as the input goes).
func (s *skimmer) target(k uint32, end uint32) bool {
	base := 0
	if len(s.marks) > 0 {
		base = s.marks[len(s.marks)-1].at
	}
	if len(s.stack) <= base {
		if s.piece != nil && len(s.marks) == 0 {
			s.piece.log = append(s.piece.log, skimLogOp{op: logTarget, n: k, end: end})
			return true
		}
		return false
	}
	t := s.stack[len(s.stack)-1]
	if t.info&slotKinds != k {
		return false
	}
	if m := t.info >> slotMemoShift; m != 0 {
		s.span.at(int(m - 1)).end = end
	}
	return true
}

// memoize stores the top slot's object at the next memo index; end is
// where it is complete so far.
func (s *skimmer) memoize(end uint32) bool {
	base := 0
	if len(s.marks) > 0 {
		base = s.marks[len(s.marks)-1].at
	}
	if s.span.count() >= s.maxMemo {
		return false
	}
	if len(s.stack) <= base {
		if s.piece != nil && len(s.marks) == 0 {
			// An object before the piece: its start is known when the
			// pieces are joined.
			f := s.piece.fixup()
			s.piece.log = append(s.piece.log, skimLogOp{op: logMemoize, n: f, end: uint32(s.span.count())})
			s.piece.deferred = append(s.piece.deferred, skimDeferred{memo: uint32(s.span.count()), fixup: f})
			s.span.add(skimSpan{end: end})
			return true
		}
		return false
	}
	t := &s.stack[len(s.stack)-1]
	if t.info>>slotMemoShift != 0 || t.info&slotKinds == slotGot {
		return false
	}
	i := s.span.count()
	t.info |= uint32(i+1) << slotMemoShift
	if t.info&slotFix != 0 {
		// It starts before the piece (the first of a tuple's items
		// there): the start and what was stored inside it are known
		// when the pieces are joined. Meanwhile its start reads as 0,
		// before every object stored in the piece, as the real one is.
		s.piece.deferred = append(s.piece.deferred, skimDeferred{memo: uint32(i), fixup: t.start})
		s.span.add(skimSpan{end: end})
		return true
	}
	// The objects stored since the slot's start are inside it (an object
	// stored before it starts before it): a tuple of memoized items.
	first := i
	for first > 0 && s.span.at(first-1).start >= t.start {
		first--
	}
	if first != i {
		if s.firsts == nil {
			s.firsts = make(map[int]uint32)
		}
		s.firsts[i] = uint32(first)
	}
	s.span.add(skimSpan{start: t.start, end: end})
	return true
}

// atKey reports whether a string pushed now is a key of the top-level
// dict.
func (s *skimmer) atKey() bool {
	if s.piece != nil {
		// Whether it is the top level is known when the pieces are
		// joined: the piece stops there.
		return true
	}
	n := len(s.stack)
	if n == 0 || s.stack[0].info&slotKinds != slotDict {
		return false
	}
	switch len(s.marks) {
	case 0:
		return n == 1
	case 1:
		return s.marks[0].at == 1 && (n-1)%2 == 0
	}
	return false
}

func (s *skimmer) run() (*Skim, error) {
	// buf and pos are s.buf and s.pos, stack s.stack, base s.base, kept in
	// registers: s.pos and s.stack are written back before anything that
	// reads them (the methods below, and every return: leave). The
	// opcodes that make up nearly all of a snapshot's segments (memo
	// references, MARK, ints, empty containers, APPENDS, SETITEMS,
	// MEMOIZE) are walked here without a call when they are not at a
	// piece's edge; the rest go through the methods.
	buf, pos, stack, base := s.buf, s.pos, s.stack, s.base
	for {
		if len(buf)-pos < 16 {
			s.pos = pos
			if ok, err := s.fill(16); err != nil {
				return s.leave(stack, err)
			} else if !ok {
				if ok, err = s.fill(1); err != nil || !ok {
					if err == nil {
						err = ErrSkim
					}
					return s.leave(stack, err)
				}
			}
			buf, pos, base = s.buf, s.pos, s.base
			if base+int64(pos) >= math.MaxUint32-(1<<20) {
				return s.leave(stack, ErrSkim)
			}
			if len(buf)-pos < 16 {
				// The input's last bytes: pad them so that every
				// fixed-size argument reads within buf (a real end of
				// the input ends the walk: no STOP, no key).
				return s.leave(stack, ErrSkim)
			}
		}
		at := uint32(base + int64(pos))
		op := buf[pos]
		switch op {
		case opLongBinGet, opBinGet:
			// A run of memo references (a list of shared frames, most of
			// a snapshot's segments), walked in a loop of its own without
			// a branch on which of the two each is, the largest index
			// checked at the run's end (nothing stored meanwhile).
			hi := uint32(0)
			for {
				o := buf[pos]
				n := int(skimGetLen[o])
				if n == 0 {
					break
				}
				hi = max(hi, binary.LittleEndian.Uint32(buf[pos+1:])&skimGetMask[o])
				stack = append(stack, skimSlot{start: uint32(base + int64(pos)), info: slotGot})
				pos += n
				if len(buf)-pos < 16 {
					break
				}
			}
			if uint64(hi) >= uint64(s.span.total) && !s.storedBefore(uint64(hi)) {
				return s.leave(stack, ErrSkim)
			}
		case opMemoize:
			pos++
			if t := len(stack) - 1; t >= s.markBase() && stack[t].info&slotFix == 0 &&
				stack[t].info&slotKinds != slotGot && stack[t].info>>slotMemoShift == 0 && s.span.total < s.maxMemo && s.span.inPages(s.span.total-1) {
				// memoize's common case: the top slot, begun in this
				// walk, stored once; an object stored just before it
				// that starts inside it is an item of a tuple (memoize
				// finds the rest).
				i := s.span.total
				if i > 0 && s.span.page(i-1).start >= stack[t].start {
					s.stack = stack
					if !s.memoize(at + 1) {
						return s.leave(stack, ErrSkim)
					}
					break
				}
				stack[t].info |= uint32(i+1) << slotMemoShift
				s.span.add(skimSpan{start: stack[t].start, end: at + 1})
				break
			}
			s.stack = stack
			if !s.memoize(at + 1) {
				return s.leave(stack, ErrSkim)
			}
		case opBinPut, opLongBinPut:
			i := uint64(buf[pos+1])
			pos += 2
			if op == opLongBinPut {
				i = uint64(binary.LittleEndian.Uint32(buf[pos-1:]))
				pos += 3
			}
			s.stack = stack
			if i != uint64(s.span.count()) || s.piece != nil || !s.memoize(uint32(base+int64(pos))) {
				return s.leave(stack, ErrSkim)
			}
		case opMark:
			s.marks = append(s.marks, skimMark{at: len(stack), start: at})
			pos++
		case opEmptyDict, opEmptyList:
			kind := slotDict
			if op == opEmptyList {
				kind = slotList
			}
			if buf[pos+1] == opMemoize && s.span.total < s.maxMemo {
				// Stored at once, as CPython writes every container
				// (memoize's case of a fresh slot: every object stored
				// before starts before it), and often a MARK for its
				// items.
				i := s.span.total
				stack = append(stack, skimSlot{start: at, info: kind | uint32(i+1)<<slotMemoShift})
				s.span.add(skimSpan{start: at, end: at + 2})
				pos += 2
				if buf[pos] == opMark {
					s.marks = append(s.marks, skimMark{at: len(stack), start: at + 2})
					pos++
				}
				break
			}
			stack = append(stack, skimSlot{start: at, info: kind})
			pos++
		case opNone, opNewTrue, opNewFalse, opEmptyTuple:
			stack = append(stack, skimSlot{start: at})
			pos++
		case opBinInt1, opBinInt2, opBinInt, opBinFloat:
			n := uint32(2)
			switch op {
			case opBinInt2:
				n = 3
			case opBinInt:
				n = 5
			case opBinFloat:
				n = 9
			}
			stack = append(stack, skimSlot{start: at})
			pos += int(n)
		case opFrame:
			if int64(at) >= s.limit {
				s.pos, s.stopped = pos, int64(at)
				return s.leave(stack, errSkimLimit)
			}
			if s.piece != nil && s.piece.cancelled() {
				return s.leave(stack, errSkimCancel)
			}
			pos += 9
		case opAppend, opSetItem:
			pos++
			n, k := 1, slotList
			if op == opSetItem {
				n, k = 2, slotDict
			}
			s.stack = stack
			if !s.pop(n) || !s.target(k, at+1) {
				return s.leave(s.stack, ErrSkim)
			}
			stack = s.stack
		case opAppends, opSetItems:
			pos++
			k := slotList
			if op == opSetItems {
				k = slotDict
			}
			if m := len(s.marks) - 1; m >= 0 {
				// The mark and the container below it are in this walk
				// (or the container is before the piece: target logs it).
				at0 := s.marks[m].at
				if k == slotDict && (len(stack)-at0)%2 != 0 {
					return s.leave(stack, ErrSkim)
				}
				stack = stack[:at0]
				s.marks = s.marks[:m]
				if t := len(stack) - 1; t >= s.markBase() {
					// target's case for a container in this walk (a
					// piece's too: only one before the piece is logged).
					if stack[t].info&slotKinds != k {
						return s.leave(stack, ErrSkim)
					}
					if mi := stack[t].info >> slotMemoShift; mi != 0 {
						if j := int(mi - 1); s.span.inPages(j) {
							s.span.page(j).end = at + 1
						} else {
							s.span.at(j).end = at + 1
						}
					}
					break
				}
				s.stack = stack
				if !s.target(k, at+1) {
					return s.leave(stack, ErrSkim)
				}
				break
			}
			s.stack = stack
			if k == slotDict {
				if s.piece != nil {
					// The mark is before the piece.
					s.piece.log = append(s.piece.log, skimLogOp{op: logParity, n: uint32(len(stack))})
				} else {
					return s.leave(stack, ErrSkim)
				}
			}
			if _, ok := s.popMark(); !ok || !s.target(k, at+1) {
				return s.leave(s.stack, ErrSkim)
			}
			stack = s.stack
		case opShortBinUnicode, opBinUnicode, opBinUnicode8, opLong1, opLong4,
			opShortBinBytes, opBinBytes, opBinBytes8, opShortBinString, opBinString:
			var n uint64
			w := 1
			switch op {
			case opLong4, opBinUnicode, opBinBytes, opBinString:
				w = 4
				n = uint64(binary.LittleEndian.Uint32(buf[pos+1:]))
			case opBinUnicode8, opBinBytes8:
				w = 8
				n = binary.LittleEndian.Uint64(buf[pos+1:])
			default:
				n = uint64(buf[pos+1])
			}
			pos += 1 + w
			if n == uint64(len(s.key)) && op != opLong1 && op != opLong4 {
				s.stack = stack
				if s.atKey() {
					isStr := op == opShortBinUnicode || op == opBinUnicode || op == opBinUnicode8
					s.pos = pos
					if ok, err := s.fill(int(n)); err != nil {
						return s.leave(stack, err)
					} else if ok && isStr && string(s.buf[s.pos:s.pos+int(n)]) == s.key {
						if s.piece != nil {
							s.stopped = int64(at)
							return s.leave(stack, errSkimKey)
						}
						return s.result(int64(at)), nil
					}
					buf, pos, base = s.buf, s.pos, s.base
				}
			}
			if n <= uint64(len(buf)-pos) {
				pos += int(n)
			} else {
				s.pos = pos
				if ok, err := s.skip(n); err != nil || !ok {
					if err == nil {
						err = ErrSkim
					}
					return s.leave(stack, err)
				}
				buf, pos, base = s.buf, s.pos, s.base
			}
			stack = append(stack, skimSlot{start: at})
		case opTuple1, opTuple2, opTuple3:
			pos++
			n := int(op-opTuple1) + 1
			s.stack = stack
			if len(stack) < n {
				if s.piece == nil || len(s.marks) != 0 {
					return s.leave(stack, ErrSkim)
				}
				// Its first item is before the piece.
				f := s.piece.fixup()
				s.piece.log = append(s.piece.log, skimLogOp{op: logTuple, n: f, end: uint32(n - len(stack))})
				stack = append(stack[:0], skimSlot{start: f, info: slotFix})
				break
			}
			first := stack[len(stack)-n]
			if !s.pop(n) {
				return s.leave(s.stack, ErrSkim)
			}
			stack = append(s.stack, skimSlot{start: first.start, info: first.info & slotFix})
		case opTuple, opList, opDict:
			pos++
			s.stack = stack
			m, ok := s.popMark()
			if !ok {
				return s.leave(s.stack, ErrSkim)
			}
			kind := slotOther
			switch op {
			case opList:
				kind = slotList
			case opDict:
				kind = slotDict
			}
			if m.fix {
				kind |= slotFix
			}
			stack = append(s.stack, skimSlot{start: m.start, info: kind})
		case opPop:
			pos++
			s.stack = stack
			if !s.pop(1) {
				return s.leave(s.stack, ErrSkim)
			}
			stack = s.stack
		case opProto:
			if at != 0 || buf[pos+1] < 2 || buf[pos+1] > 5 {
				return s.leave(stack, ErrSkim)
			}
			s.proto = int(buf[pos+1])
			pos += 2
		default:
			// STOP (no key), objects, text opcodes, sets, DUP, POP_MARK,
			// buffers: decoded from the start.
			return s.leave(stack, ErrSkim)
		}
	}
}

// skimGetLen is the length of a memo reference's opcode and argument (0:
// another opcode), skimGetMask the bits of the 4 bytes after it that are
// its index.
var skimGetLen, skimGetMask = func() (l [256]uint8, m [256]uint32) {
	l[opBinGet], m[opBinGet] = 2, 0xff
	l[opLongBinGet], m[opLongBinGet] = 5, 0xffffffff
	return l, m
}()

// leave ends a walk: the stack kept in run's registers goes back to s.
func (s *skimmer) leave(stack []skimSlot, err error) (*Skim, error) {
	s.stack = stack
	return nil, err
}

func (s *skimmer) result(at int64) *Skim {
	sk := &Skim{Stop: at, Memo: s.span.count(), proto: s.proto, span: s.span, firsts: s.firsts, arena: s.span.arena}
	for _, sl := range s.stack {
		sk.dicts = append(sk.dicts, sl.info&slotKinds == slotDict)
	}
	for _, m := range s.marks {
		sk.marks = append(sk.marks, m.at)
	}
	// What is still on the stack is being built: a reference to it is
	// decoded with everything before the key (see lazyMemo.all).
	for _, sl := range s.stack {
		if m := sl.info >> slotMemoShift; m != 0 {
			s.span.at(int(m - 1)).end = 0
		}
	}
	return sk
}

// Release gives back the memory of the spans (Skim.Decoder's decoder
// decodes no object before Stop on demand after it: FinishSkim calls it).
func (sk *Skim) Release() {
	if sk == nil {
		return
	}
	sk.span = spanPages{}
	sk.arena.release()
	sk.arena = nil
}

// first returns how many objects the memo held at object i's first byte.
func (sk *Skim) first(i int) uint32 {
	if f, ok := sk.firsts[i]; ok {
		return f
	}
	return uint32(i)
}
