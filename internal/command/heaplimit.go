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
// parallel.HeapLimit), so that every command keeps its heap within
// about its files' size, or what their replays need where that is more
// (commands hold more than stats' replay: captured states, timelines);
// ReleaseHeapLimit lifts it when the command returns.
var heapLimit struct {
	mu sync.Mutex
	h  *parallel.HeapLimit
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
	}
	heapLimit.h.Add(file)
}

// heapLoaded raises the limit to what replaying s needs (the live heap
// measured now plus the replay's share), when that is more than the
// files' size.
func heapLoaded(s *snapshot.Snapshot) {
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
	heapLimit.h.AddLoaded(entries, blocks)
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
