package allocator

import (
	"errors"
	"math"

	"github.com/memstat/memstat/pkg/snapshot"
)

// HistoryMode is _record_memory_history's enabled argument.
type HistoryMode uint8

const (
	// HistoryOff (enabled=None) stops recording and clears the history.
	HistoryOff HistoryMode = iota
	// HistoryState (enabled="state") keeps stacks for live blocks; the
	// trace keeps only its latest entry.
	HistoryState
	// HistoryAll (enabled="all") also keeps the trace, up to MaxEntries.
	HistoryAll
)

// ContextLevel is _record_memory_history's context argument: which
// operations keep the caller's stack (PyTorch's RecordContext).
type ContextLevel uint8

const (
	// ContextNever (context=None): no stacks.
	ContextNever ContextLevel = iota
	// ContextState (context="state"): live blocks keep their allocation
	// stack; trace entries carry none.
	ContextState
	// ContextAlloc (context="alloc"): trace entries carry the stack of the
	// allocation (frees carry the allocation's stack too).
	ContextAlloc
	// ContextAll (context="all"): frees carry their own stack.
	ContextAll
)

// HistoryOptions are the arguments of
// torch.cuda.memory._record_memory_history. The zero value turns recording
// off; PyTorch's defaults are Enabled: HistoryAll, Context: ContextAll,
// MaxEntries: 0 (unbounded). The stacks argument ("python" or "all") has no
// counterpart: callers pass whatever stack they recorded with each
// operation, and the context level decides where it is kept.
type HistoryOptions struct {
	Enabled HistoryMode
	Context ContextLevel
	// MaxEntries bounds the trace ring buffer; <= 0 means unbounded
	// (sys.maxsize).
	MaxEntries int
	// ClearHistory (2.6+) empties the trace while keeping recording on.
	ClearHistory bool
	// SkipActions (2.9+) are never stored. As in PyTorch only alloc,
	// free_requested, free_completed, segment_alloc, segment_free, oom and
	// snapshot can be skipped; other actions are ignored here.
	SkipActions []snapshot.Action
}

// CompileContextNA is the StrID of "N/A", the compile_context of every
// trace entry from 2.8 on (the simulator has no compile contexts). The
// snapshot returned by Snapshot maps it in its Strings table.
const CompileContextNA snapshot.StrID = 1

type history struct {
	enabled bool
	context ContextLevel
	skip    [snapshot.ActionFree + 1]bool
	ring    ring
	// contexts holds the streams (and compile_context) of the entries in
	// ring.
	contexts snapshot.Contexts
}

// ring is PyTorch's RingBuffer of trace entries: append until full, then
// overwrite the oldest.
type ring struct {
	buf  []snapshot.TraceEntry
	next int
	max  int
}

// setMax is RingBuffer::setMaxEntries: it changes the bound only. The
// entries stay, also when there are more than the new bound: insert then
// overwrites slots from next on and wraps at the new bound, so the slots
// past it keep their old entries for good, and entries lists them in
// PyTorch's order (from next to the end, then the start). Read in v2.6.0;
// docs/versions.md, "Trace ring buffer".
func (r *ring) setMax(n int) {
	r.max = max(1, n)
}

// insert is RingBuffer::insertEntries.
func (r *ring) insert(e snapshot.TraceEntry) {
	if len(r.buf) < r.max {
		r.buf = append(r.buf, e)
		return
	}
	if r.next >= len(r.buf) {
		// Lowered below a next slot that was already past the new bound,
		// PyTorch's next++ never meets the bound and writes beyond the
		// vector (undefined behaviour); the simulator wraps instead.
		r.next = 0
	}
	r.buf[r.next] = e
	if r.next++; r.next == r.max {
		r.next = 0
	}
}

func (r *ring) entries() []snapshot.TraceEntry {
	out := make([]snapshot.TraceEntry, 0, len(r.buf))
	n := min(r.next, len(r.buf))
	out = append(out, r.buf[n:]...)
	return append(out, r.buf[:n]...)
}

// trace is the entries in entries' order as a compact snapshot.Trace,
// encoded straight from the ring (no 40-byte copy of them is made).
func (r *ring) trace() *snapshot.Trace {
	var b snapshot.TraceBuilder
	n := min(r.next, len(r.buf))
	for i := range r.buf[n:] {
		b.Append(r.buf[n+i])
	}
	for i := range r.buf[:n] {
		b.Append(r.buf[i])
	}
	return b.Build()
}

func (r *ring) clear() {
	r.buf = r.buf[:0]
	r.next = 0
}

// RecordHistory is torch.cuda.memory._record_memory_history: start, change
// or stop recording stacks and the trace of allocator events.
//
// Turning recording off clears the trace; changing MaxEntries keeps the
// entries already there, as RingBuffer::setMaxEntries does (see
// ring.setMax). In 2.0 every call cleared the trace.
func (a *Allocator) RecordHistory(o HistoryOptions) error {
	if o.ClearHistory && !a.v.hasClearHistory() {
		return errors.New("allocator: clear_history needs PyTorch 2.6 or later")
	}
	if len(o.SkipActions) > 0 && !a.v.hasSkipActions() {
		return errors.New("allocator: skip_actions needs PyTorch 2.9 or later")
	}
	enabled := o.Enabled != HistoryOff
	n := o.MaxEntries
	if n <= 0 {
		n = math.MaxInt
	}
	if o.Enabled == HistoryState {
		n = 1
	}
	a.hist.enabled = enabled
	a.hist.skip = [len(a.hist.skip)]bool{}
	for _, act := range o.SkipActions {
		switch act {
		case snapshot.ActionAlloc, snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted,
			snapshot.ActionSegmentAlloc, snapshot.ActionSegmentFree, snapshot.ActionOOM, snapshot.ActionSnapshot:
			a.hist.skip[act] = true
		}
	}
	a.hist.ring.setMax(n)
	a.hist.context = ContextNever
	if enabled {
		a.hist.context = o.Context
	}
	if !enabled || o.ClearHistory || a.v.clearsTraceOnEveryRecordHistory() {
		a.hist.ring.clear()
	}
	return nil
}

// record is record_trace. Entries carry the stack only from the "alloc"
// context level up.
func (a *Allocator) record(act snapshot.Action, addr uint64, size, stream int64, pool *blockPool, ctx snapshot.StackID) {
	if !a.hist.enabled || a.mute || a.hist.skip[act] {
		return
	}
	c := snapshot.EntryContext{Stream: stream}
	if a.v.hasCompileContext() {
		c.CompileContext = CompileContextNA
	}
	if pool != nil && a.v.TracesPoolID() {
		// record_trace's mempool_id: the block's pool's owner_MempoolId.
		c.Pool = pool.id
	}
	e := snapshot.TraceEntry{Action: act, Addr: addr, Size: size, Context: a.hist.contexts.Intern(c)}
	if a.hist.context >= ContextAlloc {
		e.Stack = ctx
	}
	if a.v.hasTimeUS() {
		e.TimeUS = a.now()
	}
	a.hist.ring.insert(e)
}

func (a *Allocator) now() int64 {
	if a.clock != nil {
		return a.clock()
	}
	a.tick++
	return a.tick
}

// Trace returns the recorded trace, oldest entry first, without the side
// effect of Snapshot.
func (a *Allocator) Trace() []snapshot.TraceEntry { return a.hist.ring.entries() }

// TraceContexts is the table the Context fields of Trace's entries index.
func (a *Allocator) TraceContexts() *snapshot.Contexts { return &a.hist.contexts }
