package replay

import (
	"sync"
	"sync/atomic"

	"github.com/memstat/memstat/pkg/snapshot"
)

// StartScan runs the start rebuild's pass over a trace (touchScan: the
// addresses blocks are allocated or freed at, first-event frees, the
// stacks free entries carry, the segment events) on a goroutine of its
// own while the trace is still being read: the reader hands it each
// finished part (Grown, as snapshot.LoadOptions.TraceGrown), and the
// replay of a device whose trace continues what it scanned
// (Options.StartScan) takes its halves and scans only the rest. Reading
// a 100 MB pickle leaves the second core mostly idle; the pass then
// costs the replay its last part only.
//
// The halves it hands over are the ones reconstructStart's own pass
// makes: each address falls in one half by the same hash bit, and each
// half sees its entries in trace order, so the start state is the same
// (TestStartScanSameResult).
type StartScan struct {
	mu      sync.Mutex
	latest  *snapshot.Trace
	stopped bool
	taken   bool
	wake    chan struct{}
	done    chan struct{}

	// halt asks the goroutine to stop within a block of entries: a
	// replay that takes the scan scans the rest on both cores rather
	// than wait for one to finish it.
	halt atomic.Bool

	// Owned by the goroutine until done is closed.
	shards [2]touchScan
	// segs are the segment events scanned, in trace order.
	segs []firstFree
	// n entries are scanned, of the part handed on last scanned from.
	n       int
	scanned *snapshot.Trace
}

// NewStartScan starts a scan. The caller stops it (Stop) once its
// replays are made, or when the reading fails; a replay that takes it
// stops it first.
func NewStartScan() *StartScan {
	s := &StartScan{wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.run()
	return s
}

// Grown hands the scan the trace read so far (a snapshot.TraceBuilder's
// Closed trace: entries never written again). It does not block.
func (s *StartScan) Grown(prefix *snapshot.Trace) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.latest = prefix
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Stop waits for the scan of the parts handed to it so far (unless a
// replay halted it) and ends its goroutine. Later calls do nothing.
func (s *StartScan) Stop() {
	s.mu.Lock()
	if !s.stopped {
		s.stopped = true
		close(s.wake)
	}
	s.mu.Unlock()
	<-s.done
}

func (s *StartScan) run() {
	defer close(s.done)
	// A wake left when Stop closes the channel is still taken: the scan
	// covers every part handed to it before Stop, whatever the timing.
	for range s.wake {
		s.mu.Lock()
		p := s.latest
		s.mu.Unlock()
		if p != nil && p.Len() > s.n && (s.scanned == nil || p.Extends(s.scanned)) {
			if !s.scan(p) {
				return
			}
		}
	}
}

// scan notes the entries of p past those scanned, each in its half; it
// returns false when halted.
func (s *StartScan) scan(p *snapshot.Trace) bool {
	s.scanned = p
	for i, e := range p.From(s.n) {
		if i&(haltEvery-1) == 0 && s.halt.Load() {
			return false
		}
		s.n = i + 1
		switch e.Action {
		case snapshot.ActionAlloc, snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted, snapshot.ActionFree:
			s.shards[touchShard(e.Addr)].note(i, &e)
		case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentFree, snapshot.ActionSegmentMap, snapshot.ActionSegmentUnmap:
			s.segs = append(s.segs, firstFree{i, e})
		}
	}
	return true
}

// haltEvery: the scan looks at halt once per this many entries.
const haltEvery = 256

// take halts the scan and returns it if tr continues the trace it
// scanned (and it scanned something, and no replay took it before), nil
// otherwise. A nil StartScan takes nothing.
func (s *StartScan) take(tr *snapshot.Trace) *StartScan {
	if s == nil {
		return nil
	}
	s.halt.Store(true)
	s.Stop()
	if s.taken || s.n == 0 || s.n > tr.Len() || !tr.Extends(s.scanned) {
		return nil
	}
	s.taken = true
	return s
}
