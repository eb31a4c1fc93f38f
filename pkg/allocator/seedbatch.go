package allocator

// Seeding a starting state of a million live blocks put each into the
// table of handed-out blocks (or of pending ones) as it was laid out, in
// address order: the home slots of consecutive addresses are scattered
// over a table of tens of MB, so every insert missed the cache (a third of
// seeding torch-1GB's 1.3 M blocks, profile). A seed batch holds them
// until it ends and then inserts them grouped by the part of the table
// their home slots lie in, each part a few KB.

// seedBatch holds the blocks SeedSegment handed out and those it left
// pending, in the order it did.
type seedBatch struct {
	allocated, pending []*block
}

// BeginSeedBatch starts a seed batch: until EndSeedBatch, the blocks
// SeedSegment hands out or leaves pending are put in the allocator's
// address tables at the end, in bulk. Between the two, only
// SeedReservation, SeedSegment, AddUnmodelled, ReserveAllocated,
// ReservePending and Stats may be called: nothing else may look a block
// up by its address. allocated and pending are how many blocks of each
// the batch is sized for (it grows past them). A batch already begun is
// kept.
func (a *Allocator) BeginSeedBatch(allocated, pending int) {
	if a.seedBatch == nil {
		a.seedBatch = &seedBatch{allocated: make([]*block, 0, allocated), pending: make([]*block, 0, pending)}
	}
}

// EndSeedBatch puts the batch's blocks in their tables; the allocator's
// state is then the one SeedSegment alone leaves. Without a batch it does
// nothing.
func (a *Allocator) EndSeedBatch() {
	sb := a.seedBatch
	if sb == nil {
		return
	}
	a.seedBatch = nil
	a.allocated.putAbsent(sb.allocated)
	a.pending.putAbsent(sb.pending)
}

// putAllocated puts a block just handed out in the handed-out blocks'
// table, or in the seed batch.
func (a *Allocator) putAllocated(b *block) {
	if sb := a.seedBatch; sb != nil {
		sb.allocated = append(sb.allocated, b)
		return
	}
	a.allocated.put(b)
}

// putPending is putAllocated for the pending blocks' table.
func (a *Allocator) putPending(b *block) {
	if sb := a.seedBatch; sb != nil {
		sb.pending = append(sb.pending, b)
		return
	}
	a.pending.put(b)
}

// seedPartBits: putAbsent groups a table's slots in 1<<seedPartBits parts.
const seedPartBits = 10

// putAbsent inserts blocks at distinct addresses, none of which t holds.
// They are put in groups by the part of the table their home slots fall
// in, so that the inserts of one group touch a few KB of slots: the
// layout is one that inserting them one by one in that order makes, and
// as a key is absent, a probe looks at empty slots only, never at the
// blocks it passes. bs is reordered.
func (t *addrTable) putAbsent(bs []*block) {
	if len(bs) == 0 {
		return
	}
	t.reserve(t.n + len(bs))
	bits := uint(64) - t.shift
	if len(bs) < 1<<seedPartBits || bits <= seedPartBits {
		for _, b := range bs {
			t.put(b)
		}
		return
	}
	// Each block's home slot, read once in the batch's order (the order
	// the blocks were made in, near each other in memory).
	homes := make([]uint32, len(bs))
	var count [1 << seedPartBits]int
	partShift := bits - seedPartBits
	for i, b := range bs {
		h := uint32(t.slot(b.addr))
		homes[i] = h
		count[h>>partShift]++
	}
	// Sort blocks and homes by part in place (a one-digit radix sort that
	// moves each element to its part's next place in cycles).
	var next, end [1 << seedPartBits]int
	at := 0
	for p, n := range count {
		next[p] = at
		at += n
		end[p] = at
	}
	for p := range next {
		for next[p] < end[p] {
			i := next[p]
			h, b := homes[i], bs[i]
			for q := int(h >> partShift); q != p; q = int(h >> partShift) {
				j := next[q]
				next[q]++
				h, homes[j] = homes[j], h
				b, bs[j] = bs[j], b
			}
			homes[i], bs[i] = h, b
			next[p]++
		}
	}
	mask := len(t.slots) - 1
	for k, b := range bs {
		i := int(homes[k])
		for t.slots[i] != nil {
			i = (i + 1) & mask
		}
		t.slots[i] = b
	}
	t.n += len(bs)
}
