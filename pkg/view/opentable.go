package view

// openTable maps the address of each allocated block to its open
// interval while the model's replay runs: every alloc entry puts one and
// every free looks one up and removes it. With a Go map those two
// lookups an entry were half of the view's own work in the replay's
// callback (0.09 s of 0.19 s a run on torch-100MB); here one probe
// sequence finds the slot to read, fill or empty (open addressing, linear
// probing, backward-shift deletion: no tombstones), in 16-byte slots, at
// most three quarters full, as a Go map of the same would hold.
type openTable struct {
	slots []openSlot
	n     int
	shift uint // 64 - log2(len(slots))
}

// openSlot is one entry; k1 is the interval plus one (0: empty).
type openSlot struct {
	addr uint64
	k1   uint32
}

func (t *openTable) home(addr uint64) int {
	return int((addr * 0x9E3779B97F4A7C15) >> t.shift) // Fibonacci hashing: blocks are 512-aligned
}

// find returns the slot of addr and whether it holds addr; when it does
// not, the slot is where put would place it.
func (t *openTable) find(addr uint64) (int, bool) {
	if t.slots == nil {
		t.resize(1 << 10)
	}
	mask := len(t.slots) - 1
	for i := t.home(addr); ; i = (i + 1) & mask {
		if s := &t.slots[i]; s.k1 == 0 || s.addr == addr {
			return i, s.k1 != 0
		}
	}
}

// put maps addr to interval k, replacing what addr mapped to.
func (t *openTable) put(addr uint64, k int32) {
	i, ok := t.find(addr)
	if ok {
		t.slots[i].k1 = uint32(k) + 1
		return
	}
	if 4*(t.n+1) > 3*len(t.slots) {
		t.resize(2 * len(t.slots))
		i, _ = t.find(addr)
	}
	t.slots[i] = openSlot{addr: addr, k1: uint32(k) + 1}
	t.n++
}

// take removes addr and returns its interval (false: addr has none).
func (t *openTable) take(addr uint64) (int32, bool) {
	i, ok := t.find(addr)
	if !ok {
		return 0, false
	}
	k := int32(t.slots[i].k1 - 1)
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].k1 != 0; j = (j + 1) & mask {
		h := t.home(t.slots[j].addr)
		// The entry at j stays when its home lies cyclically in (i, j].
		if i <= j && i < h && h <= j || i > j && (i < h || h <= j) {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = openSlot{}
	t.n--
	return k, true
}

func (t *openTable) resize(n int) {
	old := t.slots
	t.slots = make([]openSlot, n)
	t.shift = 64
	for m := n; m > 1; m >>= 1 {
		t.shift--
	}
	for i := range old {
		if old[i].k1 != 0 {
			j, _ := t.find(old[i].addr)
			t.slots[j] = old[i]
		}
	}
}
