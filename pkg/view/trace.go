package view

import (
	"encoding/binary"
	"math/bits"

	"github.com/memstat/memstat/pkg/snapshot"
)

// Trace is one device's trace kept compact for a server that holds it for
// hours: 12-16 bytes an entry where a snapshot.TraceEntry takes 40. The
// entries are varints in blocks of traceBlock, each block starting from
// zero: the action, the stack and the context, then the address and the
// time as differences from the entry before (an allocator's addresses and
// a trace's times are close to their neighbours), and the size. Reading
// an entry decodes its block up to it; a reader going forward decodes
// each entry once.
type Trace struct {
	n      int
	first  int64 // the first entry's TimeUS
	data   []byte
	blocks []int // offset of each block's first entry in data
}

const traceBlock = 256

// NewTrace encodes a trace. It sizes its buffer first, so that the
// buffer is allocated once at its final size.
func NewTrace(tr []snapshot.TraceEntry) *Trace {
	t := &Trace{n: len(tr), blocks: make([]int, 0, (len(tr)+traceBlock-1)/traceBlock)}
	if len(tr) > 0 {
		t.first = tr[0].TimeUS
	}
	size := 0
	var prev snapshot.TraceEntry
	for i := range tr {
		if i%traceBlock == 0 {
			prev = snapshot.TraceEntry{}
		}
		size += entryLen(&tr[i], &prev)
		prev = tr[i]
	}
	t.data = make([]byte, 0, size)
	for i := range tr {
		if i%traceBlock == 0 {
			t.blocks = append(t.blocks, len(t.data))
			prev = snapshot.TraceEntry{}
		}
		e := &tr[i]
		t.data = append(t.data, byte(e.Action))
		t.data = binary.AppendUvarint(t.data, uint64(e.Stack))
		t.data = binary.AppendUvarint(t.data, uint64(e.Context))
		t.data = binary.AppendVarint(t.data, int64(e.Addr-prev.Addr))
		t.data = binary.AppendVarint(t.data, e.TimeUS-prev.TimeUS)
		t.data = binary.AppendVarint(t.data, e.Size)
		prev = *e
	}
	return t
}

func entryLen(e, prev *snapshot.TraceEntry) int {
	return 1 + uvarintLen(uint64(e.Stack)) + uvarintLen(uint64(e.Context)) +
		varintLen(int64(e.Addr-prev.Addr)) + varintLen(e.TimeUS-prev.TimeUS) + varintLen(e.Size)
}

func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

func varintLen(x int64) int { return uvarintLen(uint64(x<<1) ^ uint64(x>>63)) }

// Len is the number of entries.
func (t *Trace) Len() int { return t.n }

// Bytes is the size of the encoding.
func (t *Trace) Bytes() int { return len(t.data) + 8*len(t.blocks) }

// Entries decodes the whole trace.
func (t *Trace) Entries() []snapshot.TraceEntry {
	out := make([]snapshot.TraceEntry, t.n)
	r := t.Reader()
	for i := range out {
		if i%traceBlock == 0 {
			r.e = snapshot.TraceEntry{}
		}
		r.decode()
		out[i] = r.e
	}
	return out
}

// Reader returns a reader of the trace's entries.
func (t *Trace) Reader() *TraceReader { return &TraceReader{t: t} }

// TraceReader reads entries in any order, each in time proportional to
// its distance from the block's start, or to the entry read before it
// when that is earlier in the same block: reading forward costs one
// entry's decoding each. A reader of a nil *Trace reads a plain slice.
type TraceReader struct {
	t     *Trace
	plain []snapshot.TraceEntry
	// next is the entry at off; e the entry before it (when next is
	// not a block's first).
	next int
	off  int
	e    snapshot.TraceEntry
}

// At returns entry i.
func (r *TraceReader) At(i int) snapshot.TraceEntry {
	if r.t == nil {
		return r.plain[i]
	}
	if i+1 == r.next {
		return r.e
	}
	if i < r.next || i/traceBlock != r.next/traceBlock {
		b := i / traceBlock
		r.next, r.off, r.e = b*traceBlock, r.t.blocks[b], snapshot.TraceEntry{}
	}
	for r.next <= i {
		if r.next%traceBlock == 0 {
			r.e = snapshot.TraceEntry{}
		}
		r.decode()
	}
	return r.e
}

// decode reads entry r.next into r.e.
func (r *TraceReader) decode() {
	d, off := r.t.data, r.off
	e := &r.e
	e.Action = snapshot.Action(d[off])
	var u uint64
	u, off = uvarint(d, off+1)
	e.Stack = snapshot.StackID(u)
	u, off = uvarint(d, off)
	e.Context = snapshot.ContextID(u)
	u, off = uvarint(d, off)
	e.Addr += uint64(unzigzag(u))
	u, off = uvarint(d, off)
	e.TimeUS += unzigzag(u)
	u, off = uvarint(d, off)
	e.Size = unzigzag(u)
	r.off = off
	r.next++
}

// uvarint reads the varint at off (this package's own encoding: every
// varint is whole) and returns the offset after it.
func uvarint(d []byte, off int) (uint64, int) {
	if b := d[off]; b < 0x80 {
		return uint64(b), off + 1
	}
	v, n := binary.Uvarint(d[off:])
	return v, off + n
}

func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }
