package pickle

import (
	"errors"
	"io"
	"slices"
)

// lazyMemo decodes the objects a skim found (see Skim) when a decoder that
// started at the skim's stop refers to them: each from its own bytes, by a
// decoder of its own that shares the store, the compactor and the memo,
// so the object is what a decoder that read everything before would have
// built (the same records: compaction depends on an object's content
// only). Its own references to objects still undecoded are decoded the
// same way, a few levels deep at most; past that, or for an object still
// being built at the stop, everything before the stop is decoded at once,
// in order, as a decoder from the start would (all).
type lazyMemo struct {
	sk        *Skim
	src       io.ReaderAt
	vs        *Values
	compactor Compactor
	budget    func(held int64) error
	count     uint64
	depth     int
	doneAll   bool
	subs      []*Decoder
	// windows caches the input around the objects decoded, in
	// lazyWindow-aligned pieces, oldest first in order.
	windows map[int64][]byte
	order   []int64
	// resolved counts the objects decoded on demand, bytes their bytes.
	resolved int
	bytes    int64
	// placeholders are the values the decoder's stack starts with (an
	// empty dict where the top-level dict is, empty tuples elsewhere);
	// base and baseMarks the stack all left: the values they stand for.
	placeholders []Value
	base         []Value
	baseMarks    []int
}

// lazyState is a decoder's link to the lazyMemo: sub is set for the
// decoders of the objects before the stop.
type lazyState struct {
	l   *lazyMemo
	sub bool
}

const (
	// maxLazyDepth bounds how many stored objects are being decoded one
	// inside another's references.
	maxLazyDepth = 16
	lazyWindow   = 64 << 10
	lazyWindows  = 16
	// lazyBytesMax is the largest object read whole into memory; larger
	// ones are read as they decode.
	lazyBytesMax = 1 << 20
)

// Decoder returns a decoder that starts at the skim's stop: r reads the
// input from there, src the whole input (for the objects before the stop,
// decoded when referred to). Its stack holds what the skim found there
// (the top-level dict an empty dict, the values before the key None): the
// value it decodes is not the pickle's; what it compacts is. budget, if
// not nil, is checked as SetBudget's while those objects decode.
func (sk *Skim) Decoder(r io.Reader, src io.ReaderAt, vs *Values, c Compactor, budget func(held int64) error) *Decoder {
	d := NewDecoder(r, vs, c)
	d.base = sk.Stop
	d.proto = sk.proto
	var placeholders []Value
	for _, isDict := range sk.dicts {
		k := KindTuple
		if isDict {
			k = KindDict
		}
		v := d.vs.NewContainer(k)
		placeholders = append(placeholders, v)
		d.push(v)
	}
	d.marks = append(d.marks, sk.marks...)
	if sk.Memo > 0 {
		d.memo.grow(sk.Memo - 1)
	}
	d.memo.stored = sk.Memo
	// The cache of lists made of references is shared with the objects'
	// decoders (its keys are memo references, the same in all).
	d.lists = &listCache{}
	d.pending = make(map[uint64]pendingList)
	d.lazy = &lazyState{l: &lazyMemo{sk: sk, src: src, vs: d.vs, compactor: c, budget: budget, count: uint64(sk.Memo),
		windows: make(map[int64][]byte), placeholders: placeholders}}
	return d
}

// FinishSkim returns what a decoder from the start would have returned,
// given what the decoder from the skim's stop (Skim.Decoder) returned:
// everything before the stop is decoded (in order, if no reference made
// it so already) and the values the stop's stack held take the places of
// their placeholders in the top-level dict. It returns ErrSkim when the
// pickle did not leave the placeholders there, as its first items (then
// only a reading from the start says what it holds).
func (d *Decoder) FinishSkim(top Value) (Value, error) {
	if d.lazy == nil || d.lazy.sub {
		return None, ErrSkim
	}
	l := d.lazy.l
	// The spans and the cached input are not read again.
	l.windows, l.order = nil, nil
	l.sk.Release()
	if !l.doneAll {
		if err := l.all(d); err != nil {
			return None, err
		}
	}
	ph := l.placeholders
	if len(ph) == 0 || top != ph[0] || len(l.base) != len(ph) || !slices.Equal(l.baseMarks, l.sk.marks) {
		return None, ErrSkim
	}
	items := slices.Clone(d.vs.Items(top))
	if len(items) < len(ph)-1 {
		return None, ErrSkim
	}
	for j := 1; j < len(ph); j++ {
		if items[j-1] != ph[j] {
			return None, ErrSkim
		}
		items[j-1] = l.base[j]
	}
	real := l.base[0]
	if err := d.vs.Append(real, d.compactor, items...); err != nil {
		return None, err
	}
	return d.vs.Freeze(real, d.compactor)
}

// Resolving reports whether the decoder is decoding an object before its
// skim's stop (see Skim.Decoder): a compactor that reads Stack learns
// nothing about that object there.
func (d *Decoder) Resolving() bool { return d.lazy != nil && d.lazy.l.depth > 0 }

// LazyResolved returns how many objects before the stop were decoded on
// demand (0 for a decoder that started at the start).
func (d *Decoder) LazyResolved() int {
	if d.lazy == nil {
		return 0
	}
	return d.lazy.l.resolved
}

// put is memoPut's for an index below the stop. A decoder of an object
// there stores an index again only to keep its first object (decoded
// before from the same bytes: an equal value), counting it as stored;
// the decoder past the stop storing over it first decodes what it
// replaces, so the memo counts as a decoder from the start's does.
func (s *lazyState) put(d *Decoder, i uint64) (skip bool, err error) {
	taken := d.memo.word(int(i)) != 0
	if s.sub {
		if taken {
			if i == uint64(d.memo.stored) {
				d.memo.stored++
			}
			return true, nil
		}
		return false, nil
	}
	if !taken {
		_, _, err = s.l.resolve(d, i)
	}
	return false, err
}

// resolve decodes the object stored at i, for the decoder d that refers
// to it.
func (l *lazyMemo) resolve(d *Decoder, i uint64) (Value, bool, error) {
	if i >= l.count || l.doneAll {
		return None, false, nil
	}
	sp := *l.sk.span.at(int(i))
	// Objects nested in each other and referred to innermost first are
	// decoded again inside each enclosing one: once that has cost as
	// many bytes as everything before the stop, decode that once.
	l.bytes += int64(sp.end) - int64(sp.start)
	if sp.end == 0 || l.depth >= maxLazyDepth || l.bytes > l.sk.Stop {
		if err := l.all(d); err != nil {
			return None, false, err
		}
		v, ok := d.memo.get(i)
		return v, ok, nil
	}
	sub, err := l.sub(d, int64(sp.start), int64(sp.end))
	if err != nil {
		return None, false, err
	}
	sub.memo.stored = int(l.sk.first(int(i)))
	l.depth++
	_, err = sub.decodeSpan()
	l.depth--
	l.done(d, sub)
	if err != nil {
		return None, false, err
	}
	l.resolved++
	v, ok := d.memo.get(i)
	if !ok {
		return None, false, d.errf("memo index %d was not stored by its object (malformed pickle)", i)
	}
	return v, true, nil
}

// all decodes everything before the stop, in order.
func (l *lazyMemo) all(d *Decoder) error {
	sub, err := l.sub(d, 0, l.sk.Stop)
	if err != nil {
		return err
	}
	sub.memo.stored = 0
	sub.lazy = &lazyState{l: &lazyMemo{count: l.count, doneAll: true}, sub: true}
	l.depth++
	err = sub.decodeAll()
	l.depth--
	l.done(d, sub)
	l.base, l.baseMarks = slices.Clone(sub.stack), slices.Clone(sub.marks)
	l.doneAll = err == nil
	return err
}

// sub returns a decoder of the input from start to end, sharing d's store,
// memo and list cache.
func (l *lazyMemo) sub(d *Decoder, start, end int64) (*Decoder, error) {
	for len(l.subs) <= l.depth {
		l.subs = append(l.subs, &Decoder{})
	}
	sub := l.subs[l.depth]
	*sub = Decoder{vs: l.vs, compactor: l.compactor, stack: sub.stack[:0], marks: sub.marks[:0],
		memo: d.memo, proto: d.proto, lists: d.lists, pending: d.pending,
		pendingKeyBytes: d.pendingKeyBytes, lazy: &lazyState{l: l, sub: true}, base: start}
	n := end - start
	switch {
	case n <= lazyBytesMax:
		data, err := l.read(start, end)
		if err != nil {
			return nil, d.errf("reading input: %v", err)
		}
		sub.buf, sub.end, sub.eof = data, len(data), true
	default:
		sub.r = io.NewSectionReader(l.src, start, n)
		sub.buf = make([]byte, 0, chunk)
	}
	if l.budget != nil {
		sub.budget = l.budget
		sub.nextCheck = start
	}
	return sub, nil
}

// done hands what the sub-decoder changed back to d.
func (l *lazyMemo) done(d, sub *Decoder) {
	d.memo.spill = sub.memo.spill
	d.lists, d.pending = sub.lists, sub.pending
	d.pendingKeyBytes = sub.pendingKeyBytes
}

// read returns the input from start to end: a slice of a cached window
// when one holds it.
func (l *lazyMemo) read(start, end int64) ([]byte, error) {
	w := start / lazyWindow * lazyWindow
	if end > w+lazyWindow || l.windows == nil {
		data := make([]byte, end-start)
		if _, err := l.src.ReadAt(data, start); err != nil {
			return nil, err
		}
		return data, nil
	}
	win, ok := l.windows[w]
	if !ok {
		win = make([]byte, lazyWindow)
		k, err := l.src.ReadAt(win, w)
		if err != nil && !(errors.Is(err, io.EOF) && int64(k) >= end-w) {
			return nil, err
		}
		win = win[:k]
		if len(l.order) >= lazyWindows {
			// A window dropped is never reused: a decoder may still read it.
			delete(l.windows, l.order[0])
			l.order = l.order[1:]
		}
		l.windows[w] = win
		l.order = append(l.order, w)
	}
	return win[start-w : end-w], nil
}

// decodeSpan decodes the one object its input holds and returns it, frozen.
func (d *Decoder) decodeSpan() (Value, error) {
	if err := d.decodeAll(); err != nil {
		return None, err
	}
	if len(d.stack) != 1 || len(d.marks) != 0 {
		return None, d.errf("a stored object's bytes left %d values on the stack (malformed pickle)", len(d.stack))
	}
	v := d.stack[0]
	d.stack = d.stack[:0]
	return d.freeze(v)
}

// decodeAll runs the opcodes of its input to its end.
func (d *Decoder) decodeAll() error {
	switch err := d.run(); err {
	case errEnd:
		return nil
	case errStop:
		return d.errf("STOP before the object's end (malformed pickle)")
	default:
		return err
	}
}
