package replay

// addrMap maps addresses to 32-bit values: the table the scans of a whole
// trace use (which addresses it touches, the stack of each live
// allocation). A trace of millions of entries touches millions of
// addresses; a Go map spent most of that scan probing and growing (3 s of
// the 11 s replay of a 1 GB trace), this open-addressing table (linear
// probing on a multiplicative hash, backward-shift deletion) a fraction.
// Unlike addrTable it accepts address 0.
type addrMap struct {
	keys []uint64 // 0: empty slot
	// vals is nil until a value other than 0 is put: used as a set, the
	// table costs 8 bytes a slot.
	vals    []uint32
	n       int
	shift   uint // 64 - log2(len(keys))
	hasZero bool // key 0, kept aside
	zeroVal uint32
}

func (m *addrMap) slot(k uint64) int {
	return int(((k >> 9) * 0x9E3779B97F4A7C15) >> m.shift)
}

func (m *addrMap) len() int {
	if m.hasZero {
		return m.n + 1
	}
	return m.n
}

// get returns the value of k.
func (m *addrMap) get(k uint64) (uint32, bool) {
	if k == 0 {
		return m.zeroVal, m.hasZero
	}
	if m.n == 0 {
		return 0, false
	}
	mask := len(m.keys) - 1
	for i := m.slot(k); ; i = (i + 1) & mask {
		switch m.keys[i] {
		case k:
			if m.vals == nil {
				return 0, true
			}
			return m.vals[i], true
		case 0:
			return 0, false
		}
	}
}

// touch reads the slot where k's probe starts and returns what it read
// (a scan's read ahead: the cache lines are then at hand when k is put or
// looked up). It changes nothing.
func (m *addrMap) touch(k uint64) uint64 {
	if len(m.keys) == 0 {
		return 0
	}
	i := m.slot(k)
	if m.vals != nil {
		return m.keys[i] + uint64(m.vals[i])
	}
	return m.keys[i]
}

// put sets the value of k and reports whether k was new.
func (m *addrMap) put(k uint64, v uint32) bool {
	if k == 0 {
		added := !m.hasZero
		m.hasZero, m.zeroVal = true, v
		return added
	}
	if 2*(m.n+1) > len(m.keys) {
		m.grow()
	}
	if v != 0 && m.vals == nil {
		m.vals = make([]uint32, len(m.keys))
	}
	mask := len(m.keys) - 1
	for i := m.slot(k); ; i = (i + 1) & mask {
		switch m.keys[i] {
		case k:
			if m.vals != nil {
				m.vals[i] = v
			}
			return false
		case 0:
			m.keys[i] = k
			if m.vals != nil {
				m.vals[i] = v
			}
			m.n++
			return true
		}
	}
}

// del removes k.
func (m *addrMap) del(k uint64) {
	if k == 0 {
		m.hasZero, m.zeroVal = false, 0
		return
	}
	if m.n == 0 {
		return
	}
	mask := len(m.keys) - 1
	i := m.slot(k)
	for m.keys[i] != k {
		if m.keys[i] == 0 {
			return
		}
		i = (i + 1) & mask
	}
	// Backward shift: move later entries of the probe run into the hole
	// when their home slot does not lie between the hole and them.
	for j := (i + 1) & mask; m.keys[j] != 0; j = (j + 1) & mask {
		home := m.slot(m.keys[j])
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			m.keys[i] = m.keys[j]
			if m.vals != nil {
				m.vals[i] = m.vals[j]
			}
			i = j
		}
	}
	m.keys[i] = 0
	if m.vals != nil {
		m.vals[i] = 0
	}
	m.n--
}

// reserve sizes an empty table for n keys without growing.
func (m *addrMap) reserve(n int) {
	if m.n != 0 || 2*n <= len(m.keys) {
		return
	}
	size, shift := 64, uint(64-6)
	for size < 2*n+2 {
		size, shift = size*2, shift-1
	}
	m.keys, m.vals, m.shift = make([]uint64, size), nil, shift
}

func (m *addrMap) grow() {
	size := max(64, 2*len(m.keys))
	oldKeys, oldVals := m.keys, m.vals
	shift := uint(64)
	for s := size; s > 1; s >>= 1 {
		shift--
	}
	m.keys, m.vals, m.shift = make([]uint64, size), nil, shift
	if oldVals != nil {
		m.vals = make([]uint32, size)
	}
	mask := size - 1
	for j, k := range oldKeys {
		if k == 0 {
			continue
		}
		i := m.slot(k)
		for m.keys[i] != 0 {
			i = (i + 1) & mask
		}
		m.keys[i] = k
		if oldVals != nil {
			m.vals[i] = oldVals[j]
		}
	}
}

// each calls fn for every key, in no particular order.
func (m *addrMap) each(fn func(k uint64, v uint32)) {
	if m.hasZero {
		fn(0, m.zeroVal)
	}
	for i, k := range m.keys {
		if k != 0 {
			var v uint32
			if m.vals != nil {
				v = m.vals[i]
			}
			fn(k, v)
		}
	}
}

// addrPairs maps addresses to addresses: a what-if replay's recorded
// address of each live allocation to the simulator's. It is addrMap with
// 64-bit values kept beside their keys, so a lookup touches one cache
// line: a Go map here spent a third of the what-if replay's step loop
// probing (its groups' control words, then the slots, missing the cache
// on a table of hundreds of thousands of live allocations, with the
// trace's deletions leaving tombstones behind).
type addrPairs struct {
	slots   []addrPair // key 0: empty slot
	n       int
	shift   uint // 64 - log2(len(slots))
	hasZero bool // key 0, kept aside
	zeroVal uint64
}

type addrPair struct{ k, v uint64 }

func (m *addrPairs) slot(k uint64) int {
	return int(((k >> 9) * 0x9E3779B97F4A7C15) >> m.shift)
}

func (m *addrPairs) len() int {
	if m.hasZero {
		return m.n + 1
	}
	return m.n
}

// get returns the value of k.
func (m *addrPairs) get(k uint64) (uint64, bool) {
	if k == 0 {
		return m.zeroVal, m.hasZero
	}
	if m.n == 0 {
		return 0, false
	}
	mask := len(m.slots) - 1
	for i := m.slot(k); ; i = (i + 1) & mask {
		switch s := &m.slots[i]; s.k {
		case k:
			return s.v, true
		case 0:
			return 0, false
		}
	}
}

// touch reads the slot where k's probe starts (the step loop's read
// ahead: the cache line is then at hand when k is looked up).
func (m *addrPairs) touch(k uint64) uint64 {
	if len(m.slots) == 0 {
		return 0
	}
	return m.slots[m.slot(k)].k
}

// put sets the value of k.
func (m *addrPairs) put(k, v uint64) {
	if k == 0 {
		m.hasZero, m.zeroVal = true, v
		return
	}
	if 2*(m.n+1) > len(m.slots) {
		m.resize(max(64, 2*len(m.slots)))
	}
	mask := len(m.slots) - 1
	for i := m.slot(k); ; i = (i + 1) & mask {
		switch s := &m.slots[i]; s.k {
		case k:
			s.v = v
			return
		case 0:
			s.k, s.v = k, v
			m.n++
			return
		}
	}
}

// del removes k.
func (m *addrPairs) del(k uint64) {
	if k == 0 {
		m.hasZero, m.zeroVal = false, 0
		return
	}
	if m.n == 0 {
		return
	}
	mask := len(m.slots) - 1
	i := m.slot(k)
	for m.slots[i].k != k {
		if m.slots[i].k == 0 {
			return
		}
		i = (i + 1) & mask
	}
	// Backward shift, as addrMap.del.
	for j := (i + 1) & mask; m.slots[j].k != 0; j = (j + 1) & mask {
		home := m.slot(m.slots[j].k)
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			m.slots[i] = m.slots[j]
			i = j
		}
	}
	m.slots[i] = addrPair{}
	m.n--
}

// reserve sizes the table for n keys, as n puts would grow it, without
// the copies of the doublings on the way.
func (m *addrPairs) reserve(n int) {
	size := max(64, len(m.slots))
	for 2*n > size {
		size *= 2
	}
	if size > len(m.slots) {
		m.resize(size)
	}
}

func (m *addrPairs) resize(size int) {
	old := m.slots
	shift := uint(64)
	for s := size; s > 1; s >>= 1 {
		shift--
	}
	m.slots, m.shift = make([]addrPair, size), shift
	mask := size - 1
	for _, p := range old {
		if p.k == 0 {
			continue
		}
		i := m.slot(p.k)
		for m.slots[i].k != 0 {
			i = (i + 1) & mask
		}
		m.slots[i] = p
	}
}
