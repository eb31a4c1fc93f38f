// Package pickle is memstat's own Python pickle codec.
//
// The decoder reads protocols 0-5 but only their plain-data opcodes: it
// refuses every opcode that names or builds a Python object (GLOBAL,
// STACK_GLOBAL, REDUCE, BUILD, NEWOBJ, INST, OBJ, PERSID, EXT*), never trusts
// a length, memo index or count before the bytes exist, and keeps its memory
// proportional to the input. Decoded values live in a Values store: 16-byte
// pointer-free words, one arena for container items and an interned string
// table, so that the garbage collector has almost nothing to scan and a memo
// reference shares, never copies.
//
// A Compactor hook sees every container when its parent takes it (for the
// pickles CPython and PyTorch write, the moment it is complete) and may
// replace it by a compact record of its own, which is how pkg/snapshot turns
// frame dicts, stacks and trace entries into typed structs while decoding.
//
// The encoder writes protocol 4 with only the opcodes PyTorch's web viewer
// reads.
package pickle

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"slices"
	"unsafe"
)

// Kind is the type of a decoded value.
type Kind uint8

// Value kinds. KindRecord is a value a Compactor made; its meaning belongs
// to the compactor.
const (
	KindNone Kind = iota
	KindBool
	KindInt
	KindBigInt
	KindFloat
	KindString
	KindBytes
	KindList
	KindTuple
	KindDict
	KindSet
	KindRecord
	kindMark // the MARK sentinel on the decoder stack
)

var kindNames = [...]string{"None", "bool", "int", "int", "float", "str", "bytes", "list", "tuple", "dict", "set", "record", "mark"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "?"
}

// Value is one decoded value: a kind and a 64-bit payload (the integer, the
// float's bits, a string id, a container id, or a record's own payload).
// It holds no pointers.
type Value struct {
	Kind Kind
	// Tag is free for records (a compactor's record type); 0 otherwise.
	Tag uint8
	N   uint64
}

// None is the Python None.
var None = Value{Kind: KindNone}

// Int returns an int value.
func Int(i int64) Value { return Value{Kind: KindInt, N: uint64(i)} }

// Bool returns a bool value.
func Bool(b bool) Value {
	if b {
		return Value{Kind: KindBool, N: 1}
	}
	return Value{Kind: KindBool}
}

// Float returns a float value.
func Float(f float64) Value { return Value{Kind: KindFloat, N: math.Float64bits(f)} }

// Record returns a compactor record value.
func Record(tag uint8, n uint64) Value { return Value{Kind: KindRecord, Tag: tag, N: n} }

// IsContainer reports whether v refers to a list, tuple, dict or set.
func (v Value) IsContainer() bool {
	return v.Kind == KindList || v.Kind == KindTuple || v.Kind == KindDict || v.Kind == KindSet
}

// AsInt returns the value as an int64: ints and bools; ok is false for
// anything else or an integer that does not fit.
func (v Value) AsInt() (int64, bool) {
	switch v.Kind {
	case KindInt, KindBool:
		return int64(v.N), true
	}
	return 0, false
}

// AsFloat returns ints and floats as a float64.
func (v Value) AsFloat() (float64, bool) {
	switch v.Kind {
	case KindFloat:
		return math.Float64frombits(v.N), true
	case KindInt, KindBool:
		return float64(int64(v.N)), true
	}
	return 0, false
}

// AsBool returns bools (and ints, as Python truth).
func (v Value) AsBool() (bool, bool) {
	switch v.Kind {
	case KindBool, KindInt:
		return v.N != 0, true
	}
	return false, false
}

// container is a list, tuple, dict or set: 32 bytes, whatever its state.
//
// An open container's items sit in the arena at items[a:a+n] (dicts store
// key, value pairs, so n is even) with room for cap items. A list whose
// items are all records of one tag with consecutive payloads (a device's
// trace, a segment's blocks: the records a compactor makes in file order)
// is kept as a run instead: a is the first record's payload and nothing
// is stored in the arena. A container a compactor replaced holds its
// record in a, tag and akind.
//
// refs and memo belong to the decoder: how many stack slots hold the
// container, and the memo slot (plus one) that holds it. A replaced
// container that neither the stack nor the memo holds is recycled, so
// that the containers of a snapshot's millions of compacted dicts and
// lists cost a few slots, not 32 bytes each.
type container struct {
	a     uint64
	n     uint32
	cap   uint32
	refs  uint32
	memo  uint32
	kind  Kind
	flags uint8
	tag   uint8
	akind Kind
}

const (
	fFrozen    uint8 = 1 << iota // offered to the compactor already
	fReplaced                    // a compactor made it a record (a, tag, akind)
	fRun                         // a list stored as a run of records
	fMultiMemo                   // memoized more than once: never recycled
)

// maxItems bounds the items of one container (n is 32 bits): far more
// than any input the memory bound lets through holds.
const maxItems = 1<<32 - 1

// errTooManyItems is returned for a container past maxItems.
var errTooManyItems = errors.New("a container holds more than 4294967295 items")

func (c *container) alias() Value { return Value{Kind: c.akind, Tag: c.tag, N: c.a} }

// Values owns every decoded value: strings, big integers and containers.
type Values struct {
	strs   []string
	isByte []bool // parallel to strs: true for bytes objects
	strIdx map[string]uint32
	bytIdx map[string]uint32
	bigs   []*big.Int
	conts  []container
	free   []uint32 // recycled container ids
	arena  []Value
	// While batch is set, replace collects the arena rooms it frees in
	// rooms instead of giving them back one by one; see endBatch.
	batch bool
	rooms []room
	// textBytes and bigWords count what strs and bigs hold, for
	// Footprint.
	textBytes int64
	bigWords  int64
	// strCache holds, at a hash of a text's length and first and last 8
	// bytes, the id of a str interned with that hash, plus one (0: none),
	// made at the first such str: a file whose frames are written out for
	// every entry interns the same few thousand names and paths millions
	// of times, and a look here and one comparison cost less than the
	// map's hash of the whole text and its probe.
	strCache *[1 << strCacheBits]uint32
}

// strCacheBits sizes Values.strCache (16 KiB); strCacheMax is the longest
// text it holds, so that a miss costs at most a comparison that short.
const (
	strCacheBits = 12
	strCacheMin  = 8
	strCacheMax  = 256
)

// strCacheSlot is the slot of strCache for a text of strCacheMin to
// strCacheMax bytes.
func strCacheSlot(b []byte) uint32 {
	x := binary.LittleEndian.Uint64(b) ^ bits.RotateLeft64(binary.LittleEndian.Uint64(b[len(b)-8:]), 29) ^ uint64(len(b))
	return uint32(x * 0x9e3779b97f4a7c15 >> (64 - strCacheBits))
}

// room is a span of arena words.
type room struct{ off, n uint64 }

// NewValues returns an empty store. String id 0 is the empty string.
func NewValues() *Values {
	v := &Values{strIdx: make(map[string]uint32), bytIdx: make(map[string]uint32)}
	v.strs = append(v.strs, "")
	v.isByte = append(v.isByte, false)
	v.strIdx[""] = 0
	return v
}

// Str interns s and returns it as a str value.
func (vs *Values) Str(s string) Value {
	return Value{Kind: KindString, N: uint64(vs.intern(s, false))}
}

// StrBytes interns the text in b (copying it only if it is new).
func (vs *Values) StrBytes(b []byte) Value {
	if len(b) < strCacheMin || len(b) > strCacheMax {
		if id, ok := vs.strIdx[string(b)]; ok {
			return Value{Kind: KindString, N: uint64(id)}
		}
		return Value{Kind: KindString, N: uint64(vs.intern(string(b), false))}
	}
	slot := strCacheSlot(b)
	if c := vs.strCache; c != nil {
		if id := c[slot]; id != 0 && vs.strs[id-1] == string(b) {
			return Value{Kind: KindString, N: uint64(id - 1)}
		}
	} else {
		vs.strCache = new([1 << strCacheBits]uint32)
	}
	id, ok := vs.strIdx[string(b)]
	if !ok {
		id = vs.intern(string(b), false)
	}
	vs.strCache[slot] = id + 1
	return Value{Kind: KindString, N: uint64(id)}
}

func (vs *Values) bytesValue(b []byte) Value {
	if id, ok := vs.bytIdx[string(b)]; ok {
		return Value{Kind: KindBytes, N: uint64(id)}
	}
	return Value{Kind: KindBytes, N: uint64(vs.intern(string(b), true))}
}

func (vs *Values) intern(s string, isBytes bool) uint32 {
	idx := vs.strIdx
	if isBytes {
		idx = vs.bytIdx
	}
	if id, ok := idx[s]; ok {
		return id
	}
	id := uint32(len(vs.strs))
	vs.textBytes += int64(len(s))
	vs.strs = append(vs.strs, s)
	vs.isByte = append(vs.isByte, isBytes)
	idx[s] = id
	return id
}

// StrID returns the id under which s is interned, if it is.
func (vs *Values) StrID(s string) (uint32, bool) {
	id, ok := vs.strIdx[s]
	return id, ok
}

// Text returns the text of a str or bytes value ("" for anything else).
func (vs *Values) Text(v Value) string {
	if (v.Kind == KindString || v.Kind == KindBytes) && v.N < uint64(len(vs.strs)) {
		return vs.strs[v.N]
	}
	return ""
}

// BigInt returns the value of an int too large for int64.
func (vs *Values) BigInt(v Value) *big.Int {
	if v.Kind == KindBigInt && v.N < uint64(len(vs.bigs)) {
		return new(big.Int).Set(vs.bigs[v.N])
	}
	if v.Kind == KindInt || v.Kind == KindBool {
		return big.NewInt(int64(v.N))
	}
	return nil
}

// Uint64 returns an integer value in [0, 2^64) as a uint64: addresses and
// stream handles are unsigned pointers that may not fit an int64.
func (vs *Values) Uint64(v Value) (uint64, bool) {
	switch v.Kind {
	case KindInt, KindBool:
		if int64(v.N) < 0 {
			return 0, false
		}
		return v.N, true
	case KindBigInt:
		b := vs.bigs[v.N]
		if b.Sign() >= 0 && b.IsUint64() {
			return b.Uint64(), true
		}
	}
	return 0, false
}

// BigIntValue returns an int value for b (stored out of line when it does
// not fit an int64).
func (vs *Values) BigIntValue(b *big.Int) Value { return vs.bigValue(b) }

func (vs *Values) bigValue(b *big.Int) Value {
	if b.IsInt64() {
		return Int(b.Int64())
	}
	vs.bigs = append(vs.bigs, b)
	vs.bigWords += int64(len(b.Bits()))
	return Value{Kind: KindBigInt, N: uint64(len(vs.bigs) - 1)}
}

// Footprint estimates the bytes the store holds: its slices at their
// capacity, the interned text with its index entries, the big integers.
// It is what a decoder's budget counts (see Decoder.SetBudget); it costs a
// few loads, not a walk.
func (vs *Values) Footprint() int64 {
	const (
		mapEntry = 48                // a Go map's key, value and overhead, roughly
		strEntry = 16 + 1 + mapEntry // strs, isByte, strIdx or bytIdx
	)
	n := int64(cap(vs.conts))*int64(unsafe.Sizeof(container{})) +
		int64(cap(vs.arena))*int64(unsafe.Sizeof(Value{})) +
		int64(cap(vs.free))*4 + int64(cap(vs.rooms))*16 +
		int64(len(vs.strs))*strEntry + vs.textBytes +
		int64(cap(vs.bigs))*8 + int64(len(vs.bigs))*32 + vs.bigWords*8
	if vs.strCache != nil {
		n += int64(unsafe.Sizeof(*vs.strCache))
	}
	return n
}

// NewContainer makes an empty list, tuple, dict or set.
func (vs *Values) NewContainer(k Kind) Value {
	if n := len(vs.free); n > 0 {
		id := vs.free[n-1]
		vs.free = vs.free[:n-1]
		vs.conts[id] = container{kind: k, a: uint64(len(vs.arena))}
		return Value{Kind: k, N: uint64(id)}
	}
	vs.conts = append(vs.conts, container{kind: k, a: uint64(len(vs.arena))})
	return Value{Kind: k, N: uint64(len(vs.conts) - 1)}
}

// Resolve follows a container a compactor replaced to its record.
func (vs *Values) Resolve(v Value) Value {
	if v.IsContainer() && v.N < uint64(len(vs.conts)) {
		if c := &vs.conts[v.N]; c.flags&fReplaced != 0 {
			return c.alias()
		}
	}
	return v
}

// Len returns the number of items of a list, tuple or set, or the number of
// pairs of a dict.
func (vs *Values) Len(v Value) int {
	if !v.IsContainer() || v.N >= uint64(len(vs.conts)) {
		return 0
	}
	c := &vs.conts[v.N]
	if c.flags&fReplaced != 0 {
		return 0
	}
	if c.kind == KindDict {
		return int(c.n / 2)
	}
	return int(c.n)
}

// Items returns the items of a list, tuple or set (for a dict, keys and
// values interleaved). The slice aliases the store: read it, do not keep it
// across further decoding. A run of records (see RecordRun) is spelled out
// in a new slice.
func (vs *Values) Items(v Value) []Value {
	if !v.IsContainer() || v.N >= uint64(len(vs.conts)) {
		return nil
	}
	c := &vs.conts[v.N]
	switch {
	case c.flags&fReplaced != 0:
		return nil
	case c.flags&fRun != 0:
		items := make([]Value, c.n)
		for i := range items {
			items[i] = Record(c.tag, c.a+uint64(i))
		}
		return items
	}
	return vs.arena[c.a : c.a+uint64(c.n)]
}

// RecordRun reports whether v is a list of n records of one tag whose
// payloads are first, first+1, ..., first+n-1, stored as that run (no item
// is kept in the arena). Readers of long lists of records use it instead of
// Items.
func (vs *Values) RecordRun(v Value) (tag uint8, first uint64, n int, ok bool) {
	if v.Kind != KindList || v.N >= uint64(len(vs.conts)) {
		return 0, 0, 0, false
	}
	c := &vs.conts[v.N]
	if c.flags&(fRun|fReplaced) != fRun {
		return 0, 0, 0, false
	}
	return c.tag, c.a, int(c.n), true
}

// Get looks a str key up in a dict (linear: snapshot dicts are small).
func (vs *Values) Get(dict Value, key string) (Value, bool) {
	id, ok := vs.strIdx[key]
	if !ok || dict.Kind != KindDict {
		return None, false
	}
	items := vs.Items(dict)
	for i := 0; i+1 < len(items); i += 2 {
		if k := items[i]; k.Kind == KindString && k.N == uint64(id) {
			return items[i+1], true
		}
	}
	return None, false
}

// isRunOf reports whether items are records of tag with payloads next,
// next+1, ...
func isRunOf(items []Value, tag uint8, next uint64) bool {
	for i, it := range items {
		if it.Kind != KindRecord || it.Tag != tag || it.N != next+uint64(i) {
			return false
		}
	}
	return true
}

// appendItems appends items to a container, growing its room in the arena.
// A container that is not at the arena's end moves there with twice the
// room, so interleaved appends to many containers cost amortized linear time
// and space. A list that has only ever received consecutive records stays
// a run and takes no arena room.
func (vs *Values) appendItems(id uint64, items ...Value) error {
	if len(items) == 0 {
		return nil
	}
	c := &vs.conts[id]
	if uint64(c.n)+uint64(len(items)) > maxItems {
		return errTooManyItems
	}
	if c.kind == KindList {
		first := items[0]
		switch {
		case c.n == 0 && c.cap == 0 && first.Kind == KindRecord && isRunOf(items[1:], first.Tag, first.N+1):
			c.flags |= fRun
			c.a, c.tag, c.n = first.N, first.Tag, uint32(len(items))
			return nil
		case c.flags&fRun != 0 && isRunOf(items, c.tag, c.a+uint64(c.n)):
			c.n += uint32(len(items))
			return nil
		case c.flags&fRun != 0:
			vs.spellOut(c)
		}
	}
	if c.n+uint32(len(items)) > c.cap {
		need := uint64(c.n) + uint64(len(items))
		if c.a+uint64(c.cap) == uint64(len(vs.arena)) {
			// At the end: grow in place.
			vs.arena = append(vs.arena, make([]Value, need-uint64(c.cap))...)
			c.cap = uint32(need)
		} else {
			newCap := min(2*need, maxItems)
			off := uint64(len(vs.arena))
			vs.arena = append(vs.arena, vs.arena[c.a:c.a+uint64(c.n)]...)
			vs.arena = append(vs.arena, make([]Value, newCap-uint64(c.n))...)
			c.a, c.cap = off, uint32(newCap)
		}
	}
	copy(vs.arena[c.a+uint64(c.n):], items)
	c.n += uint32(len(items))
	return nil
}

// spellOut turns a run into items at the arena's end, with twice the room.
func (vs *Values) spellOut(c *container) {
	off := uint64(len(vs.arena))
	for i := range uint64(c.n) {
		vs.arena = append(vs.arena, Record(c.tag, c.a+i))
	}
	newCap := min(2*uint64(c.n), maxItems)
	vs.arena = append(vs.arena, make([]Value, newCap-uint64(c.n))...)
	c.a, c.cap, c.tag = off, uint32(newCap), 0
	c.flags &^= fRun
}

// replace makes a container an alias of a record and gives its arena room
// back when it is the last thing in the arena (the usual case: pickles are
// written depth first).
func (vs *Values) replace(id uint64, r Value) {
	c := &vs.conts[id]
	if c.flags&fRun == 0 && c.cap > 0 {
		switch {
		case vs.batch:
			vs.rooms = append(vs.rooms, room{c.a, uint64(c.cap)})
		case c.a+uint64(c.cap) == uint64(len(vs.arena)):
			vs.arena = vs.arena[:c.a]
		}
	}
	c.flags = c.flags&^fRun | fReplaced
	c.a, c.tag, c.akind, c.n, c.cap = r.N, r.Tag, r.Kind, 0, 0
}

// beginBatch starts freezing the items of one opcode (APPENDS, SETITEMS,
// LIST, ...). They are frozen first to last, so that a compactor sees
// them, and numbers its records, in file order: the entries of a trace
// then form a run (see RecordRun). Their arena rooms, which lie in the
// same order at the arena's end, are given back together by endBatch.
func (vs *Values) beginBatch() {
	vs.batch = true
	vs.rooms = vs.rooms[:0]
}

// endBatch gives back the rooms the batch freed, last first, as far as
// they reach the arena's end.
func (vs *Values) endBatch() {
	vs.batch = false
	rs := vs.rooms
	if len(rs) == 0 {
		return
	}
	if !slices.IsSortedFunc(rs, func(a, b room) int { return cmp.Compare(a.off, b.off) }) {
		slices.SortFunc(rs, func(a, b room) int { return cmp.Compare(a.off, b.off) })
	}
	for i := len(rs) - 1; i >= 0 && rs[i].off+rs[i].n == uint64(len(vs.arena)); i-- {
		vs.arena = vs.arena[:rs[i].off]
	}
	vs.rooms = rs[:0]
}

// recycle makes a container's id free for NewContainer.
func (vs *Values) recycle(id uint64) {
	vs.conts[id] = container{}
	vs.free = append(vs.free, uint32(id))
}

// ArenaLen reports how many item words the store holds (for memory tests).
func (vs *Values) ArenaLen() int { return len(vs.arena) }

// Freeze declares a container complete and offers it, once, to the
// compactor c (which may be nil), returning the record that replaces it or
// the container itself. Decoders call it when a parent takes the container;
// other front ends (the JSON reader) call it the same way.
func (vs *Values) Freeze(v Value, c Compactor) (Value, error) {
	if !v.IsContainer() || v.N >= uint64(len(vs.conts)) {
		return v, nil
	}
	ct := &vs.conts[v.N]
	if ct.flags&fReplaced != 0 {
		return ct.alias(), nil
	}
	if ct.flags&fFrozen != 0 || c == nil {
		ct.flags |= fFrozen
		return v, nil
	}
	ct.flags |= fFrozen
	r, ok, err := c.Compact(vs, v)
	if err != nil || !ok {
		return v, err
	}
	vs.replace(v.N, r)
	return r, nil
}

// Append adds items to the end of a list or set, or key, value pairs to a
// dict, freezing each item with c first.
func (vs *Values) Append(target Value, c Compactor, items ...Value) error {
	if !target.IsContainer() || target.N >= uint64(len(vs.conts)) || vs.conts[target.N].flags&fReplaced != 0 {
		return fmt.Errorf("append to a %s that is not an open container", target.Kind)
	}
	vs.beginBatch()
	for i, it := range items {
		v, err := vs.Freeze(it, c)
		if err != nil {
			vs.endBatch()
			return err
		}
		items[i] = v
	}
	vs.endBatch()
	return vs.appendItems(target.N, items...)
}

// Article returns the kind's name with its indefinite article, for
// messages: "an int", "a str".
func (k Kind) Article() string {
	if k == KindInt || k == KindBigInt {
		return "an " + k.String()
	}
	return "a " + k.String()
}
