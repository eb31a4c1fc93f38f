package snapshot

import (
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/memstat/memstat/pkg/pickle"
)

// Record tags of the values the compactor makes while a file decodes.
const (
	tagFrame   uint8 = iota + 1 // N: FrameID
	tagStack                    // N: StackID
	tagEntry                    // N: index into builder.entries
	tagBlock                    // N: index into builder.blocks
	tagSegment                  // N: index into builder.segments
	tagHistory                  // N: index into builder.history
)

// field names the compactor recognises; the order is the index into
// builder.keyIDs.
const (
	kAction = iota
	kAddr
	kSize
	kStream
	kTimeUS
	kFrames
	kCompileContext
	kUserMetadata
	kDeviceFree
	kFilename
	kName
	kLine
	kState
	kRequestedSize
	kAddress
	kHistory
	kRealSize
	kBlocks
	kDevice
	kTotalSize
	kAllocatedSize
	kActiveSize
	kSegmentType
	kSegmentPoolID
	kIsExpandable
	kPoolID
	kCount
)

var keyNames = [kCount]string{
	kAction: "action", kAddr: "addr", kSize: "size", kStream: "stream", kTimeUS: "time_us",
	kFrames: "frames", kCompileContext: "compile_context", kUserMetadata: "user_metadata",
	kDeviceFree: "device_free", kFilename: "filename", kName: "name", kLine: "line",
	kState: "state", kRequestedSize: "requested_size", kAddress: "address", kHistory: "history",
	kRealSize: "real_size", kBlocks: "blocks", kDevice: "device", kTotalSize: "total_size",
	kAllocatedSize: "allocated_size", kActiveSize: "active_size", kSegmentType: "segment_type",
	kSegmentPoolID: "segment_pool_id", kIsExpandable: "is_expandable", kPoolID: "pool_id",
}

// historyEntry is a 2.0 block history item ({addr, real_size, frames}).
type historyEntry struct {
	addr      uint64
	requested int64
	stack     StackID
}

// pendingSegment is a segment whose blocks are still in builder.blocks.
type pendingSegment struct {
	seg Segment
	// The segment's blocks: builder.blocks[first:first+n] when its list
	// was a run of consecutive blocks (the usual case), else the indices
	// in blocks, in list order.
	run      bool
	first, n uint32
	blocks   []uint32
	// which sizes the file gave (older files lack some).
	hasAllocated, hasActive, hasRequested bool
}

// builder is the pickle.Compactor that turns snapshot dicts and lists into
// typed records while the file decodes, and the state those records live in.
type builder struct {
	vs     *pickle.Values
	stacks *Stacks
	keyIDs [kCount]uint64
	// fieldOf maps a small interned string id to its field (+1); 0 = none.
	fieldOf []uint8

	// trace holds every trace entry in file order, compact; a device's
	// trace is a view of it (see traces).
	trace    TraceBuilder
	blocks   blockStore
	segments []pendingSegment
	history  []historyEntry

	strs   []string
	strIdx map[uint64]StrID // pickle string id -> StrID
	// textOf maps a pickle string id to its id in stacks.texts plus one
	// (0: not seen yet), so that a frame's name is hashed once per
	// distinct string, not once per frame. A slice, as fieldOf and
	// actionOf: the ids are dense, and a map's lookup took a tenth of
	// decoding a file whose frames are written out for every entry.
	textOf []uint32
	// blockTaken marks the blocks a segment took: each block dict is
	// listed once (a block list shared by many segments, 2 bytes a
	// reference, would be copied into each: quadratic memory).
	blockTaken []bool

	features Features
	// unknownActions counts the trace entries whose action memstat does
	// not know, firstUnknown is the first such action: one warning line
	// names them (a newer PyTorch may add actions).
	unknownActions int
	firstUnknown   string
	frameIDs       []FrameID // scratch
	// contexts interns the entries' stream, compile_context and
	// user_metadata; lastContext is the one interned last.
	contexts      Contexts
	lastContext   EntryContext
	lastContextID ContextID
	contextSet    bool
	fields        [kCount]pickle.Value
	present       [kCount]bool
	// actionOf caches the action of an entry's action string, by its
	// pickle string id: the Action plus one, 0 where not parsed yet.
	actionOf []uint8
	// stream, when set, is handed each entry in place of the trace
	// (Stream, stream.go).
	stream *entryStream
	// traceGrown, when set, is handed the trace's finished chunks as
	// they close (LoadOptions.TraceGrown); grownLen is the number of
	// entries it was last handed.
	traceGrown func(*Trace)
	grownLen   int
	// entries counts the trace entries; sink, when set, appends them to
	// trace on a goroutine of its own (entrysink.go) until traceDone.
	entries int
	sink    *entrySink
}

func newBuilder(vs *pickle.Values) *builder {
	b := &builder{vs: vs, stacks: NewStacks(), strs: []string{""}, strIdx: map[uint64]StrID{}}
	maxID := uint64(0)
	for i, name := range keyNames {
		id := vs.Str(name).N
		b.keyIDs[i] = id
		if id > maxID {
			maxID = id
		}
	}
	b.fieldOf = make([]uint8, maxID+1)
	for i, id := range b.keyIDs {
		b.fieldOf[id] = uint8(i + 1)
	}
	return b
}

// readFields loads the known keys of a dict into b.fields.
func (b *builder) readFields(items []pickle.Value) {
	b.present = [kCount]bool{}
	for i := 0; i+1 < len(items); i += 2 {
		k := items[i]
		if k.Kind != pickle.KindString || k.N >= uint64(len(b.fieldOf)) {
			continue
		}
		if f := b.fieldOf[k.N]; f != 0 {
			b.fields[f-1] = items[i+1]
			b.present[f-1] = true
		}
	}
}

// Compact implements pickle.Compactor.
func (b *builder) Compact(vs *pickle.Values, v pickle.Value) (pickle.Value, bool, error) {
	switch v.Kind {
	case pickle.KindDict:
		return b.compactDict(vs.Items(v), v)
	case pickle.KindList, pickle.KindTuple:
		ids := b.frameIDs[:0]
		if tag, first, n, ok := vs.RecordRun(v); ok {
			// Frames seen for the first time have consecutive ids.
			if tag != tagFrame {
				return v, false, nil
			}
			for i := range n {
				ids = append(ids, FrameID(first+uint64(i)))
			}
		} else {
			items := vs.Items(v)
			if len(items) == 0 {
				return v, false, nil
			}
			for _, it := range items {
				if it.Kind != pickle.KindRecord || it.Tag != tagFrame {
					return v, false, nil
				}
				ids = append(ids, FrameID(it.N))
			}
		}
		b.frameIDs = ids
		if len(ids) > caps.depth {
			return v, false, fmt.Errorf("a stack of %d frames, more than the limit of %d (MaxStackDepth)", len(ids), caps.depth)
		}
		return pickle.Record(tagStack, uint64(b.stacks.InternStack(ids))), true, nil
	}
	return v, false, nil
}

// CompactFlatDict implements pickle.FlatDictCompactor: a dict the decoder
// kept as its items (every trace entry, block and frame of the files
// PyTorch and memstat write) is compacted as Compact compacts a container.
func (b *builder) CompactFlatDict(_ *pickle.Values, items []pickle.Value) (pickle.Value, bool, error) {
	return b.compactDict(items, pickle.None)
}

// compactDict makes the record of a dict with items, or returns v and
// false for a dict that is none of the builder's.
func (b *builder) compactDict(items []pickle.Value, v pickle.Value) (pickle.Value, bool, error) {
	b.readFields(items)
	switch {
	case b.present[kAction]:
		return b.entry()
	case b.present[kBlocks]:
		return b.segment()
	case b.present[kState]:
		return b.block()
	case b.present[kFilename] && b.present[kName]:
		return b.frame()
	case b.present[kRealSize]:
		return b.historyItem()
	}
	return v, false, nil
}

func (b *builder) typeErr(what string, k int, want string) error {
	v := b.fields[k]
	if v.Kind == pickle.KindBigInt {
		// Both are Python ints: say what is wrong with this one.
		digits := b.vs.BigInt(v).String()
		if len(digits) > 32 {
			digits = fmt.Sprintf("%s... (%d digits)", digits[:24], len(digits))
		}
		return fmt.Errorf("%s: %q is %s, out of range (want %s of 64 bits)", what, keyNames[k], digits, want)
	}
	return fmt.Errorf("%s: %q is %s, not %s", what, keyNames[k], v.Kind.Article(), want)
}

func (b *builder) int(what string, k int) (int64, error) {
	if !b.present[k] {
		return 0, nil
	}
	v := b.fields[k]
	if i, ok := v.AsInt(); ok {
		return i, nil
	}
	if v.Kind == pickle.KindBigInt {
		if u, ok := b.vs.Uint64(v); ok {
			return int64(u), nil // a pointer-sized value: keep its bits
		}
	}
	if v.Kind == pickle.KindFloat {
		// JSON writers may print integral sizes as floats.
		f, _ := v.AsFloat()
		if f == math.Trunc(f) && math.Abs(f) < 1<<63 {
			return int64(f), nil
		}
	}
	return 0, b.typeErr(what, k, "an int")
}

func (b *builder) uint(what string, k int) (uint64, error) {
	if !b.present[k] {
		return 0, nil
	}
	if u, ok := b.vs.Uint64(b.fields[k]); ok {
		return u, nil
	}
	i, err := b.int(what, k)
	return uint64(i), err
}

func (b *builder) str(k int) string {
	if !b.present[k] {
		return ""
	}
	return b.vs.Text(b.fields[k])
}

// stack reads a frames field: a stack record, or an empty list.
func (b *builder) stack(what string, k int) (StackID, error) {
	if !b.present[k] {
		return NoStack, nil
	}
	v := b.fields[k]
	switch {
	case v.Kind == pickle.KindRecord && v.Tag == tagStack:
		return StackID(v.N), nil
	case (v.Kind == pickle.KindList || v.Kind == pickle.KindTuple) && b.vs.Len(v) == 0:
		return NoStack, nil
	case v.Kind == pickle.KindNone:
		return NoStack, nil
	}
	return NoStack, fmt.Errorf("%s: %q is not a list of frames ({name, filename, line} dicts)", what, keyNames[k])
}

func (b *builder) internStr(k int) StrID {
	if !b.present[k] {
		return 0
	}
	v := b.fields[k]
	if v.Kind != pickle.KindString || b.vs.Text(v) == "" {
		// user_metadata may be a dict in the newest viewer's reading; keep
		// nothing rather than fail. The empty string is id 0.
		return 0
	}
	if id, ok := b.strIdx[v.N]; ok {
		return id
	}
	id := StrID(len(b.strs))
	b.strs = append(b.strs, b.vs.Text(v))
	b.strIdx[v.N] = id
	return id
}

// textID returns the stacks.texts id of a frame's name or filename field,
// hashing the text only the first time its pickle string is seen.
func (b *builder) textID(k int) uint32 {
	v := b.fields[k]
	if !b.present[k] || (v.Kind != pickle.KindString && v.Kind != pickle.KindBytes) {
		return b.stacks.textID("")
	}
	if v.N < uint64(len(b.textOf)) {
		if id := b.textOf[v.N]; id != 0 {
			return id - 1
		}
	} else {
		// An id is below the count of strings interned, which the
		// memory budget already counts at far more than 4 bytes each.
		b.textOf = append(b.textOf, make([]uint32, int(v.N)+1-len(b.textOf))...)
	}
	id := b.stacks.textID(b.vs.Text(v))
	b.textOf[v.N] = id + 1
	return id
}

func (b *builder) frame() (pickle.Value, bool, error) {
	line, err := b.int("stack frame", kLine)
	if err != nil {
		return pickle.None, false, err
	}
	f := Frame{Name: b.str(kName), Filename: b.str(kFilename), Line: line}
	k := frameKey{name: b.textID(kName), file: b.textID(kFilename), line: line}
	id := b.stacks.internFrame(k, f)
	if int(id) >= caps.frames {
		return pickle.None, false, fmt.Errorf("more than %d distinct stack frames, the limit (MaxFrames)", caps.frames)
	}
	return pickle.Record(tagFrame, uint64(id)), true, nil
}

func (b *builder) entry() (pickle.Value, bool, error) {
	const what = "trace entry"
	var e TraceEntry
	e.Action = b.action()
	if e.Action == ActionUnknown {
		if b.unknownActions++; b.unknownActions == 1 {
			b.firstUnknown = b.str(kAction)
		}
	}
	var err error
	if e.Action == ActionOOM && b.present[kDeviceFree] {
		e.Addr, err = b.uint(what, kDeviceFree)
	} else {
		e.Addr, err = b.uint(what, kAddr)
	}
	if err != nil {
		return pickle.None, false, err
	}
	if e.Size, err = b.int(what, kSize); err != nil {
		return pickle.None, false, err
	}
	var c EntryContext
	if c.Stream, err = b.int(what, kStream); err != nil {
		return pickle.None, false, err
	}
	if e.TimeUS, err = b.int(what, kTimeUS); err != nil {
		return pickle.None, false, err
	}
	if e.Stack, err = b.stack(what, kFrames); err != nil {
		return pickle.None, false, err
	}
	b.features.TimeUS = b.features.TimeUS || b.present[kTimeUS]
	b.features.CompileContext = b.features.CompileContext || b.present[kCompileContext]
	b.features.UserMetadata = b.features.UserMetadata || b.present[kUserMetadata]
	c.CompileContext = b.internStr(kCompileContext)
	c.UserMetadata = b.internStr(kUserMetadata)
	if b.present[kPoolID] {
		b.features.TracePoolID = true
		if c.Pool, err = b.poolID(what, kPoolID); err != nil {
			return pickle.None, false, err
		}
	}
	// Most entries repeat the previous entry's context: skip the map.
	if c != b.lastContext || !b.contextSet {
		b.lastContext, b.lastContextID, b.contextSet = c, b.contexts.Intern(c), true
	}
	e.Context = b.lastContextID
	if b.stream != nil {
		// Handed on, not kept: the record's payload numbers the entries
		// in file order, as the trace's indices do.
		return b.stream.entry(b, e, c)
	}
	if b.entries >= caps.entries {
		return pickle.None, false, fmt.Errorf("more than %d trace entries, the limit (MaxTraceEntries)", caps.entries)
	}
	b.entries++
	// The entries go straight into the compact trace (some 12 bytes an
	// entry, in chunks that are never copied): no 40-byte array of them
	// is ever held, nor doubled as it grows. A large file's go through
	// the sink, appended on another goroutine.
	if b.sink != nil {
		b.sink.add(e)
	} else {
		b.trace.Append(e)
		if b.traceGrown != nil && b.trace.ClosedLen() != b.grownLen {
			b.grownLen = b.trace.ClosedLen()
			b.traceGrown(b.trace.Closed())
		}
	}
	return pickle.Record(tagEntry, uint64(b.entries-1)), true, nil
}

// traceDone ends the sink, if one runs: the trace is complete and this
// goroutine's.
func (b *builder) traceDone() {
	if b.sink != nil {
		b.sink.finish()
	}
}

// action parses an entry's action, once per distinct string: the few
// action names are interned strings, so their ids index actionOf.
func (b *builder) action() Action {
	v := b.fields[kAction]
	if !b.present[kAction] || v.Kind != pickle.KindString || v.N >= 1<<20 {
		return ParseAction(b.str(kAction))
	}
	if v.N >= uint64(len(b.actionOf)) {
		b.actionOf = append(b.actionOf, make([]uint8, int(v.N)+1-len(b.actionOf))...)
	}
	a := b.actionOf[v.N]
	if a == 0 {
		a = uint8(ParseAction(b.vs.Text(v))) + 1
		b.actionOf[v.N] = a
	}
	return Action(a - 1)
}

func (b *builder) historyItem() (pickle.Value, bool, error) {
	const what = "block history entry"
	var h historyEntry
	var err error
	if h.addr, err = b.uint(what, kAddr); err != nil {
		return pickle.None, false, err
	}
	if h.requested, err = b.int(what, kRealSize); err != nil {
		return pickle.None, false, err
	}
	if h.stack, err = b.stack(what, kFrames); err != nil {
		return pickle.None, false, err
	}
	b.history = append(b.history, h)
	return pickle.Record(tagHistory, uint64(len(b.history)-1)), true, nil
}

func parseState(s string) (BlockState, bool) {
	switch s {
	case "active_allocated":
		return ActiveAllocated, true
	case "active_pending_free", "active_awaiting_free":
		return ActivePendingFree, true
	case "inactive":
		return Inactive, true
	}
	return Inactive, false
}

// addrUnknown marks a block whose file gave no address (2.0 and older); the
// segment fills it in from the block sizes.
const addrUnknown = ^uint64(0)

func (b *builder) block() (pickle.Value, bool, error) {
	const what = "segment block"
	var bl Block
	var err error
	st, ok := parseState(b.str(kState))
	if !ok {
		if v := b.fields[kState]; b.present[kState] && v.Kind != pickle.KindString {
			return pickle.None, false, fmt.Errorf("%s: \"state\" is %s, not a string such as \"active_allocated\"", what, v.Kind.Article())
		}
		return pickle.None, false, fmt.Errorf("%s: unknown state %s", what, quote(b.str(kState)))
	}
	bl.State = st
	if bl.Size, err = b.int(what, kSize); err != nil {
		return pickle.None, false, err
	}
	bl.Address = addrUnknown
	if b.present[kAddress] {
		if bl.Address, err = b.uint(what, kAddress); err != nil {
			return pickle.None, false, err
		}
		b.features.BlockAddresses = true
	}
	bl.RequestedSize = bl.Size
	if b.present[kRequestedSize] {
		if bl.RequestedSize, err = b.int(what, kRequestedSize); err != nil {
			return pickle.None, false, err
		}
	}
	if b.present[kFrames] {
		if bl.Stack, err = b.stack(what, kFrames); err != nil {
			return pickle.None, false, err
		}
	} else if b.present[kHistory] {
		// 2.0: history[0] is the current allocation of an active block.
		// A free block made of merged blocks lists each one's last
		// allocation, lowest address first (try_merge_blocks), so
		// history[0]'s real_size is the block's requested size only when
		// the file has no requested_size of its own.
		b.features.BlockHistory = true
		hist := b.fields[kHistory]
		if items := b.vs.Items(hist); len(items) > 0 {
			if h := items[0]; h.Kind == pickle.KindRecord && h.Tag == tagHistory {
				he := b.history[h.N]
				bl.Stack = he.stack
				if !b.present[kRequestedSize] {
					bl.RequestedSize = he.requested
				}
			}
		}
	}
	if b.blocks.n >= caps.blocks {
		return pickle.None, false, fmt.Errorf("more than %d blocks, the limit (MaxBlocks)", caps.blocks)
	}
	if len(b.blockTaken) == cap(b.blockTaken) {
		b.blockTaken = slices.Grow(b.blockTaken, max(len(b.blockTaken), 256))
	}
	b.blocks.add(bl)
	b.blockTaken = append(b.blockTaken, false)
	return pickle.Record(tagBlock, uint64(b.blocks.n-1)), true, nil
}

// blockChunk is how many blocks a chunk of blockStore holds (640 KiB).
const blockChunk = 1 << 14

// blockStore holds the blocks in file order, in chunks of blockChunk that
// are never copied (the first grows to that size): an array grown by
// doubling copied the blocks once over and held up to twice their bytes,
// then was copied again, cut to size, before segments sliced it.
type blockStore struct {
	chunks [][]Block
	n      int // blocks held
	cap    int // blocks the chunks have room for
}

func (s *blockStore) add(bl Block) {
	if s.n == len(s.chunks)*blockChunk {
		c := blockChunk
		if s.n == 0 {
			c = 64
		}
		s.chunks = append(s.chunks, make([]Block, 0, c))
		s.cap += c
	}
	last := &s.chunks[len(s.chunks)-1]
	if len(*last) == cap(*last) {
		// The first chunk, not full yet.
		s.cap -= cap(*last)
		*last = slices.Grow(*last, min(len(*last), blockChunk-len(*last)))
		s.cap += cap(*last)
	}
	*last = append(*last, bl)
	s.n++
}

// at returns block i.
func (s *blockStore) at(i uint32) *Block {
	return &s.chunks[i/blockChunk][i%blockChunk]
}

// run returns blocks first to first+n-1: a slice of their chunk (its
// capacity cut to them), or a copy when they span two chunks.
func (s *blockStore) run(first, n uint32) []Block {
	if n == 0 {
		return []Block{}
	}
	if c := first / blockChunk; c == (first+n-1)/blockChunk {
		o := first % blockChunk
		return s.chunks[c][o : o+n : o+n]
	}
	out := make([]Block, n)
	for i := range out {
		out[i] = *s.at(first + uint32(i))
	}
	return out
}

func (b *builder) segment() (pickle.Value, bool, error) {
	const what = "segment"
	var p pendingSegment
	s := &p.seg
	var err error
	dev, err := b.int(what, kDevice)
	if err != nil {
		return pickle.None, false, err
	}
	if dev < -1 || dev >= MaxDevices {
		return pickle.None, false, fmt.Errorf("%s: device %d is out of range (at most %d devices)", what, dev, MaxDevices)
	}
	s.Device = int(dev)
	if s.Address, err = b.uint(what, kAddress); err != nil {
		return pickle.None, false, err
	}
	if s.TotalSize, err = b.int(what, kTotalSize); err != nil {
		return pickle.None, false, err
	}
	if s.AllocatedSize, err = b.int(what, kAllocatedSize); err != nil {
		return pickle.None, false, err
	}
	if s.ActiveSize, err = b.int(what, kActiveSize); err != nil {
		return pickle.None, false, err
	}
	if s.RequestedSize, err = b.int(what, kRequestedSize); err != nil {
		return pickle.None, false, err
	}
	p.hasAllocated, p.hasActive, p.hasRequested = b.present[kAllocatedSize], b.present[kActiveSize], b.present[kRequestedSize]
	if s.Stream, err = b.int(what, kStream); err != nil {
		return pickle.None, false, err
	}
	switch t := b.str(kSegmentType); t {
	case "small":
		s.Pool = SmallPool
	case "large", "":
		s.Pool = LargePool
	default:
		return pickle.None, false, fmt.Errorf("%s: unknown segment_type %s", what, quote(t))
	}
	if b.present[kSegmentPoolID] {
		if s.PoolID, err = b.poolID(what, kSegmentPoolID); err != nil {
			return pickle.None, false, err
		}
	}
	if b.present[kIsExpandable] {
		if x, ok := b.fields[kIsExpandable].AsBool(); ok {
			s.Expandable = x
		}
	}
	if s.Stack, err = b.stack(what, kFrames); err != nil {
		return pickle.None, false, err
	}
	blocks := b.fields[kBlocks]
	if blocks.Kind != pickle.KindList && blocks.Kind != pickle.KindTuple {
		return pickle.None, false, fmt.Errorf("%s: \"blocks\" is a %s, not a list", what, blocks.Kind)
	}
	take := func(n uint64) error {
		if b.blockTaken[n] {
			return fmt.Errorf("%s: a block dict is listed twice (PyTorch writes each block once)", what)
		}
		b.blockTaken[n] = true
		p.blocks = append(p.blocks, uint32(n))
		return nil
	}
	if tag, first, n, ok := b.vs.RecordRun(blocks); ok && tag == tagBlock {
		for i := range uint64(n) {
			if b.blockTaken[first+i] {
				return pickle.None, false, fmt.Errorf("%s: a block dict is listed twice (PyTorch writes each block once)", what)
			}
			b.blockTaken[first+i] = true
		}
		p.run, p.first, p.n = true, uint32(first), uint32(n)
	} else {
		for _, it := range b.vs.Items(blocks) {
			if it.Kind != pickle.KindRecord || it.Tag != tagBlock {
				return pickle.None, false, fmt.Errorf("%s: a block is not a {size, state, ...} dict", what)
			}
			if err := take(it.N); err != nil {
				return pickle.None, false, err
			}
		}
	}
	if len(b.segments) >= caps.segments {
		return pickle.None, false, fmt.Errorf("more than %d segments, the limit (MaxSegments)", caps.segments)
	}
	if len(b.segments) == cap(b.segments) {
		// Doubling, as for the blocks: append's quarter steps copy a
		// large array four times over.
		b.segments = slices.Grow(b.segments, max(len(b.segments), 64))
	}
	b.segments = append(b.segments, p)
	return pickle.Record(tagSegment, uint64(len(b.segments)-1)), true, nil
}

// poolID reads a (int, int) pool id: a segment's segment_pool_id or a
// trace entry's pool_id.
func (b *builder) poolID(what string, k int) (PoolID, error) {
	var id PoolID
	items := b.vs.Items(b.fields[k])
	if len(items) != 2 {
		return id, fmt.Errorf("%s: %s is not a pair of ints", what, keyNames[k])
	}
	for i := range 2 {
		x, ok := items[i].AsInt()
		if !ok {
			return id, fmt.Errorf("%s: %s is not a pair of ints", what, keyNames[k])
		}
		id[i] = x
	}
	return id, nil
}

// footprint estimates the bytes the builder holds: the records made so far
// and the tables that index them. Text is counted where pickle.Values
// interns it. See memoryBudget.
func (b *builder) footprint() int64 {
	// The trace counts what its chunks hold (an entry some 12 bytes, a
	// chunk at most traceChunkMax ahead).
	n := int64(b.blocks.cap)*int64(unsafe.Sizeof(Block{})) + int64(cap(b.blocks.chunks))*24 +
		int64(cap(b.segments))*int64(unsafe.Sizeof(pendingSegment{})) +
		int64(cap(b.history))*int64(unsafe.Sizeof(historyEntry{})) +
		int64(cap(b.strs))*16 + int64(len(b.strIdx))*32 + int64(cap(b.textOf))*4 +
		int64(cap(b.blockTaken)) + int64(cap(b.frameIDs))*4 + int64(cap(b.actionOf)) +
		int64(len(b.contexts.list))*int64(unsafe.Sizeof(EntryContext{})*2) +
		b.stacks.footprint()
	if b.sink != nil && !b.sink.closed {
		// What the sink has appended: at most its batches behind (their
		// fixed 160 KiB, like the read-ahead's buffers, not counted).
		n += b.sink.bytes.Load()
	} else {
		n += b.trace.Bytes()
	}
	// A segment's list of block indices: each block is taken once.
	n += int64(b.blocks.cap) * 4
	return n
}
