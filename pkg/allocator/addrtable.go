package allocator

// addrTable maps device addresses to blocks. Every Malloc inserts one entry
// and every Free looks one up and deletes it, so this is on the hot path; a
// dedicated open-addressing table (linear probing, backward-shift deletion,
// no tombstones) does each in one probe sequence, where a Go map needs a
// lookup and a separate delete. Address 0 is never a block address and
// marks an empty slot.
type addrTable struct {
	// slots hold key and block side by side: a lookup that finds its key
	// reads one cache line, where separate key and value arrays missed
	// twice (tables of a million blocks do not fit any cache).
	slots []addrSlot
	n     int
	shift uint // 64 - log2(len(slots))
}

type addrSlot struct {
	k uint64
	v *block
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
		switch s := &t.slots[i]; s.k {
		case k:
			return s.v
		case 0:
			return nil
		}
	}
}

// put inserts or replaces the entry for k (k != 0).
func (t *addrTable) put(k uint64, v *block) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	mask := len(t.slots) - 1
	for i := t.slot(k); ; i = (i + 1) & mask {
		switch s := &t.slots[i]; s.k {
		case k:
			s.v = v
			return
		case 0:
			s.k, s.v = k, v
			t.n++
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
	for t.slots[i].k != k {
		if t.slots[i].k == 0 {
			return nil
		}
		i = (i + 1) & mask
	}
	v := t.slots[i].v
	// Backward-shift: move later entries of the probe run into the hole
	// when their home slot does not lie between the hole and them.
	for j := (i + 1) & mask; t.slots[j].k != 0; j = (j + 1) & mask {
		home := t.slot(t.slots[j].k)
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = addrSlot{}
	t.n--
	return v
}

func (t *addrTable) grow() {
	size := max(16, 2*len(t.slots))
	old := t.slots
	shift := uint(64)
	for s := size; s > 1; s >>= 1 {
		shift--
	}
	*t = addrTable{slots: make([]addrSlot, size), shift: shift, n: t.n}
	mask := size - 1
	for _, s := range old {
		if s.k == 0 {
			continue
		}
		i := t.slot(s.k)
		for t.slots[i].k != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// each calls fn for every entry, in no particular order.
func (t *addrTable) each(fn func(uint64, *block)) {
	for _, s := range t.slots {
		if s.k != 0 {
			fn(s.k, s.v)
		}
	}
}

// cloneWith copies the table slot for slot, mapping every block to its
// copy. Re-inserting the entries instead, in slot order, clusters the
// probe runs of the growing new table: cloning 240,000 entries that way
// took 150 ms.
func (t *addrTable) cloneWith(copyOf func(*block) *block) addrTable {
	c := addrTable{slots: make([]addrSlot, len(t.slots)), n: t.n, shift: t.shift}
	for i, s := range t.slots {
		if s.k != 0 {
			c.slots[i] = addrSlot{s.k, copyOf(s.v)}
		}
	}
	return c
}
