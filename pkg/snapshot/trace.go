package snapshot

import (
	"encoding/binary"
	"fmt"
	"iter"
	"math/bits"
	"slices"
)

// Trace is one device's allocator trace, oldest entry first, immutable
// once built and kept compact: about 12 bytes an entry where a
// TraceEntry takes 40 (a gigabyte snapshot holds some ten million
// entries, the largest thing a loaded snapshot holds).
//
// The entries are in blocks of traceBlock entries, each block starting
// from a zero entry. An entry is a 3-byte header (the action, then the
// byte length of each of the five other fields in 3 bits) and the
// fields in as many little-endian bytes as they need: the stack and the
// context, then the address and the time as differences from the entry
// before (an allocator's addresses and a trace's times are close to their
// neighbours, a repeated context or time takes no byte), and the size.
// Unlike varints, a field decodes without a loop: one unaligned 8-byte
// load and a mask, so a pass over ten million entries stays cheap (the
// replay makes some fifteen). The bytes live in chunks that grow to
// traceChunkMax and are never copied once written (no entry straddles
// two chunks, a block may; each chunk keeps 8 bytes past its last entry
// so that the 8-byte loads stay inside it), so building a trace never
// holds two copies of it.
//
// A Trace is safe for concurrent use; a Reader is not (give each goroutine
// its own). No method hands out storage the Trace keeps: every entry read
// is a copy. The zero Trace is empty.
type Trace struct {
	chunks [][]byte
	// blocks holds where each block of the store starts: chunk<<32 | offset.
	blocks []uint64
	// start is the store index of entry 0 (a view of a store shared by the
	// traces of one file, see view), n the number of entries.
	start, n int
	// counts holds how many entries of each action the trace has: a pass
	// that looks for one kind is skipped where there is none.
	counts *[256]int
}

const (
	traceBlockShift = 8
	traceBlock      = 1 << traceBlockShift
	// maxEntryLen is the longest encoding of an entry: the header, two
	// uint32 fields and three 64-bit ones; loadPad the bytes a chunk
	// keeps past its last entry.
	maxEntryLen   = 3 + 4 + 4 + 8 + 8 + 8
	loadPad       = 8
	traceChunkMin = 4 << 10
	traceChunkMax = 1 << 20
)

// TraceOf returns a trace of the given entries (tests, short traces).
func TraceOf(entries ...TraceEntry) *Trace {
	var b TraceBuilder
	for i := range entries {
		b.Append(entries[i])
	}
	return b.Build()
}

// Len is the number of entries.
func (t *Trace) Len() int {
	if t == nil {
		return 0
	}
	return t.n
}

// Bytes is the memory the trace's storage takes (shared by the views of
// one store, see view).
func (t *Trace) Bytes() int64 {
	if t == nil {
		return 0
	}
	n := int64(8 * cap(t.blocks))
	for _, c := range t.chunks {
		n += int64(cap(c))
	}
	return n
}

// view returns entries [i, i+n) of t as a trace sharing t's storage.
func (t *Trace) view(i, n int) *Trace {
	if i < 0 || n < 0 || i+n > t.n {
		panic(fmt.Sprintf("snapshot: trace view [%d:%d] of %d entries", i, i+n, t.n))
	}
	if i == 0 && n == t.n {
		return t
	}
	v := &Trace{chunks: t.chunks, blocks: t.blocks, start: t.start + i, n: n, counts: new([256]int)}
	for _, e := range v.All() {
		v.counts[e.Action]++
	}
	return v
}

// Count returns how many entries have action a.
func (t *Trace) Count(a Action) int {
	if t == nil || t.counts == nil {
		return 0
	}
	return t.counts[a]
}

// All returns the entries in order, each decoded once.
func (t *Trace) All() iter.Seq2[int, TraceEntry] { return t.From(0) }

// From returns the entries from i on, in order, each decoded once (a
// block at a time, into a buffer of the iteration's own).
func (t *Trace) From(i int) iter.Seq2[int, TraceEntry] {
	return func(yield func(int, TraceEntry) bool) {
		if t == nil || i >= t.n {
			return
		}
		i := max(i, 0)
		var d traceDecoder
		d.seek(t, t.start+i)
		buf := new([traceBlock]TraceEntry)
		for k := i; k < t.n; {
			m := d.fill(buf[:min(traceBlock-(d.g&(traceBlock-1)), t.n-k)])
			for j := range m {
				if !yield(k+j, buf[j]) {
					return
				}
			}
			k += m
		}
	}
}

// Entries decodes the whole trace into a new slice.
func (t *Trace) Entries() []TraceEntry {
	return t.Slice(0, t.Len(), nil)
}

// Slice decodes entries [i, j) appended to dst[:0] and returns it.
func (t *Trace) Slice(i, j int, dst []TraceEntry) []TraceEntry {
	dst = dst[:0]
	if i < 0 || j < i || j > t.Len() {
		panic(fmt.Sprintf("snapshot: trace slice [%d:%d] of %d entries", i, j, t.Len()))
	}
	if i == j {
		return dst
	}
	var d traceDecoder
	d.seek(t, t.start+i)
	dst = slices.Grow(dst, j-i)
	for k := i; k < j; {
		n := min(traceBlock-(d.g&(traceBlock-1)), j-k)
		m := len(dst)
		dst = dst[:m+n]
		d.fill(dst[m:])
		k += n
	}
	return dst
}

// At returns entry i, decoding its block up to it: for a few entries
// here and there. Loops use All, From or a Reader.
func (t *Trace) At(i int) TraceEntry {
	if uint(i) >= uint(t.Len()) {
		panic(fmt.Sprintf("snapshot: trace entry %d of %d", i, t.Len()))
	}
	var d traceDecoder
	d.seek(t, t.start+i)
	return d.next()
}

// First and Last return the first and the last entry (zero for an empty
// trace).
func (t *Trace) First() TraceEntry {
	if t.Len() == 0 {
		return TraceEntry{}
	}
	var d traceDecoder
	d.seek(t, t.start)
	return d.next()
}

// Last returns the last entry (zero for an empty trace).
func (t *Trace) Last() TraceEntry {
	if t.Len() == 0 {
		return TraceEntry{}
	}
	var d traceDecoder
	d.seek(t, t.start+t.n-1)
	return d.next()
}

// Reader returns a reader of the trace's entries.
func (t *Trace) Reader() *Reader { return &Reader{t: t, lo: -1} }

// Reader reads entries in any order: it keeps the block of the entry read
// last decoded, so reading forward or near the last entry costs a copy,
// and a jump to another block decodes that block (traceBlock entries).
// A Reader is for one goroutine.
type Reader struct {
	t *Trace
	// buf holds the decoded entries of the store from index lo on; nbuf
	// of them are valid.
	lo   int
	nbuf int
	buf  [traceBlock]TraceEntry
}

// Len is the number of entries of the trace.
func (r *Reader) Len() int { return r.t.Len() }

// At returns entry i.
func (r *Reader) At(i int) TraceEntry {
	if uint(i) >= uint(r.t.Len()) {
		panic(fmt.Sprintf("snapshot: trace entry %d of %d", i, r.t.Len()))
	}
	g := r.t.start + i
	if k := g - r.lo; uint(k) < uint(r.nbuf) {
		return r.buf[k]
	}
	r.load(g)
	return r.buf[g-r.lo]
}

// load decodes the block that holds store index g, clipped to the trace.
func (r *Reader) load(g int) {
	t := r.t
	b := g >> traceBlockShift
	lo := max(b<<traceBlockShift, t.start)
	hi := min((b+1)<<traceBlockShift, t.start+t.n)
	var d traceDecoder
	d.seek(t, lo)
	d.fill(r.buf[:hi-lo])
	r.lo, r.nbuf = lo, hi-lo
}

// Slice decodes entries [i, j) appended to dst[:0] and returns it, using
// (and updating) the reader's cached block.
func (r *Reader) Slice(i, j int, dst []TraceEntry) []TraceEntry {
	dst = dst[:0]
	if i < 0 || j < i || j > r.t.Len() {
		panic(fmt.Sprintf("snapshot: trace slice [%d:%d] of %d entries", i, j, r.t.Len()))
	}
	for i < j {
		g := r.t.start + i
		if k := g - r.lo; uint(k) >= uint(r.nbuf) {
			r.load(g)
		}
		k := g - r.lo
		n := min(r.nbuf-k, j-i)
		dst = append(dst, r.buf[k:k+n]...)
		i += n
	}
	return dst
}

// traceDecoder reads a store forward from one index.
type traceDecoder struct {
	chunks [][]byte
	c      int // chunk
	off    int // offset in chunks[c]
	g      int // store index of the next entry
	e      TraceEntry
}

// seek positions d at store index g: it decodes g's block up to g.
func (d *traceDecoder) seek(t *Trace, g int) {
	b := g >> traceBlockShift
	p := t.blocks[b]
	d.chunks, d.c, d.off, d.g = t.chunks, int(p>>32), int(uint32(p)), b<<traceBlockShift
	if n := g - d.g; n > 0 {
		var skip [traceBlock]TraceEntry
		d.fill(skip[:n])
	}
}

// next decodes the entry at d.g and moves past it.
func (d *traceDecoder) next() TraceEntry {
	var one [1]TraceEntry
	d.fill(one[:])
	return one[0]
}

// fill decodes len(out) entries from d.g on, which must lie in one block
// (the entry before the first is d.e), and returns how many. It is the
// one loop every read of a trace goes through, kept tight: the position
// and the entry in locals, each field one load and a mask.
func (d *traceDecoder) fill(out []TraceEntry) int {
	e := d.e
	if d.g&(traceBlock-1) == 0 {
		e = TraceEntry{}
	}
	c, off := d.chunks[d.c], d.off
	for k := range out {
		if off == len(c) {
			d.c++
			c, off = d.chunks[d.c], 0
		}
		h := binary.LittleEndian.Uint32(c[off : off+4 : off+4])
		off += 3
		e.Action = Action(h)
		n := fieldLen[h>>8&7]
		e.Stack = StackID(fieldAt(c, off, n))
		off += n
		n = fieldLen[h>>11&7]
		e.Context = ContextID(fieldAt(c, off, n))
		off += n
		n = fieldLen[h>>14&7]
		e.Addr += uint64(unzigzag(fieldAt(c, off, n)))
		off += n
		n = fieldLen[h>>17&7]
		e.TimeUS += unzigzag(fieldAt(c, off, n))
		off += n
		n = fieldLen[h>>20&7]
		e.Size = unzigzag(fieldAt(c, off, n))
		off += n
		out[k] = e
	}
	d.e, d.off, d.g = e, off, d.g+len(out)
	if off == len(c) && d.c+1 < len(d.chunks) {
		d.c, d.off = d.c+1, 0
	}
	return len(out)
}

// fieldLen is the byte length of each 3-bit length code: a value of 7
// significant bytes is written in 8.
var fieldLen = [8]int{0, 1, 2, 3, 4, 5, 6, 8}

var fieldMask = [9]uint64{0, 1<<8 - 1, 1<<16 - 1, 1<<24 - 1, 1<<32 - 1, 1<<40 - 1, 1<<48 - 1, 1<<56 - 1, ^uint64(0)}

// fieldAt reads the n-byte field at off (the chunk's capacity reaches 8
// bytes past it, see loadPad).
func fieldAt(c []byte, off, n int) uint64 {
	return binary.LittleEndian.Uint64(c[off:off+8:off+8]) & fieldMask[n]
}

// fieldCode is the length code of x and its byte length.
func fieldCode(x uint64) (code uint32, n int) {
	n = (bits.Len64(x) + 7) / 8
	if n >= 7 {
		return 7, 8
	}
	return uint32(n), n
}

func zigzag(x int64) uint64 { return uint64(x<<1) ^ uint64(x>>63) }

func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// TraceBuilder builds a Trace one entry at a time. The zero value is
// ready to use.
type TraceBuilder struct {
	t    Trace
	cur  []byte // the last chunk (t.chunks[last] is set on Build)
	prev TraceEntry
	// closed is the number of entries in the chunks before cur: never
	// written again, so readable on another goroutine (Closed).
	closed int
}

// Closed returns the entries in the chunks the builder has finished
// with (all but the one it appends to) as a trace that shares their
// storage: the builder never writes them again, so another goroutine
// may read the returned trace while this one appends (once it has the
// trace by a channel or a lock). It has no action counts (Count is 0).
// Trace.Extends says whether a built trace continues it.
func (b *TraceBuilder) Closed() *Trace {
	n := len(b.t.chunks) - 1
	if n <= 0 || b.closed == 0 {
		return &Trace{}
	}
	blocks := (b.closed + traceBlock - 1) >> traceBlockShift
	return &Trace{chunks: slices.Clone(b.t.chunks[:n]), blocks: b.t.blocks[:blocks:blocks], n: b.closed}
}

// ClosedLen is the number of entries Closed would return.
func (b *TraceBuilder) ClosedLen() int { return b.closed }

// Extends reports whether t's first p.Len() entries are p's: p is what
// TraceBuilder.Closed returned while t's entries were appended (the
// same storage, from the first entry on), t a trace built from it or a
// view of that from its first entry.
func (t *Trace) Extends(p *Trace) bool {
	if t == nil || p == nil || t.start != 0 || p.start != 0 || p.n > t.n || len(p.chunks) > len(t.chunks) {
		return false
	}
	for i, c := range p.chunks {
		if cap(c) == 0 || cap(t.chunks[i]) == 0 || &c[:1][0] != &t.chunks[i][:1][0] {
			return false
		}
	}
	return true
}

// Len is the number of entries appended.
func (b *TraceBuilder) Len() int { return b.t.n }

// Bytes is the memory the builder holds.
func (b *TraceBuilder) Bytes() int64 {
	n := int64(8*cap(b.t.blocks)) + int64(cap(b.cur))
	for _, c := range b.t.chunks {
		n += int64(cap(c))
	}
	if len(b.t.chunks) > 0 {
		n -= int64(cap(b.t.chunks[len(b.t.chunks)-1]))
	}
	return n
}

// Append adds an entry at the end.
func (b *TraceBuilder) Append(e TraceEntry) {
	if cap(b.cur)-len(b.cur) < maxEntryLen+loadPad {
		if len(b.t.chunks) > 0 {
			b.t.chunks[len(b.t.chunks)-1] = b.cur
			b.closed = b.t.n
		}
		size := min(traceChunkMin<<min(len(b.t.chunks), 16), traceChunkMax)
		b.cur = make([]byte, 0, size)
		b.t.chunks = append(b.t.chunks, b.cur)
	}
	if b.t.n&(traceBlock-1) == 0 {
		b.t.blocks = append(b.t.blocks, uint64(len(b.t.chunks)-1)<<32|uint64(len(b.cur)))
		b.prev = TraceEntry{}
	}
	fields := [5]uint64{uint64(e.Stack), uint64(e.Context), zigzag(int64(e.Addr - b.prev.Addr)), zigzag(e.TimeUS - b.prev.TimeUS), zigzag(e.Size)}
	// The capacity has room for the longest entry and 8 bytes more
	// (loadPad): each field is written as 8 bytes, and n of them kept.
	c := b.cur
	l := len(c)
	off := l + 3
	h := uint32(e.Action)
	for k, x := range fields {
		code, n := fieldCode(x)
		h |= code << (8 + 3*k)
		binary.LittleEndian.PutUint64(c[off:off+8:off+8], x)
		off += n
	}
	c = c[:off]
	c[l], c[l+1], c[l+2] = byte(h), byte(h>>8), byte(h>>16)
	if b.t.counts == nil {
		b.t.counts = new([256]int)
	}
	b.t.counts[e.Action]++
	b.cur = c
	b.prev = e
	b.t.n++
}

// Build returns the trace and resets the builder. The last chunk is cut
// to its length when that frees much, so nothing stays over-allocated.
func (b *TraceBuilder) Build() *Trace {
	t := b.t
	if len(t.chunks) > 0 {
		c := b.cur
		if cap(c)-len(c) > 4<<10 {
			c = append(make([]byte, 0, len(c)+loadPad), c...)
		}
		t.chunks[len(t.chunks)-1] = c
	}
	if cap(t.blocks)-len(t.blocks) > 64 {
		t.blocks = append([]uint64(nil), t.blocks...)
	}
	*b = TraceBuilder{}
	return &t
}
