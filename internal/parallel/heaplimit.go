package parallel

import (
	"os"
	"runtime/debug"
)

// HeapLimit keeps the heap of a command that works on one large snapshot
// within the size of the file where it can. Go's collector lets the heap
// grow to twice what is live between collections, so replaying a 1 GB
// snapshot whose data takes 800 MB peaked at 1.3 GB; a soft memory limit
// (runtime/debug.SetMemoryLimit) makes the collector work harder near the
// limit instead, and never fails an allocation. The limit is the larger of
// the file's size and what the loaded snapshot is expected to need, so that
// a snapshot whose state outweighs its file (few trace entries, a million
// blocks) is not starved into collecting without end.
type HeapLimit struct {
	file, need, budget int64
	prev               int64
	active             bool
}

const (
	// minHeapLimit: below this the limit saves nothing worth the
	// collector's time.
	minHeapLimit = 256 << 20
	// What the replay of a loaded snapshot holds, per trace entry (the
	// entry in the compact snapshot.Trace, about 12 bytes, and its share
	// of the rebuild's address set, about 8) and per block of the final
	// segments (the snapshot's block, the simulator's block, its
	// address-table slot and free-set share).
	heapPerEntry = 20
	heapPerBlock = 160 // torch-1GB: replay.New adds 129 B a block (192 while blocks took 144 B), the snapshot's Block 32
)

// LimitHeapToFile sets the limit for reading path: its size (at least
// minHeapLimit), at most budget. It sets nothing for a file it cannot
// stat or a gzip-compressed one (the decoded size is unknown); the
// caller leaves it out when the user set GOMEMLIMIT.
func LimitHeapToFile(path string, budget int64) *HeapLimit {
	h := NewHeapLimit(budget)
	h.Add(path)
	return h
}

// NewHeapLimit returns a limit of at most budget that files are added to;
// it sets nothing yet.
func NewHeapLimit(budget int64) *HeapLimit { return &HeapLimit{budget: budget} }

// Add adds path's size to the limit, for a command that reads several
// files (diff), and sets it; see LimitHeapToFile.
func (h *HeapLimit) Add(path string) {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || isGzip(path) {
		return
	}
	h.file += fi.Size()
	h.apply()
}

// Loaded raises the limit to what replaying a loaded snapshot of entries
// trace entries and blocks blocks is expected to need, with a tenth more,
// when that is more than the file's size.
func (h *HeapLimit) Loaded(entries, blocks int) {
	if !h.active {
		return
	}
	h.need = heapNeed(entries, blocks)
	h.apply()
}

// AddLoaded is Loaded for one more snapshot: the needs add up.
func (h *HeapLimit) AddLoaded(entries, blocks int) {
	if !h.active {
		return
	}
	h.need += heapNeed(entries, blocks)
	h.apply()
}

func heapNeed(entries, blocks int) int64 {
	return int64(entries)*heapPerEntry + int64(blocks)*heapPerBlock
}

func (h *HeapLimit) apply() { h.set(max(h.file, minHeapLimit, h.need+h.need/10)) }

// Release restores the limit there was before.
func (h *HeapLimit) Release() {
	if h.active {
		debug.SetMemoryLimit(h.prev)
		h.active = false
	}
}

func (h *HeapLimit) set(n int64) {
	if h.budget > 0 {
		n = min(n, h.budget)
	}
	if !h.active {
		h.prev = debug.SetMemoryLimit(n)
		h.active = true
		return
	}
	debug.SetMemoryLimit(n)
}

// SetTo sets the limit to n (at most the budget) once it is active: for a
// command that knows its heap better than the file's size does.
func (h *HeapLimit) SetTo(n int64) {
	if h.active {
		h.set(n)
	}
}
