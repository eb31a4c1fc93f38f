package analysis

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/snapshot"
)

// TraceEvent is one trace entry made readable.
type TraceEvent struct {
	Index   int     `json:"index"`
	TimeUS  int64   `json:"time_us,omitempty"`
	Seconds float64 `json:"seconds"`
	Action  string  `json:"action"`
	Addr    uint64  `json:"addr"`
	Size    int64   `json:"size"`
	Stream  int64   `json:"stream"`
	// Name is the allocation's short name (a, b, ..., z, aa, ...), shared
	// by its alloc and its frees; a name is reused once its block is
	// freed. Frees of blocks allocated before the trace began have none.
	Name string `json:"name,omitempty"`
	// NameNo numbers the name where a walk left its spelling to the
	// printer (AppendName, SpellName): k+1 for AllocName(k), 0 for none
	// or a Name spelled already. Looking the text up on the walk's
	// goroutine was a cache miss an entry (a name table as large as the
	// most blocks ever live) on a listing's critical path; spelling it
	// costs the printer a few instructions.
	NameNo int32 `json:"-"`
	// Segment and Offset locate the block (or mapped range) in its
	// segment: the cudaMalloc'd segment or the expandable segment's
	// reservation. Located is false where no segment covers it.
	Segment uint64 `json:"segment,omitempty"`
	Offset  int64  `json:"offset"`
	Located bool   `json:"located"`
	// DeviceFree is cudaMemGetInfo's free memory, for oom entries.
	DeviceFree int64 `json:"device_free,omitempty"`
	// Allocated and Reserved are the device's figures after the entry.
	Allocated int64 `json:"allocated_bytes"`
	Reserved  int64 `json:"reserved_bytes"`
	// Site is the entry's own allocation site, or for a free recorded
	// without frames the site of the allocation it frees (SiteOfAlloc).
	Site        snapshot.Frame `json:"-"`
	SiteOfAlloc bool           `json:"site_of_alloc,omitempty"`
	// SiteStack is the stack Site comes from (NoStack: none).
	SiteStack snapshot.StackID `json:"-"`
	Phase     string           `json:"phase,omitempty"`
}

// BoundKind says what a trace bound counts.
type BoundKind uint8

// Bounds: an entry index, absolute time_us, or microseconds since the
// first entry.
const (
	BoundIndex BoundKind = iota
	BoundTime
	BoundRelTime
)

// TraceBound is one end of a --from/--to range (inclusive).
type TraceBound struct {
	Kind  BoundKind
	Index int
	US    int64
}

// ParseTraceBound reads a bound: an entry index ("1200"), a time in
// seconds since the epoch ("1773270053.8s", as time_us / 1e6), or seconds
// since the first entry ("+2.5s"; a plain "2.5s" under 10^9 seconds is
// also relative).
func ParseTraceBound(s string) (TraceBound, error) {
	t := strings.TrimSpace(s)
	if strings.HasSuffix(t, "s") {
		rel := strings.HasPrefix(t, "+")
		num := strings.TrimSuffix(strings.TrimPrefix(t, "+"), "s")
		f, err := strconv.ParseFloat(num, 64)
		if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return TraceBound{}, fmt.Errorf("invalid time %q: want seconds such as +2.5s (since the first entry) or 1773270053.8s (since the epoch)", s)
		}
		if f*1e6 >= math.MaxInt64/2 {
			return TraceBound{}, fmt.Errorf("time %q is out of range: want seconds such as +2.5s (since the first entry) or 1773270053.8s (since the epoch)", s)
		}
		us := int64(math.Round(f * 1e6))
		if rel || f < 1e9 {
			return TraceBound{Kind: BoundRelTime, US: us}, nil
		}
		return TraceBound{Kind: BoundTime, US: us}, nil
	}
	n, err := strconv.Atoi(t)
	if err != nil || n < 0 {
		return TraceBound{}, fmt.Errorf("invalid bound %q: want an entry index (1200) or a time (+2.5s, 1773270053.8s)", s)
	}
	return TraceBound{Kind: BoundIndex, Index: n}, nil
}

// TraceQuery selects trace entries; zero values select everything.
type TraceQuery struct {
	From, To *TraceBound
	Actions  []snapshot.Action
	MinSize  int64
	// Addr selects the entries whose block or segment contains it.
	Addr *uint64
}

// ParseActions reads a comma-separated action list ("alloc,free_completed").
func ParseActions(s string) ([]snapshot.Action, error) {
	var out []snapshot.Action
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		a := snapshot.ParseAction(p)
		if a == snapshot.ActionUnknown {
			return nil, fmt.Errorf("unknown action %q: choose from alloc, free_requested, free_completed, segment_alloc, segment_free, segment_map, segment_unmap, oom, snapshot, annotate", p)
		}
		out = append(out, a)
	}
	return out, nil
}

// TraceList is the selected entries of one device's trace.
type TraceList struct {
	Device  int          `json:"device"`
	Entries int          `json:"trace_entries"`
	Events  []TraceEvent `json:"events"`
	// Final is the moment after the last entry; PeakAllocated when
	// allocated memory peaked (the whole trace, not just the selection).
	Final         Moment `json:"final"`
	PeakAllocated Moment `json:"peak_allocated"`
	PeakReserved  Moment `json:"peak_reserved"`
}

func (b *TraceBound) before(i int, e *snapshot.TraceEntry, first int64) bool {
	switch b.Kind {
	case BoundTime:
		return e.TimeUS < b.US
	case BoundRelTime:
		return e.TimeUS-first < b.US
	}
	return i < b.Index
}

func (b *TraceBound) after(i int, e *snapshot.TraceEntry, first int64) bool {
	switch b.Kind {
	case BoundTime:
		return e.TimeUS > b.US
	case BoundRelTime:
		return e.TimeUS-first > b.US
	}
	return i > b.Index
}

func (q *TraceQuery) match(i int, e *snapshot.TraceEntry, first int64) bool {
	if q.From != nil && q.From.before(i, e, first) || q.To != nil && q.To.after(i, e, first) {
		return false
	}
	if len(q.Actions) > 0 {
		ok := false
		for _, a := range q.Actions {
			ok = ok || a == e.Action || a == snapshot.ActionFreeCompleted && e.Action == snapshot.ActionFree
		}
		if !ok {
			return false
		}
	}
	if e.Action == snapshot.ActionOOM || e.Action == snapshot.ActionSnapshot {
		return q.Addr == nil && (q.MinSize == 0 || e.Size >= q.MinSize)
	}
	if e.Size < q.MinSize {
		return false
	}
	if q.Addr != nil {
		a := *q.Addr
		size := uint64(max(e.Size, 1))
		if a < e.Addr || a >= e.Addr+size {
			return false
		}
	}
	return true
}

// names hands out allocation names, reusing freed ones smallest first.
type names struct {
	free []int // a min-heap
	next int
	// texts[k] is AllocName(k), made once: names are reused, and a
	// listing names every allocation.
	texts []string
}

// text is AllocName(k).
func (n *names) text(k int) string {
	for len(n.texts) <= k {
		n.texts = append(n.texts, AllocName(len(n.texts)))
	}
	return n.texts[k]
}

func (n *names) take() int {
	h := n.free
	if len(h) == 0 {
		n.next++
		return n.next - 1
	}
	k := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		c := 2*i + 1
		if c >= len(h) {
			break
		}
		if c+1 < len(h) && h[c+1] < h[c] {
			c++
		}
		if h[i] <= h[c] {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	n.free = h
	return k
}

func (n *names) give(k int) {
	h := append(n.free, k)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if h[p] <= h[i] {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	n.free = h
}

// AllocName is the k-th allocation name: a ... z, aa ... az, ba, ...
func AllocName(k int) string { return string(AppendAllocName(nil, k)) }

// AppendAllocName appends AllocName(k) to b.
func AppendAllocName(b []byte, k int) []byte {
	start := len(b)
	for k++; k > 0; k = (k - 1) / 26 {
		b = append(b, byte('a'+(k-1)%26))
	}
	for i, j := start, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return b
}

// HasName reports whether the event names an allocation.
func (ev *TraceEvent) HasName() bool { return ev.Name != "" || ev.NameNo > 0 }

// AppendName appends the event's allocation name (none: nothing).
func (ev *TraceEvent) AppendName(b []byte) []byte {
	if ev.NameNo > 0 {
		return AppendAllocName(b, int(ev.NameNo)-1)
	}
	return append(b, ev.Name...)
}

// SpellName sets Name from NameNo, for a reader of the event's fields.
func (ev *TraceEvent) SpellName() {
	if ev.NameNo > 0 {
		ev.Name, ev.NameNo = AllocName(int(ev.NameNo)-1), 0
	}
}

// ListTrace is WalkTrace collecting the selected entries of an already
// replayed device.
func ListTrace(rp *Replayed, fr *Frames, q TraceQuery) (*TraceList, error) {
	var events []TraceEvent
	sum, err := WalkTrace(rp.Snap, rp.Device, fr, q, func(ev *TraceEvent) error {
		events = append(events, *ev)
		events[len(events)-1].SpellName()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &TraceList{Device: rp.Device, Entries: sum.Entries, Events: events,
		Final: sum.Final, PeakAllocated: sum.PeakAllocated, PeakReserved: sum.PeakReserved}, nil
}

// TraceSummary is what a walk of a trace ends with.
type TraceSummary struct {
	Device  int
	Entries int
	// Shown counts the entries the query selected.
	Shown int
	// Final is the moment after the last entry; PeakAllocated when
	// allocated memory peaked (the whole trace, not just the selection).
	Final, PeakAllocated, PeakReserved Moment
	// Result is the replay's result (version, warnings, figures).
	Result *replay.Result
}

// TraceWalk is one device's trace being listed: BeginTrace, then Run.
type TraceWalk struct {
	r     *replay.Replay
	snap  *snapshot.Snapshot
	dev   int
	first int64
	// onEvent is what Run does after each entry, given entry.
	onEvent func(i int, e *snapshot.TraceEntry, a *allocator.Allocator)
	entry   snapshot.TraceEntry
	// applied is Applied, readable from another goroutine (a printer
	// that writes what the walk hands it).
	applied atomic.Int64
}

// BeginTrace prepares the walk of device's trace: it rebuilds the state
// at the start of the trace (which needs the whole trace and the final
// segments) but applies no entry yet.
func BeginTrace(s *snapshot.Snapshot, device int) (*TraceWalk, error) {
	return BeginTraceScanned(s, device, nil)
}

// BeginTraceScanned is BeginTrace given the start rebuild's pass made
// while the snapshot was read (replay.Options.StartScan), which the
// replay of the device whose trace it scanned takes.
func BeginTraceScanned(s *snapshot.Snapshot, device int, scan *replay.StartScan) (*TraceWalk, error) {
	w := &TraceWalk{snap: s, dev: device}
	if t := s.Trace(device); t.Len() > 0 {
		w.first = t.First().TimeUS
	}
	var err error
	w.r, err = replay.New(s, replay.Options{Device: device, StartScan: scan, OnEvent: func(i int, e snapshot.TraceEntry, a *allocator.Allocator) {
		if w.onEvent != nil {
			// A copy in w, not &e: e would move to the heap every entry.
			w.entry = e
			w.applied.Store(int64(i) + 1)
			w.onEvent(i, &w.entry, a)
		}
	}})
	if err != nil {
		return nil, fmt.Errorf("device %d: %w", device, err)
	}
	return w, nil
}

// Version is the PyTorch release the replay simulates, or the range of
// releases the file's keys allow when it was guessed ("2.5-2.7").
func (w *TraceWalk) Version() string { return w.r.VersionLabel() }

// Recorder is the snapshot's memstat record metadata (nil for PyTorch's
// files).
func (w *TraceWalk) Recorder() *snapshot.Recorder { return w.snap.Recorder }

// Entries is the length of the trace.
func (w *TraceWalk) Entries() int { return w.r.Len() }

// Applied is how many entries the walk has applied so far; another
// goroutine may ask while Run runs.
func (w *TraceWalk) Applied() int { return int(w.applied.Load()) }

// FirstTimeUS is the time of the first entry (0: none, or no time_us).
func (w *TraceWalk) FirstTimeUS() int64 { return w.first }

// WalkTrace replays a device's trace in follow mode, locating every block
// in its segment and naming every allocation, and hands each selected
// entry to emit as soon as it is applied. See TraceWalk.Run.
func WalkTrace(s *snapshot.Snapshot, device int, fr *Frames, q TraceQuery, emit func(*TraceEvent) error) (*TraceSummary, error) {
	w, err := BeginTrace(s, device)
	if err != nil {
		return nil, err
	}
	return w.Run(fr, q, emit)
}

// Run applies the trace and hands each entry q selects to emit as soon as
// it is applied: a listing streams, and the walk holds only the live
// blocks' names, never the list. The event passed to emit is reused for
// the next entry. An error of emit stops the walk and is returned as it is
// (a closed pipe ends a listing early).
func (w *TraceWalk) Run(fr *Frames, q TraceQuery, emit func(*TraceEvent) error) (*TraceSummary, error) {
	s, r, first := w.snap, w.r, w.first
	trace := r.Trace()
	phases := PhasesOf(s, w.dev)
	phaseAt := phases.Cursor()
	var blocks liveTable
	var nm names
	sum := &TraceSummary{Device: w.dev, Entries: trace.Len()}
	st := r.Allocator().Stats()
	startAlloc, startRes := st.AllocatedBytes[allocator.PoolAll].Current, st.ReservedBytes[allocator.PoolAll].Current
	// The replay's peaks (the entry after which each was first reached)
	// are known at the end; the figures after that entry are kept here
	// when the peak counter rises. The entries one allocator call produces
	// share one state, so the call's first entry has the figures of its
	// last, where the replay places the peak.
	peakAlloc, peakRes := startAlloc, startRes
	type figures struct{ alloc, res int64 }
	atPeakAlloc, atPeakRes := figures{startAlloc, startRes}, figures{startAlloc, startRes}
	last := figures{startAlloc, startRes}
	var emitErr error
	var ev TraceEvent
	w.onEvent = func(i int, e *snapshot.TraceEntry, a *allocator.Allocator) {
		// Two figures, not a Stats copy per entry.
		allocated, reserved := a.AllocatedReserved()
		cur := figures{allocated.Current, reserved.Current}
		last = cur
		if p := allocated.Peak; p > peakAlloc {
			peakAlloc, atPeakAlloc = p, cur
		}
		if p := reserved.Peak; p > peakRes {
			peakRes, atPeakRes = p, cur
		}
		ev = TraceEvent{
			Index: i, TimeUS: e.TimeUS, Action: e.Action.String(), Addr: e.Addr, Size: e.Size, Stream: s.Stream(e),
			Allocated: cur.alloc, Reserved: cur.res, Site: NoStackFrame, SiteStack: snapshot.NoStack, Phase: phaseAt.At(e.TimeUS),
		}
		if e.TimeUS != 0 && first != 0 {
			ev.Seconds = float64(e.TimeUS-first) / 1e6
		}
		if e.Stack != snapshot.NoStack {
			ev.Site, ev.SiteStack = fr.Site(e.Stack), e.Stack
		}
		switch e.Action {
		case snapshot.ActionAlloc:
			l := traceLive{name: int32(nm.take()), named: true, stack: e.Stack}
			l.seg, l.off, l.ok = a.Locate(e.Addr)
			slot, ok := blocks.find(e.Addr)
			if ok && blocks.slots[slot].v.named {
				// The free of the block before was never recorded.
				nm.give(int(blocks.slots[slot].v.name))
			}
			blocks.put(slot, e.Addr, l)
			ev.NameNo = l.name + 1
			ev.Segment, ev.Offset, ev.Located = l.seg, l.off, l.ok
		case snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted, snapshot.ActionFree:
			slot, ok := blocks.find(e.Addr)
			var l traceLive
			if ok {
				l = blocks.slots[slot].v
			} else {
				// Allocated before the trace began.
				if b, ok := a.BlockAt(e.Addr); ok {
					l.stack = b.Stack
					l.seg, l.off, l.ok = b.RegionAddress, b.Offset, true
				}
				if e.Action == snapshot.ActionFreeRequested {
					blocks.put(slot, e.Addr, l)
				}
			}
			if l.named {
				ev.NameNo = l.name + 1
			}
			ev.Segment, ev.Offset, ev.Located = l.seg, l.off, l.ok
			if e.Stack == snapshot.NoStack && l.stack != snapshot.NoStack {
				ev.Site, ev.SiteStack, ev.SiteOfAlloc = fr.Site(l.stack), l.stack, true
			}
			if e.Action != snapshot.ActionFreeRequested {
				if l.named {
					nm.give(int(l.name))
				}
				if ok {
					blocks.remove(slot)
				}
			}
		case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentFree:
			ev.Segment, ev.Located = e.Addr, true
		case snapshot.ActionSegmentMap, snapshot.ActionSegmentUnmap:
			ev.Segment, ev.Offset, ev.Located = a.Locate(e.Addr)
		case snapshot.ActionOOM:
			ev.DeviceFree, ev.Addr = e.DeviceFree(), 0
		}
		if emitErr == nil && q.match(i, e, first) {
			sum.Shown++
			emitErr = emit(&ev)
		}
	}
	defer func() { w.onEvent = nil }()
	// The walk steps to the end (a closed pipe aside) and finishes with
	// Result: the tally Result's bounds read is counted beside it (the
	// printer's core has room: its rows cost less than the steps).
	r.TallyAhead()
	for emitErr == nil {
		if err := r.Step(); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			r.WaitTally()
			return nil, fmt.Errorf("device %d: %w", w.dev, err)
		}
	}
	if emitErr != nil {
		r.WaitTally() // no goroutine left behind a closed pipe
		return nil, emitErr
	}
	sum.Result = r.Result()
	moment := func(i int, f figures) Moment {
		m := Moment{Index: i, Allocated: f.alloc, Reserved: f.res}
		if i >= 0 && i < trace.Len() {
			m.TimeUS = trace.At(i).TimeUS
			if m.TimeUS != 0 && first != 0 {
				m.Seconds = float64(m.TimeUS-first) / 1e6
			}
			m.Phase = phases.At(m.TimeUS)
		}
		return m
	}
	sum.Final = moment(trace.Len()-1, last)
	sum.PeakAllocated = moment(sum.Result.PeakAllocated.Index, atPeakAlloc)
	sum.PeakReserved = moment(sum.Result.PeakReserved.Index, atPeakRes)
	return sum, nil
}
