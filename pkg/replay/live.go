package replay

import (
	"fmt"
	"maps"
	"sync"

	"github.com/memstat/memstat/pkg/snapshot"
)

// A follow replay and what-if replays of the same recording can run side
// by side (LiveRecording): a what-if replay needs of the follow replay its
// starting state, the capacity and call pools (known once New returns),
// and what the follow replay finds as it steps: where the program emptied
// the cache and which pool each call used (findings about entry i are
// final once the follow replay has applied entry i). So a what-if replay
// started from a live Recording steps behind the follow replay, waiting
// where it would overtake it, and keeps its own copy of those findings,
// taken from the log the follow replay publishes.

// liveBatch is how many entries the follow replay applies between two
// publications of its progress.
const liveBatch = 512

// liveLead is how far ahead of a waiting what-if replay the follow replay
// gets before it wakes it: a what-if replay faster than the follow replay
// then sleeps once per liveLead entries, not once per batch.
const liveLead = 16 * liveBatch

// liveShare is what a follow replay publishes to the what-if replays that
// run beside it.
type liveShare struct {
	mu   sync.Mutex
	more *sync.Cond
	// pos is how many entries the follow replay has applied; log its
	// findings up to there, in the order it made them. stopped: it will
	// publish nothing more (done, or given up: EndLive).
	pos     int
	stopped bool
	log     []liveNote
	// waiting: a what-if replay sleeps until pos reaches wake (the
	// smallest of the waiting replays' wishes) or the follow replay stops.
	waiting bool
	wake    int
	// seeded: the follow replay has seeded its simulator, and
	// preexisting is the memory its starting state reserves (a what-if
	// replay's History.PreexistingBytes). A recording of NewLive is
	// handed out before.
	seeded      bool
	preexisting int64
}

// liveNote is one finding of the follow replay that what-if replays read.
type liveNote struct {
	what liveWhat
	i    int
	pool snapshot.PoolID
}

type liveWhat uint8

const (
	noteEmptyCache          liveWhat = iota // emptyCacheAt[i]
	noteCapturingEmptyCache                 // pools.capturingEmptyCache[i]
	noteCall                                // pools.call[i] = pool
	noteReleased                            // pools.released[i] = pool
)

// LiveRecording is Recording taken before the follow replay has stepped,
// for what-if replays that run on other goroutines while this one runs
// (memstat replay: the recording and the what-if on two cores). A what-if
// replay started from it applies each entry only once this replay has
// applied it, waiting otherwise. The caller must run this replay to the
// end or call EndLive where it stops (an error, a panic): a what-if
// replay past that point fails instead of waiting for ever. Recording
// is refused afterwards.
func (r *Replay) LiveRecording() (*Recording, error) {
	if r.opts.Mode != Follow || !r.opts.KeepStart {
		return nil, fmt.Errorf("replay: a recording comes from a follow replay made with KeepStart")
	}
	if r.pos > 0 || r.live != nil {
		return nil, fmt.Errorf("replay: a live recording is taken before the follow replay's first step, once")
	}
	rec := r.liveRecording()
	// Seeded, and the recording holds its own copy of the starting state:
	// the follow replay drops its segments (the what-if replays drop
	// theirs once seeded).
	r.start.segments, r.start.reservations = nil, nil
	r.live.seeded, r.live.preexisting = true, r.res.History.PreexistingBytes
	return rec, nil
}

// liveRecording starts the live share of a follow replay that has not
// stepped yet and returns the recording that reads it.
func (r *Replay) liveRecording() *Recording {
	rec := r.recording()
	// The findings as they stand now; the what-if replays add the log's
	// to copies of their own. The follow replay goes on writing its own.
	rec.pools = r.pools.sharedCopy()
	rec.emptyCacheAt = maps.Clone(r.emptyCacheAt)
	r.live = &liveShare{}
	r.live.more = sync.NewCond(&r.live.mu)
	rec.live = r.live
	return rec
}

// NewLive is New of a follow replay made with KeepStart followed by its
// LiveRecording, except that it hands the recording to started as soon as
// the starting state is rebuilt and the capacity known, before it seeds
// its own simulator: a what-if replay started from it on another
// goroutine allocates its starting state while this one seeds its
// (memstat replay's critical path is the what-if replay). Such a what-if
// replay's result waits for the seeding (it reports the memory the
// starting state reserves). If NewLive fails after calling started, it
// has ended the live recording (EndLive).
func NewLive(s *snapshot.Snapshot, o Options, started func(*Recording)) (*Replay, error) {
	if o.Mode != Follow || !o.KeepStart {
		return nil, fmt.Errorf("replay: a recording comes from a follow replay made with KeepStart")
	}
	r, total, _, err := prepare(s, o)
	if err != nil {
		return nil, err
	}
	total = r.followCapacity(total)
	// seedFollow makes the follow replay's own map anew; the recording's
	// copy must be one the what-if replays can write to.
	r.emptyCacheAt = make(map[int]bool)
	rec := r.liveRecording()
	seeded := false
	defer func() {
		// Also when seeding panics: the what-if replays must not wait
		// for ever.
		if !seeded {
			r.EndLive()
		}
	}()
	started(rec)
	if err := r.seedFollow(total); err != nil {
		return nil, err
	}
	seeded = true
	r.start.segments, r.start.reservations = nil, nil
	l := r.live
	l.mu.Lock()
	l.seeded, l.preexisting = true, r.res.History.PreexistingBytes
	l.mu.Unlock()
	l.more.Broadcast()
	return r, nil
}

// awaitSeeded, in a what-if replay of a live recording, waits until the
// follow replay has seeded its simulator (or stopped) and returns the
// memory its starting state reserves, and whether it was seeded.
func (r *Replay) awaitSeeded() (int64, bool) {
	l := r.live
	l.mu.Lock()
	defer l.mu.Unlock()
	for !l.seeded && !l.stopped {
		l.more.Wait()
	}
	return l.preexisting, l.seeded
}

// EndLive tells the what-if replays of a live recording that this replay
// publishes nothing more. Running to the end does it; calling it again,
// or without a live recording, does nothing.
func (r *Replay) EndLive() {
	if r.live == nil || r.opts.Mode != Follow {
		return
	}
	r.publish(true)
}

// sharedCopy is the part of the call pools a what-if replay reads, copied
// (the follow replay writes its own as it steps).
func (cp callPools) sharedCopy() callPools {
	cp.call = maps.Clone(cp.call)
	cp.released = maps.Clone(cp.released)
	cp.capturingEmptyCache = maps.Clone(cp.capturingEmptyCache)
	cp.guess = nil // the follow replay's own, not read by what-if replays
	return cp
}

// note logs a finding of a follow replay with a live recording (the caller
// also writes it in its own maps).
func (r *Replay) note(what liveWhat, i int, pool snapshot.PoolID) {
	if r.live != nil {
		r.livePending = append(r.livePending, liveNote{what, i, pool})
	}
}

// publish hands the follow replay's progress and findings to the what-if
// replays every liveBatch entries, at the end, and when ending.
func (r *Replay) publish(end bool) {
	if !end && r.pos-r.livePublished < liveBatch && r.pos < r.tw.n {
		return
	}
	l := r.live
	l.mu.Lock()
	l.log = append(l.log, r.livePending...)
	l.pos = r.pos
	stopping := !l.stopped && (end || r.pos >= r.tw.n)
	l.stopped = l.stopped || stopping
	// Stopping wakes every waiter, a what-if replay waiting for the
	// seeding (awaitSeeded) too.
	wake := stopping || l.waiting && l.pos >= l.wake
	if wake {
		l.waiting = false
	}
	l.mu.Unlock()
	if wake {
		l.more.Broadcast()
	}
	r.livePending = r.livePending[:0]
	r.livePublished = r.pos
}

// awaitFollow, in a what-if replay of a live recording, waits until the
// follow replay has applied the entry at r.pos and takes its findings so
// far into the what-if replay's own copies.
func (r *Replay) awaitFollow() error {
	l := r.live
	l.mu.Lock()
	for l.pos <= r.pos && !l.stopped {
		// Woken once the follow replay is well ahead (or done), not as
		// soon as it has passed this entry.
		target := min(r.pos+liveLead, r.tw.n)
		if !l.waiting || target < l.wake {
			l.wake = target
		}
		l.waiting = true
		l.more.Wait()
	}
	// The follow replay only appends: the notes up to here stay as they
	// are, read after the lock is released.
	notes := l.log[r.liveRead:len(l.log):len(l.log)]
	r.liveRead = len(l.log)
	pos := l.pos
	l.mu.Unlock()
	for _, n := range notes {
		switch n.what {
		case noteEmptyCache:
			r.emptyCacheAt[n.i] = true
		case noteCapturingEmptyCache:
			r.pools.capturingEmptyCache[n.i] = true
		case noteCall:
			r.pools.call[n.i] = n.pool
		case noteReleased:
			r.pools.released[n.i] = n.pool
		}
	}
	if pos <= r.pos {
		r.liveErr = fmt.Errorf("replay: the follow replay this what-if replay starts from stopped at entry %d of %d", pos, r.tw.n)
		return r.liveErr
	}
	r.liveReady = pos
	return nil
}
