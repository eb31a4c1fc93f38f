package analysis

import (
	"container/heap"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/memstat/memstat/pkg/allocator"
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
	Phase       string         `json:"phase,omitempty"`
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
	free intHeap
	next int
}

type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (n *names) take() int {
	if n.free.Len() > 0 {
		return heap.Pop(&n.free).(int)
	}
	n.next++
	return n.next - 1
}

func (n *names) give(k int) { heap.Push(&n.free, k) }

// AllocName is the k-th allocation name: a ... z, aa ... az, ba, ...
func AllocName(k int) string {
	var b []byte
	for k++; k > 0; k = (k - 1) / 26 {
		b = append(b, byte('a'+(k-1)%26))
	}
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}

// ListTrace replays a device's trace to locate every block in its segment
// and name every allocation, and returns the selected entries.
func ListTrace(rp *Replayed, fr *Frames, q TraceQuery) (*TraceList, error) {
	trace := rp.Trace()
	first := rp.FirstTimeUS()
	tl := &TraceList{
		Device:        rp.Device,
		Entries:       len(trace),
		Final:         rp.MomentAt(len(trace) - 1),
		PeakAllocated: rp.MomentAt(rp.Result.PeakAllocated.Index),
		PeakReserved:  rp.MomentAt(rp.Result.PeakReserved.Index),
	}
	type live struct {
		name  int
		named bool
		stack snapshot.StackID
		seg   uint64
		off   int64
		ok    bool
	}
	blocks := map[uint64]*live{}
	var nm names
	locate := func(a *allocator.Allocator, addr uint64) (uint64, int64, bool) {
		if b, ok := a.BlockAt(addr); ok {
			return b.RegionAddress, b.Offset, true
		}
		return 0, 0, false
	}
	r, err := allocator.NewReplay(rp.Snap, allocator.ReplayOptions{Device: rp.Device, OnEvent: func(i int, e snapshot.TraceEntry, a *allocator.Allocator) {
		ev := TraceEvent{
			Index: i, TimeUS: e.TimeUS, Action: e.Action.String(), Addr: e.Addr, Size: e.Size, Stream: rp.Snap.Stream(&e),
			Allocated: rp.AllocatedAt(i), Reserved: rp.ReservedAt(i), Site: NoStackFrame, Phase: rp.Phases.At(e.TimeUS),
		}
		if e.TimeUS != 0 && first != 0 {
			ev.Seconds = float64(e.TimeUS-first) / 1e6
		}
		if e.Stack != snapshot.NoStack {
			ev.Site = fr.Site(e.Stack)
		}
		switch e.Action {
		case snapshot.ActionAlloc:
			l := &live{name: nm.take(), named: true, stack: e.Stack}
			l.seg, l.off, l.ok = locate(a, e.Addr)
			if old := blocks[e.Addr]; old != nil && old.named {
				// The free of the block before was never recorded.
				nm.give(old.name)
			}
			blocks[e.Addr] = l
			ev.Name = AllocName(l.name)
			ev.Segment, ev.Offset, ev.Located = l.seg, l.off, l.ok
		case snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted, snapshot.ActionFree:
			l := blocks[e.Addr]
			if l == nil {
				// Allocated before the trace began.
				l = &live{}
				if b, ok := a.BlockAt(e.Addr); ok {
					l.stack = b.Stack
				}
				l.seg, l.off, l.ok = locate(a, e.Addr)
				blocks[e.Addr] = l
			}
			if l.named {
				ev.Name = AllocName(l.name)
			}
			ev.Segment, ev.Offset, ev.Located = l.seg, l.off, l.ok
			if e.Stack == snapshot.NoStack && l.stack != snapshot.NoStack {
				ev.Site, ev.SiteOfAlloc = fr.Site(l.stack), true
			}
			if e.Action != snapshot.ActionFreeRequested {
				if l.named {
					nm.give(l.name)
				}
				delete(blocks, e.Addr)
			}
		case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentFree:
			ev.Segment, ev.Located = e.Addr, true
		case snapshot.ActionSegmentMap, snapshot.ActionSegmentUnmap:
			ev.Segment, ev.Offset, ev.Located = locate(a, e.Addr)
		case snapshot.ActionOOM:
			ev.DeviceFree, ev.Addr = e.DeviceFree(), 0
		}
		if q.match(i, &e, first) {
			tl.Events = append(tl.Events, ev)
		}
	}})
	if err != nil {
		return nil, fmt.Errorf("device %d: %w", rp.Device, err)
	}
	if _, err := r.Run(); err != nil {
		return nil, fmt.Errorf("device %d: %w", rp.Device, err)
	}
	return tl, nil
}
