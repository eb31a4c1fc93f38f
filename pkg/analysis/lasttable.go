package analysis

// lastTable maps addresses to int32 values and never forgets one: the
// scan's last alloc entry at each address of a trace. Open addressing
// with linear probing, at most three quarters full, keys and values in
// arrays of their own (12 bytes a slot). A generated trace allocates at a
// new address each time (torch-100MB: 314,592 addresses), and the Go map
// it replaces spent most of the scan growing (rehashing every group at
// each split) and probing twice an alloc entry (the predecessor read,
// then the entry set), where one probe here finds the slot to read and
// set.
type lastTable struct {
	keys  []uint64 // 0: empty (key 0 kept aside)
	vals  []int32
	n     int
	shift uint // 64 - log2(len(keys))
	// Address 0 (possible in a hand-made or hostile trace).
	hasZero bool
	zero    int32
}

func (t *lastTable) home(addr uint64) int {
	return int((addr * 0x9E3779B97F4A7C15) >> t.shift) // Fibonacci hashing: blocks are 512-aligned
}

// len is the number of addresses held.
func (t *lastTable) len() int {
	if t.hasZero {
		return t.n + 1
	}
	return t.n
}

// get returns addr's value.
func (t *lastTable) get(addr uint64) (int32, bool) {
	if addr == 0 {
		return t.zero, t.hasZero
	}
	if t.n == 0 {
		return 0, false
	}
	mask := len(t.keys) - 1
	for i := t.home(addr); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case addr:
			return t.vals[i], true
		case 0:
			return 0, false
		}
	}
}

// swap sets addr's value to v and returns the value it had (ok: it had
// one).
func (t *lastTable) swap(addr uint64, v int32) (old int32, ok bool) {
	if addr == 0 {
		old, ok = t.zero, t.hasZero
		t.zero, t.hasZero = v, true
		return old, ok
	}
	if 4*(t.n+1) > 3*len(t.keys) {
		t.resize(max(1<<10, 2*len(t.keys)))
	}
	mask := len(t.keys) - 1
	for i := t.home(addr); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case addr:
			old = t.vals[i]
			t.vals[i] = v
			return old, true
		case 0:
			t.keys[i], t.vals[i] = addr, v
			t.n++
			return 0, false
		}
	}
}

func (t *lastTable) resize(n int) {
	oldKeys, oldVals := t.keys, t.vals
	t.keys, t.vals = make([]uint64, n), make([]int32, n)
	t.shift = 64
	for m := n; m > 1; m >>= 1 {
		t.shift--
	}
	mask := n - 1
	for j, k := range oldKeys {
		if k == 0 {
			continue
		}
		i := t.home(k)
		for t.keys[i] != 0 {
			i = (i + 1) & mask
		}
		t.keys[i], t.vals[i] = k, oldVals[j]
	}
}
