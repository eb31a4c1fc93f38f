package analysis

import "github.com/memstat/memstat/pkg/snapshot"

// traceLive is what a trace walk knows of a live block: its name (named:
// it was allocated in the trace), the stack that allocated it, and where
// it lies (ok: in a segment).
type traceLive struct {
	seg   uint64
	off   int64
	name  int32
	stack snapshot.StackID
	named bool
	ok    bool
	// used marks a liveTable slot taken (in the struct's padding: a slot
	// is 40 bytes, not 48).
	used bool
}

// liveTable maps live blocks' addresses to their traceLive: open
// addressing with linear probing, at most three quarters full, 40 bytes a
// slot (a Go map of the same takes about as much). A trace listing looks
// up every alloc and free; with a Go map those lookups (two or three an
// entry: get, then set or delete) were a third of the walk's own time,
// where one probe here finds the slot to read, fill or empty.
// TraceLivePerBlock is what a trace walk's live blocks hold (the
// liveTable), per live block at the table's sparsest (40-byte slots, 3/8
// full after it doubles: 107 B): commands that walk a trace count it in their
// heap limit's need, per block of the final segments, which stand for
// the live blocks.
const TraceLivePerBlock = 112

type liveTable struct {
	slots []liveSlot
	n     int
	shift uint // 64 - log2(len(slots))
}

type liveSlot struct {
	addr uint64
	v    traceLive
}

func (t *liveTable) home(addr uint64) int {
	return int((addr * 0x9E3779B97F4A7C15) >> t.shift) // Fibonacci hashing: blocks are 512-aligned
}

// find returns the slot of addr and whether it holds addr; when it does
// not, the slot is where put would place it.
func (t *liveTable) find(addr uint64) (int, bool) {
	if t.slots == nil {
		t.resize(1 << 10)
	}
	mask := len(t.slots) - 1
	for i := t.home(addr); ; i = (i + 1) & mask {
		if s := &t.slots[i]; !s.v.used || s.addr == addr {
			return i, s.v.used
		}
	}
}

// put sets addr's entry to v, in slot i when find returned i for addr.
func (t *liveTable) put(i int, addr uint64, v traceLive) {
	v.used = true
	if s := &t.slots[i]; s.v.used {
		s.v = v
		return
	}
	if 4*(t.n+1) > 3*len(t.slots) {
		t.resize(2 * len(t.slots))
		i, _ = t.find(addr)
	}
	t.slots[i] = liveSlot{addr: addr, v: v}
	t.n++
}

// remove empties slot i (find returned it holding its address), moving
// back the entries after it that probed past it, so that no tombstone is
// left.
func (t *liveTable) remove(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].v.used; j = (j + 1) & mask {
		k := t.home(t.slots[j].addr)
		// The entry at j stays when its home lies cyclically in (i, j].
		if i <= j && i < k && k <= j || i > j && (i < k || k <= j) {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = liveSlot{}
	t.n--
}

func (t *liveTable) resize(n int) {
	old := t.slots
	t.slots = make([]liveSlot, n)
	t.shift = 64
	for m := n; m > 1; m >>= 1 {
		t.shift--
	}
	t.n = 0
	for i := range old {
		if old[i].v.used {
			j, _ := t.find(old[i].addr)
			t.slots[j] = old[i]
			t.n++
		}
	}
}
