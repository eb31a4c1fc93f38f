package command

import (
	"math"
	"runtime/debug"
	"sync"

	"github.com/memstat/memstat/internal/parallel"
	"github.com/memstat/memstat/pkg/snapshot"
)

// heapLimit is the soft memory limit of the command running, set by
// LoadSnapshot from the files it loads and what their replays need (see
// parallel.HeapLimit): for a command that said what it keeps (NeedHeap),
// that need and a margin; for the others, at least their files' size (they
// hold more than stats' replay: timelines, models). ReleaseHeapLimit lifts
// it when the command returns.
var heapLimit struct {
	mu   sync.Mutex
	h    *parallel.HeapLimit
	need *HeapNeed
}

// HeapNeed is what a command keeps besides its replays' state, per trace
// entry and per block of the final segments of each snapshot it loads:
// the figures after each entry, the states it captured to print. Measured
// (GODEBUG=gctrace=1, the live heap after each collection) against stats'
// on torch-1GB.
type HeapNeed struct {
	PerEntry, PerBlock int64
}

// What commands keep, for their HeapNeed.
const (
	// FiguresPerEntry: allocated and reserved memory after each entry as
	// analysis.Want.CompactFigures keeps them (4 bytes an entry, and
	// reserved memory's changes).
	FiguresPerEntry = 4
	// StatePerBlock: one captured state's copy of a block
	// (snapshot.Block, 32 bytes). peak, oom and segments --at peak hold
	// two while they replay: the state before the first entry and the
	// best guess at the peak.
	StatePerBlock = 32
)

// NeedHeap says what the running command keeps (see HeapNeed): the limit
// LoadSnapshot sets then follows the need, as stats' does (half the file
// while it loads, then the live heap, the replay's share, this and a
// margin), instead of the files' size. Call it before LoadSnapshot;
// ReleaseHeapLimit forgets it. A command that does not call it keeps the
// files' size as a floor.
func NeedHeap(n HeapNeed) {
	heapLimit.mu.Lock()
	defer heapLimit.mu.Unlock()
	heapLimit.need = &n
	if heapLimit.h != nil {
		heapLimit.h.Hold(n.PerEntry, n.PerBlock)
	}
}

// limitHeapFor adds file to the limit; a limit someone else set (the
// user's GOMEMLIMIT, or a command's own) is left alone.
func limitHeapFor(file string) {
	heapLimit.mu.Lock()
	defer heapLimit.mu.Unlock()
	if heapLimit.h == nil {
		if debug.SetMemoryLimit(-1) != math.MaxInt64 {
			return
		}
		heapLimit.h = parallel.NewHeapLimit(parallel.DefaultBudget())
		if n := heapLimit.need; n != nil {
			heapLimit.h.Hold(n.PerEntry, n.PerBlock)
		}
	}
	heapLimit.h.Add(file)
}

// heapLoaded raises the limit to what replaying s needs (the live heap
// measured now plus the replay's share), when that is more than the
// files' size.
func heapLoaded(s *snapshot.Snapshot) { heapLoadedAside(s, 0) }

// heapLoadedAside is heapLoaded where aside bytes of the live heap are
// the replay's already (parallel.HeapLimit.AddLoadedAside).
func heapLoadedAside(s *snapshot.Snapshot, aside int64) {
	heapLimit.mu.Lock()
	defer heapLimit.mu.Unlock()
	if heapLimit.h == nil {
		return
	}
	entries, blocks := 0, 0
	for _, tr := range s.Traces {
		entries += tr.Len()
	}
	for i := range s.Segments {
		blocks += len(s.Segments[i].Blocks)
	}
	heapLimit.h.AddLoadedAside(entries, blocks, aside)
}

// ReleaseHeapLimit restores the memory limit there was before the command
// loaded its first snapshot. root.Main calls it when the command returns.
func ReleaseHeapLimit() {
	heapLimit.mu.Lock()
	defer heapLimit.mu.Unlock()
	if heapLimit.h != nil {
		heapLimit.h.Release()
		heapLimit.h = nil
	}
	heapLimit.need = nil
}

// LimitHeapTo sets the limit LoadSnapshot set to n bytes instead (a
// command that knows what it keeps, such as a server holding one device's
// index, sets a tighter one than LoadSnapshot's floor); it does nothing
// when no such limit is active (the user's GOMEMLIMIT, or no file loaded).
func LimitHeapTo(n int64) {
	heapLimit.mu.Lock()
	defer heapLimit.mu.Unlock()
	if heapLimit.h != nil {
		heapLimit.h.SetTo(n)
	}
}
