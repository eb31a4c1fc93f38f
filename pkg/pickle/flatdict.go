package pickle

import (
	"encoding/binary"
	"math"
)

// FlatDictCompactor is an optional interface of a Compactor: it compacts a
// dict from its items (keys and values interleaved, as Values.Items gives
// them), with no container made for it. The decoder uses it for the dicts
// pickles write by the million as the items of a list (a snapshot's trace
// entries, blocks and frames):
//
//	MARK (EMPTY_DICT [MEMOIZE|BINPUT|LONG_BINPUT] MARK (key value)... SETITEMS)... APPENDS
//
// where every key and value is a small int, None, a bool, a float, a str
// (memoized or not), a memo reference, or a list of memo references. It
// decodes such dicts into a scratch array instead of containers, doing
// everything else the generic path does where it does it (memo stores,
// the lists among the values frozen at the dict's SETITEMS), and at the
// APPENDS offers each dict to CompactFlatDict where the generic path would
// offer its container to Compact, in the same order and with the decoder
// in the same state (see Stack; only while a list among a dict's values is
// offered to Compact, the dicts before it are not on the stack). Any other
// opcode, a memo reference to a dict still in the scratch array or bytes
// not yet buffered end it: the dicts so far become containers on the
// stack as the generic path would have left them, and the generic path
// goes on (and comes back at the next dict among the APPENDS' items). No
// container is made for the dicts it compacts, none is pushed, popped,
// frozen, recycled or read back (see BENCHMARKS.md for what that saves).
//
// CompactFlatDict must return exactly what Compact would return for a
// container holding items: the decoder makes a declined dict a container,
// frozen, and reports an error at the APPENDS, as it would Compact's.
type FlatDictCompactor interface {
	CompactFlatDict(vs *Values, items []Value) (r Value, ok bool, err error)
}

// SetFlatDicts turns the flat-dict path (see FlatDictCompactor) on or off;
// it is on when the compactor implements FlatDictCompactor. Tests compare
// the two.
func (d *Decoder) SetFlatDicts(on bool) {
	d.flat = nil
	if fc, ok := d.compactor.(FlatDictCompactor); ok && on {
		d.flat = fc
	}
}

// flatEntry is one item of a batch on the flat-dict path: a dict, its items
// d.flatItems[from:to] and its memo slot (-1: none), or a value.
type flatEntry struct {
	v        Value
	from, to int
	slot     int
	dict     bool
}

// flatNeed is the bytes the flat-dict path wants buffered before an opcode
// (the longest fixed-size one it reads, BINFLOAT or FRAME, is 9 bytes).
const flatNeed = 16

// maxFlatString is the longest str the flat-dict path decodes itself.
const maxFlatString = 64 << 10

// inAppends reports whether the decoder is among the items of an APPENDS
// into an open list, with a memo without gaps: where flatBatch may start.
func (d *Decoder) inAppends() bool {
	n := len(d.marks)
	if n == 0 {
		return false
	}
	m := d.marks[n-1]
	if m < 1 || m > len(d.stack) {
		return false
	}
	t := d.stack[m-1]
	return t.Kind == KindList && d.vs.conts[t.N].flags&fReplaced == 0 && d.memo.stored == d.memo.len
}

// flatBatch decodes the dicts from the EMPTY_DICT at d.pos on the
// flat-dict path (see FlatDictCompactor) up to and including the APPENDS,
// or up to where the generic path must go on. It returns false when it
// consumed nothing.
func (d *Decoder) flatBatch() (bool, error) {
	vs := d.vs
	start := d.base + int64(d.pos)
	tape, items, refs := d.flatTape[:0], d.flatItems[:0], d.flatList[:0]
	defer func() { d.flatTape, d.flatItems, d.flatList = tape[:0], items[:0], refs[:0] }()
	p := d.pos
	buf := d.buf[:d.end]
	// ensure makes n bytes buffered at p if the input has them.
	ensure := func(n int) bool {
		if len(buf)-p >= n {
			return true
		}
		d.pos = p
		_ = d.fill(n) // an error comes again where the generic path reads
		p, buf = d.pos, d.buf[:d.end]
		return len(buf)-p >= n
	}
	// The dict being decoded, and the list of memo references being
	// decoded among its values.
	var (
		inDict, dictMarked bool
		slot, from         int
		list               Value
		inList, listMarked bool
	)
	// bail leaves the rest to the generic path: the stack gets the dicts
	// so far as containers, the dict and list being decoded and their
	// items, as the generic path would have left them. Their containers'
	// references were counted as they were decoded.
	bail := func() (bool, error) {
		d.pos = p
		for _, e := range tape {
			if e.dict {
				d.push(d.dictOf(items[e.from:e.to], e.slot))
			} else {
				d.stack = append(d.stack, e.v)
			}
		}
		if inDict {
			d.push(d.dictOf(nil, slot))
			if dictMarked {
				d.marks = append(d.marks, len(d.stack))
				d.stack = append(d.stack, items[from:]...)
			}
		}
		if inList && listMarked {
			d.marks = append(d.marks, len(d.stack))
			d.stack = append(d.stack, refs...)
		}
		return d.base+int64(p) != start, nil
	}
	// get reads the memo reference at p: the value (its container's
	// reference counted, as a push counts it) and the opcode's length, or
	// 0 when the index was never stored (or is a dict being decoded): the
	// generic path says what is wrong.
	get := func() (Value, int, error) {
		i, n := uint64(buf[p+1]), 2
		if buf[p] == opLongBinGet {
			i, n = uint64(binary.LittleEndian.Uint32(buf[p+1:p+5])), 5
		}
		v, ok := d.memo.get(i)
		if !ok && d.lazy != nil {
			// An object before a skim's stop, decoded here as memoGet
			// decodes it (lazy.go).
			d.opStart, d.op = d.base+int64(p), buf[p]
			var err error
			if v, ok, err = d.lazy.l.resolve(d, i); err != nil {
				return None, 0, err
			}
		}
		if !ok {
			return None, 0, nil
		}
		if v = vs.Resolve(v); v.IsContainer() {
			vs.conts[v.N].refs++
		}
		return v, n, nil
	}
	// store decodes a memo store at p of v, which the generic path would
	// memoize: MEMOIZE, or BINPUT/LONG_BINPUT to the next index. It
	// returns false for a store it leaves to the generic path.
	store := func(v Value) (bool, error) {
		var i int
		switch buf[p] {
		case opMemoize:
			i = d.memo.len
			p++
		case opBinPut:
			i = int(buf[p+1])
			p += 2
		case opLongBinPut:
			i = int(binary.LittleEndian.Uint32(buf[p+1 : p+5]))
			p += 5
		default:
			return true, nil
		}
		if i != d.memo.len || !d.memo.storable(v) {
			p = d.pos // not consumed; see below
			return false, nil
		}
		return true, d.memoPut(uint64(i), v)
	}
	for {
		if !ensure(flatNeed) && !flatFits(buf[p:]) {
			return bail()
		}
		op := buf[p]
		if op == opFrame {
			p += 9
			continue
		}
		d.pos = p
		if d.budget != nil && d.base+int64(p) >= d.nextCheck {
			if err := d.checkBudget(); err != nil {
				return true, err
			}
		}
		if inList {
			// Items of a list of memo references: MARK ref... APPENDS, or
			// ref APPEND; anything else ends an empty list.
			switch {
			case op == opMark && !listMarked && len(refs) == 0:
				listMarked = true
				p++
			case op == opBinGet || op == opLongBinGet:
				if !listMarked {
					// ref APPEND, or an empty list and a key.
					q := p + 2
					if op == opLongBinGet {
						q = p + 5
					}
					if buf[q] != opAppend {
						inList = false
						continue
					}
				}
				v, n, err := get()
				if err != nil {
					return true, err
				}
				if n == 0 {
					return bail()
				}
				refs = append(refs, v)
				p += n
				if !listMarked {
					d.opStart, d.op = d.base+int64(p), opAppend
					p++
					v, err := d.freeze(v)
					if err != nil {
						return true, err
					}
					if err := d.appendTo(list.N, v); err != nil {
						return true, err
					}
					inList, refs = false, refs[:0]
				}
			case op == opAppends && listMarked && len(refs) > 0:
				d.opStart, d.op = d.base+int64(p), opAppends
				p++
				if err := d.freezeAll(refs); err != nil {
					return true, err
				}
				if err := d.appendTo(list.N, refs...); err != nil {
					return true, err
				}
				inList, refs = false, refs[:0]
			case listMarked:
				return bail()
			default:
				inList = false // an empty list
			}
			continue
		}
		if !inDict {
			// Between the batch's items.
			switch op {
			case opAppends:
				d.opStart, d.op = d.base+int64(p), opAppends
				p++
				d.pos = p
				return true, d.flatAppends(tape, items)
			case opBinGet, opLongBinGet:
				v, n, err := get()
				if err != nil {
					return true, err
				}
				if n == 0 {
					return bail()
				}
				tape = append(tape, flatEntry{v: v})
				p += n
			case opEmptyDict:
				inDict, dictMarked, slot = true, false, -1
				p++
				// The dict's memo index, if the next, is held for it: its
				// items' indices come after it.
				i, n := -1, 0
				switch buf[p] {
				case opMemoize:
					i, n = d.memo.len, 1
				case opBinPut:
					i, n = int(buf[p+1]), 2
				case opLongBinPut:
					i, n = int(binary.LittleEndian.Uint32(buf[p+1:p+5])), 5
				}
				if n > 0 {
					if i != d.memo.len || len(d.memo.spill) >= memoSpillMax {
						return bail()
					}
					slot = i
					d.memo.reserve(i)
					p += n
				}
			default:
				return bail()
			}
			continue
		}
		if !dictMarked {
			if op != opMark {
				return bail()
			}
			dictMarked, from = true, len(items)
			p++
			continue
		}
		// A key or value, or the SETITEMS that ends the dict.
		switch op {
		case opSetItems:
			if (len(items)-from)%2 != 0 {
				return bail()
			}
			d.opStart, d.op = d.base+int64(p), opSetItems
			p++
			if err := d.freezeAll(items[from:]); err != nil {
				return true, err
			}
			tape = append(tape, flatEntry{dict: true, from: from, to: len(items), slot: slot})
			inDict = false
		case opNone:
			items = append(items, None)
			p++
		case opNewTrue, opNewFalse:
			items = append(items, Bool(op == opNewTrue))
			p++
		case opBinInt1:
			items = append(items, Int(int64(buf[p+1])))
			p += 2
		case opBinInt2:
			items = append(items, Int(int64(binary.LittleEndian.Uint16(buf[p+1:p+3]))))
			p += 3
		case opBinInt:
			items = append(items, Int(int64(int32(binary.LittleEndian.Uint32(buf[p+1:p+5])))))
			p += 5
		case opBinFloat:
			items = append(items, Float(math.Float64frombits(binary.BigEndian.Uint64(buf[p+1:p+9]))))
			p += 9
		case opLong1:
			n := int(buf[p+1])
			if n > 8 {
				return bail()
			}
			var u uint64
			if len(buf)-p >= 10 {
				// One load of the 8 bytes after the length (a snapshot's
				// addresses and times, twice an entry), the int's n of
				// them kept.
				// (n = 8 keeps all: a shift by 64 is 0.)
				u = binary.LittleEndian.Uint64(buf[p+2:p+10]) & (1<<(8*uint(n)) - 1)
			} else {
				for i := n + 1; i >= 2; i-- {
					u = u<<8 | uint64(buf[p+i])
				}
			}
			if n > 0 && n < 8 && buf[p+n+1]&0x80 != 0 {
				u |= ^uint64(0) << (8 * uint(n)) // sign-extend
			}
			items = append(items, Int(int64(u)))
			p += n + 2
		case opShortBinUnicode, opBinUnicode:
			hdr, n := 2, int(buf[p+1])
			if op == opBinUnicode {
				hdr, n = 5, int(binary.LittleEndian.Uint32(buf[p+1:p+5]))
			}
			if n > maxFlatString || !ensure(hdr+n+flatNeed) {
				return bail()
			}
			v := vs.StrBytes(buf[p+hdr : p+hdr+n])
			p += hdr + n
			d.pos = p
			if ok, err := store(v); err != nil {
				return true, err
			} else if !ok {
				// The generic path memoizes the str it pushes.
				items = append(items, v)
				return bail()
			}
			items = append(items, v)
		case opBinGet, opLongBinGet:
			// A key, or a str or record value: most of a dict's opcodes,
			// read here without get's call.
			i, n := int(buf[p+1]), 2
			if op == opLongBinGet {
				i, n = int(binary.LittleEndian.Uint32(buf[p+1:p+5])), 5
			}
			if v, ok := d.memo.plain(i); ok {
				items = append(items, v)
				p += n
				continue
			}
			v, n, err := get()
			if err != nil {
				return true, err
			}
			if n == 0 {
				return bail()
			}
			items = append(items, v)
			p += n
		case opEmptyList:
			ensure(4096) // so that a cached list is seen whole
			v, n := d.openList(buf[p:])
			p += n
			if n > 1 {
				items = append(items, v) // a cached record, memoized
				continue
			}
			vs.conts[v.N].refs++ // the stack slot it takes
			items = append(items, v)
			list, inList, listMarked, refs = v, true, false, refs[:0]
			d.pos = p
			if ok, err := store(v); err != nil {
				return true, err
			} else if !ok {
				inList = false // nothing of it is on the stack above it
				return bail()
			}
		default:
			return bail()
		}
	}
}

// flatFits reports whether the opcode at buf[0], and what flatBatch reads
// after it, lie in buf: near the input's end, where fewer than flatNeed
// bytes are left.
func flatFits(buf []byte) bool {
	if len(buf) == 0 {
		return false
	}
	need := 0
	switch buf[0] {
	case opAppends, opSetItems, opNone, opNewTrue, opNewFalse, opMark:
		need = 1
	case opBinInt1:
		need = 2
	case opBinGet, opBinInt2:
		need = 3 // a reference: and the opcode after it
	case opBinInt:
		need = 5
	case opLongBinGet:
		need = 6
	case opBinFloat:
		need = 9
	case opLong1:
		if len(buf) < 2 {
			return false
		}
		need = 2 + int(buf[1])
	default:
		return false
	}
	return len(buf) >= need
}

// dictOf makes a dict container of items, memoized at slot unless it is
// -1, as the generic path would have made it.
func (d *Decoder) dictOf(items []Value, slot int) Value {
	c := d.vs.NewContainer(KindDict)
	_ = d.vs.appendItems(c.N, items...) // a batch holds far fewer than 2^32
	if slot >= 0 {
		d.vs.conts[c.N].memo = uint32(slot) + 1
		d.memo.fillReserved(slot, c)
	}
	return c
}

// flatAppends is the APPENDS of a batch: the items above the last MARK
// (decoded by the generic path before the batch) and then the batch's,
// frozen in order, the batch's dicts offered to CompactFlatDict, and all
// appended to the list, as step's APPENDS does (d.opStart is its offset).
func (d *Decoder) flatAppends(tape []flatEntry, items []Value) error {
	vs := d.vs
	prefix, err := d.popMark()
	if err != nil {
		return err
	}
	out := append(d.flatOut[:0], prefix...)
	defer func() { d.flatOut = out[:0] }()
	t, err := d.top()
	if err != nil {
		return err
	}
	if err := d.target(*t, KindList); err != nil {
		return err
	}
	if err := d.freezeAll(out); err != nil {
		return err
	}
	for _, e := range tape {
		if !e.dict {
			v, err := d.freeze(e.v)
			if err != nil {
				return err
			}
			out = append(out, v)
			continue
		}
		r, ok, err := d.flat.CompactFlatDict(vs, items[e.from:e.to])
		if err != nil {
			return &Error{Offset: d.opStart, Op: opName(d.op), Msg: err.Error()}
		}
		switch {
		case !ok:
			r = d.dictOf(items[e.from:e.to], e.slot)
			vs.conts[r.N].flags |= fFrozen
		case e.slot >= 0 && d.memo.storable(r):
			d.memo.fillReserved(e.slot, r)
		case e.slot >= 0:
			// The memo keeps the container, which resolves to the
			// record, as freeze leaves it.
			c := d.dictOf(items[e.from:e.to], e.slot)
			vs.replace(c.N, r)
			vs.conts[c.N].flags |= fFrozen | fMultiMemo
		}
		out = append(out, r)
	}
	return d.appendTo(t.N, out...)
}
