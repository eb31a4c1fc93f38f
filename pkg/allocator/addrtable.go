package allocator

// addrTable maps device addresses to blocks. Every Malloc inserts one entry
// and every Free looks one up and deletes it, so this is on the hot path; a
// dedicated open-addressing table (linear probing, backward-shift deletion,
// no tombstones) does each in one probe sequence, where a Go map needs a
// lookup and a separate delete.
//
// A slot holds only the block: its key is the block's address, which does
// not change while the block is in a table (an allocated or pending block
// is never split, merged or moved; tryMerge and ResizeAllocated move only
// free blocks and the block being freed, which is taken out first). Slots
// of a key and a pointer took 16 bytes, twice as much: 48 MB of the
// replay's live heap on a snapshot of 1.3 M live blocks. A probe now reads
// the block it passes; at most half the slots are full, so a lookup
// passes 1.5 blocks on average, and the caller reads the one it finds
// anyway.
type addrTable struct {
	slots []*block // nil: empty
	n     int
	shift uint // 64 - log2(len(slots))
}

func (t *addrTable) slot(k uint64) int {
	// Addresses are 512-byte aligned; multiplicative hashing of the
	// remaining bits spreads them over the table.
	return int(((k >> 9) * 0x9E3779B97F4A7C15) >> t.shift)
}

func (t *addrTable) len() int { return t.n }

func (t *addrTable) get(k uint64) *block {
	if t.n == 0 {
		return nil
	}
	mask := len(t.slots) - 1
	for i := t.slot(k); ; i = (i + 1) & mask {
		b := t.slots[i]
		if b == nil || b.addr == k {
			return b
		}
	}
}

// put inserts b at its address, replacing the block there.
func (t *addrTable) put(b *block) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	mask := len(t.slots) - 1
	for i := t.slot(b.addr); ; i = (i + 1) & mask {
		switch s := t.slots[i]; {
		case s == nil:
			t.slots[i] = b
			t.n++
			return
		case s.addr == b.addr:
			t.slots[i] = b
			return
		}
	}
}

// take removes the entry for k and returns its block (nil if absent).
func (t *addrTable) take(k uint64) *block {
	if t.n == 0 {
		return nil
	}
	mask := len(t.slots) - 1
	i := t.slot(k)
	for {
		b := t.slots[i]
		if b == nil {
			return nil
		}
		if b.addr == k {
			break
		}
		i = (i + 1) & mask
	}
	v := t.slots[i]
	// Backward-shift: move later entries of the probe run into the hole
	// when their home slot does not lie between the hole and them.
	for j := (i + 1) & mask; t.slots[j] != nil; j = (j + 1) & mask {
		home := t.slot(t.slots[j].addr)
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = nil
	t.n--
	return v
}

func (t *addrTable) grow() { t.resize(max(16, 2*len(t.slots))) }

// reserve sizes the table for n entries at once, as n puts would grow it,
// without the copies of the doublings on the way.
func (t *addrTable) reserve(n int) {
	size := max(16, len(t.slots))
	for 2*n > size {
		size *= 2
	}
	if size > len(t.slots) {
		t.resize(size)
	}
}

func (t *addrTable) resize(size int) {
	old := t.slots
	shift := uint(64)
	for s := size; s > 1; s >>= 1 {
		shift--
	}
	*t = addrTable{slots: make([]*block, size), shift: shift, n: t.n}
	mask := size - 1
	for _, b := range old {
		if b == nil {
			continue
		}
		i := t.slot(b.addr)
		for t.slots[i] != nil {
			i = (i + 1) & mask
		}
		t.slots[i] = b
	}
}

// each calls fn for every entry, in no particular order.
func (t *addrTable) each(fn func(uint64, *block)) {
	for _, b := range t.slots {
		if b != nil {
			fn(b.addr, b)
		}
	}
}

// cloneWith copies the table slot for slot, mapping every block to its
// copy (at the same address). Re-inserting the entries instead, in slot
// order, clusters the probe runs of the growing new table: cloning 240,000
// entries that way took 150 ms.
func (t *addrTable) cloneWith(copyOf func(*block) *block) addrTable {
	c := addrTable{slots: make([]*block, len(t.slots)), n: t.n, shift: t.shift}
	for i, b := range t.slots {
		if b != nil {
			c.slots[i] = copyOf(b)
		}
	}
	return c
}
