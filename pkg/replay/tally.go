package replay

import (
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// traceTally is what a follow replay's bounds read from the whole trace,
// counted in one pass (tallyTrace): traceBounds' ooms and possible
// retries, and unappliedBounds' sums of the recorded allocations. It
// depends on the trace and the configuration alone, not on the replayed
// state, so Run counts it on another core while the step loop runs
// (startTally), and Result takes it.
type traceTally struct {
	// traceBounds: the ooms, the allocations a retry may have served,
	// and the gaps that certainly emptied the cache.
	ooms, ambiguous, sureEmpty int64
	// unappliedBounds: by pool (all, large, small), the recorded
	// allocations' count, rounded and requested bytes.
	count, rounded, requested [3]int64
}

// tallyTrace counts trace's traceTally (traceBounds says what the gaps
// between the program's calls tell of retries). anyRounding: settings
// changed at runtime, so an allocation's rounding is the smallest any
// roundup_power2_divisions gives (unappliedBounds).
func tallyTrace(trace *snapshot.Trace, cfg allocator.Config, anyRounding bool) *traceTally {
	t := &traceTally{}
	expandable := trace.Count(snapshot.ActionSegmentMap) > 0
	released, grew, synced := false, false, false
	endGap := func(call snapshot.Action) {
		switch {
		case call == snapshot.ActionOOM:
			t.ooms++
		case (released && grew || synced) && call == snapshot.ActionAlloc:
			t.ambiguous++
			if released && !grew {
				// A retry served by the synchronized frees: one
				// release_cached_blocks, whichever it was.
				t.sureEmpty++
			}
		case released && !grew:
			t.sureEmpty++
		}
		released, grew, synced = false, false, false
	}
	prevAction, prevAddr := snapshot.Action(0), uint64(0)
	for i, e := range trace.All() {
		switch e.Action {
		case snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
			released = true
		case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentMap:
			if released {
				grew = true
			}
		case snapshot.ActionFreeCompleted:
			// A free completed apart from its free_requested waited
			// for an event: the program synchronized, or the retry's
			// release_cached_blocks did. With expandable segments the
			// blocks it frees can serve the retry without a release
			// (they lie next to unmapped space, or suffice alone); a
			// cudaMalloc'd retry needs released memory.
			if expandable && !(i > 0 && prevAction == snapshot.ActionFreeRequested && prevAddr == e.Addr) {
				synced = true
			}
		case snapshot.ActionAlloc, snapshot.ActionOOM, snapshot.ActionFreeRequested, snapshot.ActionSnapshot:
			endGap(e.Action)
		}
		if e.Action == snapshot.ActionAlloc {
			r := cfg.RoundSize(e.Size)
			if anyRounding {
				// Settings changed at runtime: the smallest rounding
				// any roundup_power2_divisions gives.
				r, _ = roundRange(e.Size, cfg.Version)
			}
			pool := 1
			if r <= allocator.SmallSize {
				pool = 2
			}
			for _, p := range [2]int{0, pool} {
				t.count[p]++
				t.rounded[p] += r
				t.requested[p] += e.Size
			}
		}
		prevAction, prevAddr = e.Action, e.Addr
	}
	if released && !grew {
		t.sureEmpty++
	}
	return t
}

// tallyAheadEntries is the trace length from which Run counts the tally on
// another goroutine: below it the pass is too short to be worth one (a
// variable for the test that compares both ways).
var tallyAheadEntries = 1 << 15

// startTally counts the trace's tally on another goroutine, for Result:
// a follow replay that runs to the end (Run) has the second core idle
// while its step loop runs. Not for a follow replay that shares its
// recording live (NewLive): the what-if replays beside it use that core.
func (r *Replay) startTally() {
	if r.opts.Mode != Follow || r.live != nil || r.tally != nil || r.tallyAhead != nil || r.tw.n-r.pos < tallyAheadEntries {
		return
	}
	ch := make(chan tallyOutcome, 1)
	trace, cfg, anyRounding := r.trace, r.cfg, r.splitsUnknown
	go func() {
		defer func() {
			if p := recover(); p != nil {
				ch <- tallyOutcome{panicked: p}
			}
		}()
		ch <- tallyOutcome{tally: tallyTrace(trace, cfg, anyRounding)}
	}()
	r.tallyAhead = ch
}

// TallyAhead counts what Result's bounds read of the whole trace on
// another goroutine while the caller steps: for a follow replay that the
// caller drives to the end with Step and then finishes with Result
// (analysis.ReplayObservedFor: peak, oom, segments, diff, report), whose
// second core is otherwise idle while it steps. Run does the same itself.
// A replay that is not driven to the end (a state cursor) should not: the
// count would be wasted. Nothing happens where Run would not count ahead
// either (what-if mode, a live recording, a short trace).
func (r *Replay) TallyAhead() { r.startTally() }

// WaitTally waits for the count TallyAhead started, for a caller that
// stops before Result (a listing whose reader closed the pipe), so that
// no goroutine outlives it. It does nothing when none was started or
// Result took it already.
func (r *Replay) WaitTally() {
	if r.tallyAhead != nil {
		r.tallied()
	}
}

// tallyOutcome is what startTally's goroutine hands back: the tally, or
// what it panicked with (raised again on the replay's goroutine).
type tallyOutcome struct {
	tally    *traceTally
	panicked any
}

// tallied is the trace's tally: startTally's, or counted now.
func (r *Replay) tallied() *traceTally {
	if r.tally != nil {
		return r.tally
	}
	if r.tallyAhead != nil {
		out := <-r.tallyAhead
		r.tallyAhead = nil
		if out.panicked != nil {
			panic(out.panicked)
		}
		r.tally = out.tally
		return r.tally
	}
	r.tally = tallyTrace(r.trace, r.cfg, r.splitsUnknown)
	return r.tally
}
