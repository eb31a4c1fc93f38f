package pickle

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// A skim of a file in pieces. CPython's pickler writes protocol 4 and up in
// frames (a FRAME opcode, then the frame's length, every 64 KiB or so), and
// a frame starts at an opcode: walking the frame headers alone (a read of
// 9 bytes a frame) finds where the input can be cut into pieces. The first
// piece is skimmed as SkimTo does; each later one on its own goroutine from
// an empty stack, what it does to the stack it does not see (slots and
// marks before the piece) kept in a log, the objects it stores numbered
// from 0, and what it cannot know yet (where an object that begins before
// the piece starts) left to fixups. Joining the pieces in order replays
// each one's log on the stack the pieces before it left, as SkimTo would
// have run those opcodes, with SkimTo's checks, and renumbers what the
// piece stored. A piece that stops elsewhere than where the next one starts
// (a frame length that does not lead to an opcode), or that meets anything
// it does not walk alone, is walked again in order from the join: the
// result is SkimTo's in every case, or ErrSkim where SkimTo says ErrSkim.

// skimPieceBytes is about how long a piece is by default: small enough
// that two goroutines finish close together, large enough that the
// joins cost nothing.
const skimPieceBytes = 8 << 20

// skimFirstPiece is how long the first piece is at most.
const skimFirstPiece = 1 << 20

// skimJoined counts the pieces joined (tests: the split skim did split).
var skimJoined atomic.Int64

// A piece's walk stops with one of these (never returned by SkimAt).
var (
	errSkimLimit  = errors.New("pickle skim: at the piece's end")
	errSkimKey    = errors.New("pickle skim: at a string that may be the key")
	errSkimCancel = errors.New("pickle skim: cancelled")
)

// The operations of a piece's log: what its opcodes did to the stack
// before the piece.
const (
	logPop     uint8 = iota // pop n slots
	logPopMark              // pop to the last mark and the mark; fixup n is where the mark starts
	logParity               // the slots above the last mark and n more are even: SETITEMS
	logTarget               // the top slot is an open container of kind n, complete at end
	logMemoize              // the top slot is stored as the piece's object end; fixup n is its start
	logTuple                // end slots make a tuple's first items; fixup n is where the first starts
)

type skimLogOp struct {
	op     uint8
	n, end uint32
}

// skimDeferred is an object the piece stored that starts before it: its
// start is fixup's value.
type skimDeferred struct {
	memo, fixup uint32
}

// skimPieceWalk is the state of a piece's walk that SkimTo's lacks.
type skimPieceWalk struct {
	log      []skimLogOp
	fixups   uint32
	deferred []skimDeferred
	// needMemo is how many objects must have been stored before the
	// piece for its memo references to be stored ones.
	needMemo uint64
	index    int
	stop     *atomic.Int64
}

func (p *skimPieceWalk) fixup() uint32 {
	p.fixups++
	return p.fixups - 1
}

// cancelled reports whether a piece before this one ends the skim.
func (p *skimPieceWalk) cancelled() bool { return int64(p.index) > p.stop.Load() }

// storedBefore reports whether memo index i may be one stored before the
// piece (checked when joined).
func (s *skimmer) storedBefore(i uint64) bool {
	if s.piece == nil {
		return false
	}
	s.piece.needMemo = max(s.piece.needMemo, i+1-uint64(s.span.count()))
	return true
}

// SkimOptions says how SkimAt reads its input.
type SkimOptions struct {
	// Workers is how many goroutines skim pieces of a pickle in frames
	// (1 or less: none but the caller's).
	Workers int
	// PieceBytes is about how long a piece is (0: 8 MiB; tests make it
	// 1: a piece a frame).
	PieceBytes int64
	// Sequential, if not nil, reads the input from its start for a skim
	// in order (a pickle not in frames, or one worker).
	Sequential func() io.Reader
}

// SkimAt is SkimTo for an input that reads at any offset: size bytes of
// src. With opt.Workers > 1 and a pickle in frames (protocol 4 and up),
// it skims pieces of it on that many goroutines and joins them. The
// result is SkimTo's.
func SkimAt(src io.ReaderAt, size int64, key string, maxMemo int, opt SkimOptions) (*Skim, error) {
	var arena *spanArena
	if size >= skimArenaMin {
		arena = newSpanArena(min(maxMemo, 1<<(32-slotMemoShift)-2))
	}
	var mem []byte
	if size >= skimMapMin && opt.Workers >= 2 {
		mem = mapForSkim(src, size)
	}
	sk, err := skimAt(src, size, key, maxMemo, opt, arena, mem)
	unmapForSkim(mem)
	if err != nil || sk.arena != arena {
		arena.release()
	}
	return sk, err
}

// skimMapMin is the input size from which SkimAt maps a file (tests make
// it 0).
var skimMapMin int64 = skimArenaMin

// skimMapMax is the largest input SkimAt maps: every offset in it fits
// the spans' 32 bits with room to spare, as the reading walk's check
// (past 4 GiB less 1 MiB: ErrSkim) requires of the offsets it walks.
const skimMapMax = 2 << 30

// isFault reports whether a recovered panic is a fault reading memory
// (debug.SetPanicOnFault): a mapped file truncated meanwhile.
func isFault(r any) bool {
	_, ok := r.(interface{ Addr() uintptr })
	return ok
}

// skimArenaMin is the input size from which SkimAt keeps its spans in a
// spanArena.
const skimArenaMin = 32 << 20

func skimAt(src io.ReaderAt, size int64, key string, maxMemo int, opt SkimOptions, arena *spanArena, mem []byte) (sk *Skim, err error) {
	var head [11]byte
	n, _ := src.ReadAt(head[:], 0)
	if opt.Workers < 2 || n < len(head) || head[0] != opProto || head[1] < 4 || head[1] > 5 || head[2] != opFrame {
		var r io.Reader = io.NewSectionReader(src, 0, size)
		if opt.Sequential != nil {
			r = opt.Sequential()
		}
		s := newSkimmer(r, key, maxMemo, skimChunk+64)
		s.span.arena = arena
		return s.run()
	}
	sp := &skimSplit{src: src, size: size, key: key, proto: int(head[1]), keyAt: math.MaxInt, piece: opt.PieceBytes}
	if int64(len(mem)) == size {
		sp.mem = mem
		// A fault in the mapping ends the skim, once no worker walks it
		// (the caller unmaps it).
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if r := recover(); r != nil {
				if !isFault(r) {
					panic(r)
				}
				sp.stop.Store(-1)
				sp.wg.Wait()
				sk, err = nil, ErrSkim
			}
		}()
	}
	if sp.piece <= 0 {
		sp.piece = skimPieceBytes
	}
	sp.stop.Store(math.MaxInt64)
	abs := newSkimmer(nil, key, maxMemo, 0)
	abs.span.arena = arena
	sp.arena = arena
	sp.seek(abs, 0)
	sp.maxMemo = abs.maxMemo
	// The first piece is short and walked alone: a key in it (a trace
	// written first, a small file) costs no goroutine and no read of
	// what comes after it. The caller's goroutine walks the second piece
	// too, from where the first stops, as SkimTo would.
	for k := range 2 {
		p := sp.next()
		if p == nil || p.start != abs.base+int64(abs.pos) {
			break
		}
		abs.limit = math.MaxInt64
		if p.limit >= 0 {
			abs.limit = p.limit
		}
		if k == 1 {
			for range opt.Workers - 1 {
				sp.wg.Add(1)
				go func() {
					defer sp.wg.Done()
					if sp.mem != nil {
						// A piece left unwalked is walked again in
						// order, and faults there.
						defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
						defer func() {
							if r := recover(); r != nil && !isFault(r) {
								panic(r)
							}
						}()
					}
					sp.work()
				}()
			}
		}
		sk, err := abs.run()
		if err != errSkimLimit {
			sp.stop.Store(-1)
			sp.wg.Wait()
			return sk, err
		}
		sp.seek(abs, abs.stopped)
	}
	sp.work()
	sp.wg.Wait()
	return sp.join(abs)
}

// skimSplit hands out the pieces and joins them.
type skimSplit struct {
	src  io.ReaderAt
	size int64
	// mem, if not nil, is the input mapped (mapForSkim): the walks read
	// it in place.
	mem     []byte
	piece   int64 // SkimOptions.PieceBytes
	arena   *spanArena
	key     string
	maxMemo int
	proto   int

	mu     sync.Mutex
	pieces []*skimPiece
	win    []byte // frameNear's
	// keyAt is the first piece that stopped at the key (MaxInt: none);
	// stop the pieces past which walks stop.
	keyAt int
	stop  atomic.Int64
	wg    sync.WaitGroup
}

type skimPiece struct {
	index int
	// start is a frame's offset (0 for the first piece); the walk stops
	// at the first FRAME at limit or after it (-1: none).
	start, limit int64
	// What the walk left, if ok: where it stopped, whether at a string
	// that may be the key.
	ok  bool
	key bool
	end int64
	w   *skimmer
}

// bufSize is the size of a walk's buffer: no larger than the input, and
// a quarter of SkimTo's (each fresh page costs more than the reads).
func (sp *skimSplit) bufSize() int {
	return int(min(skimChunk/4, sp.size)) + 64
}

// next returns the next piece to walk, nil when there is none.
func (sp *skimSplit) next() *skimPiece {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	start := int64(0)
	if n := len(sp.pieces); n > 0 {
		last := sp.pieces[n-1]
		if last.limit < 0 || n > sp.keyAt {
			return nil
		}
		start = last.limit
	}
	length := sp.piece
	if len(sp.pieces) == 0 {
		length = min(length, skimFirstPiece)
	}
	p := &skimPiece{index: len(sp.pieces), start: start, limit: sp.frameNear(start + length)}
	sp.pieces = append(sp.pieces, p)
	return p
}

// skimFrameWindow is how far past an offset frameNear looks for a frame,
// and skimFrameMax the longest frame it believes (CPython's are 64 KiB
// and one opcode at most).
const (
	skimFrameWindow = 256 << 10
	skimFrameMax    = 1 << 24
)

// frameNear returns the offset of what looks like the first frame at off
// or after it (-1: none within skimFrameWindow): a FRAME opcode byte
// whose length leads to another, and that one's to a third. It can be
// wrong (those bytes inside a payload, or in no frame at all): a piece
// that starts there is joined only if the walk before it stops there.
func (sp *skimSplit) frameNear(off int64) int64 {
	if off >= sp.size {
		return -1
	}
	if sp.win == nil {
		sp.win = make([]byte, skimFrameWindow)
	}
	n, _ := sp.src.ReadAt(sp.win[:min(int64(len(sp.win)), sp.size-off)], off)
	buf := sp.win[:n]
	for i := 0; i < len(buf); i++ {
		j := bytes.IndexByte(buf[i:], opFrame)
		if j < 0 {
			break
		}
		i += j
		if i+9 <= len(buf) {
			if l := binary.LittleEndian.Uint64(buf[i+1:]); l == 0 || l > skimFrameMax {
				continue
			}
		}
		if sp.framesAt(off+int64(i), 3) {
			return off + int64(i)
		}
	}
	return -1
}

// framesAt reports whether k frame headers follow one another from f (or
// fewer, up to the input's end).
func (sp *skimSplit) framesAt(f int64, k int) bool {
	var h [9]byte
	for range k {
		if f == sp.size {
			return true
		}
		if n, _ := sp.src.ReadAt(h[:], f); n < len(h) || h[0] != opFrame {
			return false
		}
		l := binary.LittleEndian.Uint64(h[1:])
		if l == 0 || l > skimFrameMax {
			return false
		}
		f += int64(len(h)) + int64(l)
	}
	return true
}

// work walks pieces after the first until there are none.
func (sp *skimSplit) work() {
	var buf []byte
	if sp.mem == nil {
		buf = make([]byte, 0, sp.bufSize())
	}
	for p := sp.next(); p != nil; p = sp.next() {
		w := &skimmer{buf: buf, key: sp.key, maxMemo: sp.maxMemo, proto: sp.proto, limit: p.limit,
			piece: &skimPieceWalk{index: p.index, stop: &sp.stop}}
		w.span.arena = sp.arena
		sp.seek(w, p.start)
		if p.limit < 0 {
			w.limit = math.MaxInt64
		}
		_, err := w.run()
		if sp.mem == nil {
			buf = w.buf
		} else if p.limit >= 0 {
			// The piece is walked: its pages need not stay mapped.
			dropMapped(sp.mem, p.start, p.limit)
		}
		w.buf = nil
		sp.mu.Lock()
		if err == errSkimLimit || err == errSkimKey {
			p.ok, p.key, p.end, p.w = true, err == errSkimKey, w.stopped, w
			if p.key && p.index < sp.keyAt {
				sp.keyAt = p.index
				sp.stop.Store(int64(p.index))
			}
		}
		sp.mu.Unlock()
	}
}

// join runs abs, stopped at the end of the first piece, on through the
// others: each one that starts where abs is joined, the rest walked.
func (sp *skimSplit) join(abs *skimmer) (*Skim, error) {
	at, k, joined := abs.stopped, 1, 0
	for {
		for k < len(sp.pieces) && sp.pieces[k].start < at {
			k++
		}
		if k < len(sp.pieces) && sp.pieces[k].start == at && sp.pieces[k].ok {
			p := sp.pieces[k]
			if err := abs.join(p.w); err != nil {
				return nil, err
			}
			p.w = nil
			skimJoined.Add(1)
			joined++
			at = p.end
			k++
			if !p.key {
				continue
			}
		}
		sp.seek(abs, at)
		abs.limit = math.MaxInt64
		for j := k; j < len(sp.pieces); j++ {
			if sp.pieces[j].start > at {
				abs.limit = sp.pieces[j].start
				break
			}
		}
		sk, err := abs.run()
		if err != errSkimLimit {
			if sk != nil {
				sk.Pieces = joined
			}
			return sk, err
		}
		at = abs.stopped
	}
}

// seek sets s to read the input from off on.
func (sp *skimSplit) seek(s *skimmer, off int64) {
	if sp.mem != nil {
		// All of it in the buffer, as at the input's end.
		s.r, s.base, s.buf, s.pos, s.eof = nil, 0, sp.mem, int(off), true
		return
	}
	if s.buf == nil {
		s.buf = make([]byte, 0, sp.bufSize())
	}
	s.r = io.NewSectionReader(sp.src, off, sp.size-off)
	s.base, s.buf, s.pos, s.eof = off, s.buf[:0], 0, false
}

// join runs what the piece w did, starting where s stopped, on s: its log
// on s's stack (with SkimTo's checks), its objects stored after s's, its
// stack on top.
func (s *skimmer) join(w *skimmer) error {
	n1 := s.span.count()
	p := w.piece
	if p.needMemo > uint64(n1) || n1+w.span.count() > s.maxMemo {
		return ErrSkim
	}
	s.span.join(w.span)
	w.span = spanPages{}
	fix := make([]uint32, p.fixups)
	for _, o := range p.log {
		switch o.op {
		case logPop:
			if !s.pop(int(o.n)) {
				return ErrSkim
			}
		case logPopMark:
			m, ok := s.popMark()
			if !ok {
				return ErrSkim
			}
			fix[o.n] = m.start
		case logParity:
			if len(s.marks) == 0 || (len(s.stack)-s.marks[len(s.marks)-1].at+int(o.n))%2 != 0 {
				return ErrSkim
			}
		case logTarget:
			if !s.target(o.n, o.end) {
				return ErrSkim
			}
		case logMemoize:
			if len(s.stack) <= s.markBase() {
				return ErrSkim
			}
			t := &s.stack[len(s.stack)-1]
			if t.info>>slotMemoShift != 0 || t.info&slotKinds == slotGot {
				return ErrSkim
			}
			t.info |= uint32(n1+int(o.end)+1) << slotMemoShift
			fix[o.n] = t.start
		case logTuple:
			k := int(o.end)
			if len(s.stack)-s.markBase() < k {
				return ErrSkim
			}
			fix[o.n] = s.stack[len(s.stack)-k].start
			s.stack = s.stack[:len(s.stack)-k]
		}
	}
	for _, d := range p.deferred {
		s.span.at(n1 + int(d.memo)).start = fix[d.fixup]
	}
	if len(p.deferred) > 0 || len(w.firsts) > 0 {
		if s.firsts == nil {
			s.firsts = make(map[int]uint32)
		}
	}
	for _, d := range p.deferred {
		// As memoize finds it, now that the start is known.
		i := n1 + int(d.memo)
		start := s.span.at(i).start
		first := i
		for first > 0 && s.span.at(first-1).start >= start {
			first--
		}
		if first != i {
			s.firsts[i] = uint32(first)
		}
	}
	for i, f := range w.firsts {
		s.firsts[n1+i] = f + uint32(n1)
	}
	for _, m := range w.marks {
		s.marks = append(s.marks, skimMark{at: len(s.stack) + m.at, start: m.start})
	}
	for _, sl := range w.stack {
		if sl.info&slotFix != 0 {
			sl.start = fix[sl.start]
			sl.info &^= slotFix
		}
		if m := sl.info >> slotMemoShift; m != 0 {
			sl.info = sl.info&(1<<slotMemoShift-1) | (m+uint32(n1))<<slotMemoShift
		}
		s.stack = append(s.stack, sl)
	}
	return nil
}

// markBase is the stack length at the last mark.
func (s *skimmer) markBase() int {
	if len(s.marks) == 0 {
		return 0
	}
	return s.marks[len(s.marks)-1].at
}
