package allocator

import "slices"

// addrTable maps device addresses to blocks. Every Malloc inserts one entry
// and every Free looks one up and deletes it, so this is on the hot path; a
// dedicated open-addressing table (linear probing, backward-shift deletion,
// no tombstones) does each in one probe sequence, where a Go map needs a
// lookup and a separate delete. Address 0 is never a block address and
// marks an empty slot.
type addrTable struct {
	keys  []uint64
	vals  []*block
	n     int
	shift uint // 64 - log2(len(keys))
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
	mask := len(t.keys) - 1
	for i := t.slot(k); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case k:
			return t.vals[i]
		case 0:
			return nil
		}
	}
}

// put inserts or replaces the entry for k (k != 0).
func (t *addrTable) put(k uint64, v *block) {
	if 2*(t.n+1) > len(t.keys) {
		t.grow()
	}
	mask := len(t.keys) - 1
	for i := t.slot(k); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case k:
			t.vals[i] = v
			return
		case 0:
			t.keys[i], t.vals[i] = k, v
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
	mask := len(t.keys) - 1
	i := t.slot(k)
	for t.keys[i] != k {
		if t.keys[i] == 0 {
			return nil
		}
		i = (i + 1) & mask
	}
	v := t.vals[i]
	// Backward-shift: move later entries of the probe run into the hole
	// when their home slot does not lie between the hole and them.
	for j := (i + 1) & mask; t.keys[j] != 0; j = (j + 1) & mask {
		home := t.slot(t.keys[j])
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.keys[i], t.vals[i] = t.keys[j], t.vals[j]
			i = j
		}
	}
	t.keys[i], t.vals[i] = 0, nil
	t.n--
	return v
}

func (t *addrTable) grow() {
	size := max(16, 2*len(t.keys))
	old := *t
	shift := uint(64)
	for s := size; s > 1; s >>= 1 {
		shift--
	}
	*t = addrTable{keys: make([]uint64, size), vals: make([]*block, size), shift: shift}
	for i, k := range old.keys {
		if k != 0 {
			t.put(k, old.vals[i])
		}
	}
}

// each calls fn for every entry, in no particular order.
func (t *addrTable) each(fn func(uint64, *block)) {
	for i, k := range t.keys {
		if k != 0 {
			fn(k, t.vals[i])
		}
	}
}

// cloneWith copies the table slot for slot, mapping every block to its
// copy. Re-inserting the entries instead, in slot order, clusters the
// probe runs of the growing new table: cloning 240,000 entries that way
// took 150 ms.
func (t *addrTable) cloneWith() addrTable {
	c := addrTable{keys: slices.Clone(t.keys), vals: make([]*block, len(t.vals)), n: t.n, shift: t.shift}
	for i, v := range t.vals {
		if v != nil {
			c.vals[i] = v.copy
		}
	}
	return c
}
