package snapshot

import (
	"hash/maphash"
	"slices"
	"unsafe"
)

// Frame is one stack frame as PyTorch records it ({"name", "filename",
// "line"}).
type Frame struct {
	Name     string
	Filename string
	Line     int64
}

// FrameID indexes Stacks' frame table.
type FrameID uint32

// StackID indexes Stacks' stack table. 0 is the empty stack (no frames
// recorded), so the zero value of a Block or TraceEntry means "no stack".
type StackID uint32

// NoStack is the empty stack.
const NoStack StackID = 0

// Stacks interns frames and stacks. Frames are innermost first, as PyTorch
// stores them (frame 0 is the allocation site).
type Stacks struct {
	frames []Frame
	// frameIdx finds a frame by the ids of its name and filename in texts,
	// and its line, so that interning a frame hashes no string: a file may
	// give a million frames one name of megabytes, each frame costing a few
	// bytes of input (hashing the name per frame was quadratic time). Open
	// addressing as stackIdx (slots hold FrameID+1, 0 is empty; frameKeys
	// holds each frame's key), on a hash seeded per process (frameSeed),
	// since a file chooses the lines: a Go map's lookup was a sixth of
	// decoding a file whose frames are written out for every entry.
	frameIdx  []uint32
	frameKeys []frameKey
	texts     map[string]uint32
	// stack i is data[offs[i]:offs[i+1]]; stack 0 is empty.
	offs []uint32
	data []FrameID
	// stackIdx finds a stack by its frames: open addressing on a hash of
	// the frame ids (slots hold StackID+1, 0 is empty; hashes holds each
	// stack's hash). A Go map keyed by the ids' bytes cost a tenth of
	// decoding a snapshot whose every allocation lists its stack anew.
	stackIdx []uint32
	hashes   []uint64
}

// NewStacks returns an empty table holding only the empty stack.
func NewStacks() *Stacks {
	return &Stacks{
		texts:  make(map[string]uint32),
		offs:   []uint32{0, 0},
		hashes: []uint64{0},
	}
}

// frameKey identifies a frame: its name's and filename's ids in
// Stacks.texts, and its line.
type frameKey struct {
	name, file uint32
	line       int64
}

// textID returns the id of a name or filename, adding it if it is new.
func (s *Stacks) textID(t string) uint32 {
	if id, ok := s.texts[t]; ok {
		return id
	}
	id := uint32(len(s.texts))
	s.texts[t] = id
	return id
}

// InternFrame returns the id of f, adding it if it is new.
func (s *Stacks) InternFrame(f Frame) FrameID {
	return s.internFrame(frameKey{s.textID(f.Name), s.textID(f.Filename), f.Line}, f)
}

// internFrame is InternFrame for a caller that has the text ids already.
func (s *Stacks) internFrame(k frameKey, f Frame) FrameID {
	if 2*len(s.frameKeys) >= len(s.frameIdx) {
		s.growFrameIdx()
	}
	mask := len(s.frameIdx) - 1
	i := int(k.hash()) & mask
	for ; s.frameIdx[i] != 0; i = (i + 1) & mask {
		if id := FrameID(s.frameIdx[i] - 1); s.frameKeys[id] == k {
			return id
		}
	}
	id := FrameID(len(s.frames))
	s.frames = append(s.frames, f)
	s.frameKeys = append(s.frameKeys, k)
	s.frameIdx[i] = uint32(id) + 1
	return id
}

// hash is the key's hash for frameIdx: its 16 bytes (no padding) through
// maphash's, which takes bytes at memory speed where its Comparable walks
// the fields.
func (k *frameKey) hash() uint64 {
	return maphash.Bytes(frameSeed, unsafe.Slice((*byte)(unsafe.Pointer(k)), unsafe.Sizeof(*k)))
}

// frameSeed seeds frameIdx's hash: one per process, not per table, so that
// two readings of a file give equal tables (reflect.DeepEqual), while a
// file cannot choose lines that all land in one slot.
var frameSeed = maphash.MakeSeed()

// growFrameIdx doubles the frame index and re-inserts every frame.
func (s *Stacks) growFrameIdx() {
	size := max(64, 2*len(s.frameIdx))
	s.frameIdx = make([]uint32, size)
	mask := size - 1
	for id := range s.frameKeys {
		i := int(s.frameKeys[id].hash()) & mask
		for s.frameIdx[i] != 0 {
			i = (i + 1) & mask
		}
		s.frameIdx[i] = uint32(id) + 1
	}
}

// InternStack returns the id of the stack made of the given frames
// (innermost first), adding it if it is new. An empty list is NoStack.
func (s *Stacks) InternStack(ids []FrameID) StackID {
	if len(ids) == 0 {
		return NoStack
	}
	h := hashFrames(ids)
	if 2*len(s.hashes) >= len(s.stackIdx) {
		s.growStackIdx()
	}
	mask := len(s.stackIdx) - 1
	i := int(h>>32) & mask
	for ; s.stackIdx[i] != 0; i = (i + 1) & mask {
		id := StackID(s.stackIdx[i] - 1)
		if s.hashes[id] == h && slices.Equal(s.Stack(id), ids) {
			return id
		}
	}
	id := StackID(len(s.offs) - 1)
	s.data = append(s.data, ids...)
	s.offs = append(s.offs, uint32(len(s.data)))
	s.hashes = append(s.hashes, h)
	s.stackIdx[i] = uint32(id) + 1
	return id
}

// hashFrames mixes the frame ids of a stack into 64 bits.
func hashFrames(ids []FrameID) uint64 {
	h := uint64(len(ids)) * 0x9E3779B97F4A7C15
	for _, f := range ids {
		h = (h ^ uint64(f)) * 0xBF58476D1CE4E5B9
		h ^= h >> 29
	}
	return h
}

// growStackIdx doubles the stack index and re-inserts every stack.
func (s *Stacks) growStackIdx() {
	size := max(64, 2*len(s.stackIdx))
	s.stackIdx = make([]uint32, size)
	mask := size - 1
	for id := 1; id < len(s.hashes); id++ {
		i := int(s.hashes[id]>>32) & mask
		for s.stackIdx[i] != 0 {
			i = (i + 1) & mask
		}
		s.stackIdx[i] = uint32(id) + 1
	}
}

// InternFrames interns a stack given as frames.
func (s *Stacks) InternFrames(frames []Frame) StackID {
	if len(frames) == 0 {
		return NoStack
	}
	ids := make([]FrameID, len(frames))
	for i, f := range frames {
		ids[i] = s.InternFrame(f)
	}
	return s.InternStack(ids)
}

// Stack returns the frame ids of a stack, innermost first. The slice is
// shared: do not modify it.
func (s *Stacks) Stack(id StackID) []FrameID {
	if int(id)+1 >= len(s.offs) {
		return nil
	}
	return s.data[s.offs[id]:s.offs[id+1]]
}

// Frame returns a frame by id.
func (s *Stacks) Frame(id FrameID) Frame { return s.frames[id] }

// Frames returns the frames of a stack, innermost first (a new slice).
func (s *Stacks) Frames(id StackID) []Frame {
	ids := s.Stack(id)
	out := make([]Frame, len(ids))
	for i, f := range ids {
		out[i] = s.frames[f]
	}
	return out
}

// NumFrames returns how many distinct frames are interned.
func (s *Stacks) NumFrames() int { return len(s.frames) }

// NumStacks returns how many distinct stacks are interned, the empty stack
// included.
func (s *Stacks) NumStacks() int { return len(s.offs) - 1 }

// footprint estimates the bytes the table holds (see builder.footprint).
func (s *Stacks) footprint() int64 {
	return int64(cap(s.frames))*int64(unsafe.Sizeof(Frame{})) + int64(cap(s.frameIdx))*4 + int64(cap(s.frameKeys))*16 +
		int64(len(s.texts))*40 + int64(cap(s.offs))*4 + int64(cap(s.data))*4 +
		int64(cap(s.stackIdx))*4 + int64(cap(s.hashes))*8
}
