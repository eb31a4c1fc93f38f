package pickle

import (
	"bytes"
	"hash/maphash"
)

// listCache maps the reference opcodes of a list (its key, see listKey)
// to the record the compactor made of it: Decoder.lists. A snapshot's
// stacks are lists of references to frames seen before, and a big trace
// looks one up per entry (torch-1GB: 4.6 M lookups into some 65k keys of
// about 100 bytes). In a Go map a hit missed the cache three times: on
// the group, on the slot and on the key's own allocation. Here the index
// is a small open-addressing table of 4-byte words (512 KiB at the most,
// mostly in cache) and each key lives in its entry, beside its record, in
// 128 bytes that two adjacent cache lines hold: a hit costs one trip to
// memory.
type listCache struct {
	// index holds, for each used slot, the entry's position plus one in
	// its low indexEntryBits and the top bits of the key's hash above;
	// 0 is an empty slot. Its length is a power of two, at least twice
	// the entries.
	index   []uint32
	entries []listEntry
	// long holds the keys longer than listKeyInline, end to end (no
	// known pickler writes one: a stack of 20 frames referred to by
	// LONG_BINGET is 100 bytes).
	long []byte
	// keyBytes counts the key bytes of the entries, for Footprint.
	keyBytes int64
	// weakHash, set by tests, hashes a key to its length alone, so that
	// keys share their tag and probe runs and only the comparison of their
	// bytes tells them apart.
	weakHash bool
}

const (
	// listKeyInline is the longest key an entry holds in itself.
	listKeyInline = 104
	// indexEntryBits holds an entry's position plus one: maxCachedLists
	// entries at the most.
	indexEntryBits = 17
	indexEntryMask = 1<<indexEntryBits - 1
	indexTagMask   = ^uint32(indexEntryMask)
)

// listEntry is one cached list: 128 bytes, so that an entry of the
// entries slice (whose array starts on a page) never straddles two pairs
// of cache lines.
type listEntry struct {
	rec Value
	// klen is the key's length; a key longer than listKeyInline is
	// long[off:off+klen].
	klen, off uint32
	key       [listKeyInline]byte
}

// listSeed seeds the hash of the keys: a file chooses its memo indices,
// so a fixed hash would let one pile its lists into one probe run. One
// seed a process, as no order depends on it.
var listSeed = maphash.MakeSeed()

func init() {
	// 17 bits hold maxCachedLists entries plus one.
	if maxCachedLists >= indexEntryMask {
		panic("pickle: listCache's index cannot number maxCachedLists entries")
	}
}

// hash returns the hash of key.
func (c *listCache) hash(key []byte) uint64 {
	if c.weakHash {
		return uint64(len(key)) * 0x9e3779b97f4a7c15
	}
	return maphash.Bytes(listSeed, key)
}

// len is the number of keys cached.
func (c *listCache) len() int {
	if c == nil {
		return 0
	}
	return len(c.entries)
}

// keyOf returns the key of e.
func (c *listCache) keyOf(e *listEntry) []byte {
	if e.klen <= listKeyInline {
		return e.key[:e.klen]
	}
	return c.long[e.off : e.off+e.klen]
}

// find returns the slot of key in the index and whether an entry holds
// it there; if not, the slot is the empty one where it would go. The
// index must not be empty.
func (c *listCache) find(key []byte, h uint64) (int, bool) {
	tag := uint32(h>>32) & indexTagMask
	mask := len(c.index) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		w := c.index[i]
		if w == 0 {
			return i, false
		}
		if w&indexTagMask == tag {
			e := &c.entries[w&indexEntryMask-1]
			if int(e.klen) == len(key) && bytes.Equal(c.keyOf(e), key) {
				return i, true
			}
		}
	}
}

// get returns the record cached for key.
func (c *listCache) get(key []byte) (Value, bool) {
	if c == nil || len(c.entries) == 0 {
		return None, false
	}
	i, ok := c.find(key, c.hash(key))
	if !ok {
		return None, false
	}
	return c.entries[c.index[i]&indexEntryMask-1].rec, true
}

// put caches rec for key, in place of the record cached for it if one
// is (as a map's assignment).
func (c *listCache) put(key string, rec Value) {
	if 2*(len(c.entries)+1) > len(c.index) {
		c.grow()
	}
	h := c.hash([]byte(key))
	i, ok := c.find([]byte(key), h)
	if ok {
		c.entries[c.index[i]&indexEntryMask-1].rec = rec
		return
	}
	e := listEntry{rec: rec, klen: uint32(len(key))}
	if len(key) <= listKeyInline {
		copy(e.key[:], key)
	} else {
		e.off = uint32(len(c.long))
		c.long = append(c.long, key...)
	}
	c.entries = append(c.entries, e)
	c.keyBytes += int64(len(key))
	c.index[i] = uint32(h>>32)&indexTagMask | uint32(len(c.entries))
}

// grow doubles the index (to 16 slots the first time) and places every
// entry again.
func (c *listCache) grow() {
	n := 2 * len(c.index)
	if n < 16 {
		n = 16
	}
	c.index = make([]uint32, n)
	mask := n - 1
	for j := range c.entries {
		key := c.keyOf(&c.entries[j])
		h := c.hash(key)
		i := int(h) & mask
		for c.index[i] != 0 {
			i = (i + 1) & mask
		}
		c.index[i] = uint32(h>>32)&indexTagMask | uint32(j+1)
	}
}

// reset empties the cache. The index is dropped, not cleared: a pickle
// can store over a memo index at every other opcode, and clearing would
// cost the index's size each time; it grows again with what is put.
// The entries' array is kept; nothing reads past their length.
func (c *listCache) reset() {
	c.index = nil
	c.entries = c.entries[:0]
	c.long = c.long[:0]
	c.keyBytes = 0
}

// footprint is the bytes the cache holds.
func (c *listCache) footprint() int64 {
	if c == nil {
		return 0
	}
	return int64(len(c.index))*4 + int64(cap(c.entries))*128 + int64(cap(c.long))
}
