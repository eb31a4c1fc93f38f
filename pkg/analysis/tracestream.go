package analysis

import (
	"cmp"
	"slices"

	"github.com/memstat/memstat/pkg/snapshot"
)

// StreamEvent is a trace entry as a streaming listing shows it (memstat
// trace --stream): only what the entries read so far determine. The
// default listing's figures after each entry need the state before the
// trace, known once the whole file is read; these do not.
type StreamEvent struct {
	// TraceEvent's Allocated and Reserved are not set; Located says
	// whether a segment seen so far places the block (see TraceStream).
	TraceEvent
	// RequestedChange is requested memory (memory_stats'
	// requested_bytes) after the entry less before the first entry: the
	// sizes of the allocs read so far less those of the completed frees
	// (an alloc's size is what the program asked for, a free's the
	// block's requested size).
	RequestedChange int64 `json:"requested_change"`
	// ReservedChange is reserved memory after the entry less before the
	// first entry: segment_alloc and segment_map sizes less segment_free
	// and segment_unmap ones.
	ReservedChange int64 `json:"reserved_change"`
}

// StreamSummary is what a streaming listing knows of a device's trace at
// its end.
type StreamSummary struct {
	Device  int
	Entries int
	Shown   int
	// The changes after the last entry, and their peaks (the highest
	// change and the first entry after which it was reached; -1 where it
	// never rose above zero, before the first entry).
	RequestedChange, ReservedChange int64
	PeakRequested, PeakReserved     StreamPeak
}

// StreamPeak is the highest change of a figure and the first entry after
// which it was reached.
type StreamPeak struct {
	Index  int   `json:"index"`
	Change int64 `json:"change"`
}

// TraceStream follows the entries of one snapshot's traces as they
// decode (snapshot.Stream), naming allocations and placing blocks as the
// trace walk does (WalkTrace) from what has been read: an alloc takes the
// smallest free name, its frees share it; a block lies in a segment when
// a segment_alloc read so far, not freed since, covers its address. A
// segment allocated before the trace, or an expandable segment's
// mappings, place nothing until the end of the file (the default listing
// rebuilds them): such blocks are not located, never guessed.
//
// It holds, per device, the live blocks, the open segments and the names:
// memory follows the live state, not the length of the trace.
type TraceStream struct {
	allFrames bool
	q         TraceQuery
	fr        *Frames
	devs      []*streamDevice
	ev        StreamEvent
}

type streamDevice struct {
	first   int64
	started bool
	blocks  liveTable
	nm      names
	// segs are the segments allocated in the trace and not freed since,
	// by address.
	segs                []streamSegment
	requested, reserved int64
	sum                 StreamSummary
}

type streamSegment struct {
	addr uint64
	size int64
}

// NewTraceStream starts a streaming listing of the entries q selects
// (allFrames: every frame counts as the user's, as Frames).
func NewTraceStream(q TraceQuery, allFrames bool) *TraceStream {
	return &TraceStream{q: q, allFrames: allFrames}
}

func (ts *TraceStream) device(d int) *streamDevice {
	for len(ts.devs) <= d {
		ts.devs = append(ts.devs, nil)
	}
	if ts.devs[d] == nil {
		ts.devs[d] = &streamDevice{sum: StreamSummary{Device: d, PeakRequested: StreamPeak{Index: -1}, PeakReserved: StreamPeak{Index: -1}}}
	}
	return ts.devs[d]
}

// Summary is what the stream knows of device d's trace so far (nil: no
// entry of it was read).
func (ts *TraceStream) Summary(d int) *StreamSummary {
	if d < 0 || d >= len(ts.devs) || ts.devs[d] == nil {
		return nil
	}
	return &ts.devs[d].sum
}

// find returns where addr is or would be among the open segments (by
// start address), and whether one starts there.
func (sd *streamDevice) find(addr uint64) (int, bool) {
	return slices.BinarySearchFunc(sd.segs, addr, func(s streamSegment, a uint64) int {
		return cmp.Compare(s.addr, a)
	})
}

// segmentAt returns the open segment that holds addr.
func (sd *streamDevice) segmentAt(addr uint64) (streamSegment, bool) {
	i, _ := sd.find(addr)
	// sd.segs[i] is the first segment at or above addr.
	if i < len(sd.segs) && sd.segs[i].addr == addr {
		return sd.segs[i], true
	}
	if i > 0 {
		if s := sd.segs[i-1]; addr-s.addr < uint64(max(s.size, 0)) {
			return s, true
		}
	}
	return streamSegment{}, false
}

func (sd *streamDevice) locate(addr uint64) (uint64, int64, bool) {
	if s, ok := sd.segmentAt(addr); ok {
		return s.addr, int64(addr - s.addr), true
	}
	return 0, 0, false
}

func (sd *streamDevice) segmentAlloc(addr uint64, size int64) {
	i, found := sd.find(addr)
	if found {
		// A segment_alloc at the address of one never freed (a segment_free
		// left out of the trace): the new one holds the range.
		sd.segs[i].size = size
		return
	}
	sd.segs = slices.Insert(sd.segs, i, streamSegment{addr, size})
}

func (sd *streamDevice) segmentFree(addr uint64) {
	if i, found := sd.find(addr); found {
		sd.segs = slices.Delete(sd.segs, i, i+1)
	}
}

// Entry takes the next decoded entry and hands it to emit, as a
// StreamEvent, when the query selects it. The event is reused for the
// next entry. emit's error is returned as it is.
func (ts *TraceStream) Entry(se *snapshot.StreamedEntry, emit func(*StreamEvent) error) error {
	if ts.fr == nil {
		ts.fr = NewFrames(se.Stacks, ts.allFrames)
	}
	fr := ts.fr
	sd := ts.device(se.Device)
	e := &se.Entry
	if !sd.started {
		sd.started, sd.first = true, e.TimeUS
	}
	i := se.Index
	sd.sum.Entries = i + 1
	ev := &ts.ev
	*ev = StreamEvent{TraceEvent: TraceEvent{Index: i, TimeUS: e.TimeUS, Action: e.Action.String(), Addr: e.Addr, Size: e.Size,
		Stream: se.Context.Stream, Site: NoStackFrame, SiteStack: snapshot.NoStack}}
	if e.TimeUS != 0 && sd.first != 0 {
		ev.Seconds = float64(e.TimeUS-sd.first) / 1e6
	}
	if e.Stack != snapshot.NoStack {
		ev.Site, ev.SiteStack = fr.Site(e.Stack), e.Stack
	}
	switch e.Action {
	case snapshot.ActionAlloc:
		sd.requested += e.Size
		l := traceLive{name: int32(sd.nm.take()), named: true, stack: e.Stack}
		l.seg, l.off, l.ok = sd.locate(e.Addr)
		slot, ok := sd.blocks.find(e.Addr)
		if ok && sd.blocks.slots[slot].v.named {
			// The free of the block before was never recorded.
			sd.nm.give(int(sd.blocks.slots[slot].v.name))
		}
		sd.blocks.put(slot, e.Addr, l)
		ev.Name = sd.nm.text(int(l.name))
		ev.Segment, ev.Offset, ev.Located = l.seg, l.off, l.ok
	case snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted, snapshot.ActionFree:
		slot, ok := sd.blocks.find(e.Addr)
		var l traceLive
		if ok {
			l = sd.blocks.slots[slot].v
		} else {
			// Allocated before the trace began: where it lies is known
			// only if a segment read so far holds it, and its stack not
			// at all (the final segments show the blocks live at the
			// end, not this one).
			l.stack = snapshot.NoStack
			l.seg, l.off, l.ok = sd.locate(e.Addr)
			if e.Action == snapshot.ActionFreeRequested {
				sd.blocks.put(slot, e.Addr, l)
			}
		}
		if l.named {
			ev.Name = sd.nm.text(int(l.name))
		}
		ev.Segment, ev.Offset, ev.Located = l.seg, l.off, l.ok
		if e.Stack == snapshot.NoStack && l.stack != snapshot.NoStack {
			ev.Site, ev.SiteStack, ev.SiteOfAlloc = fr.Site(l.stack), l.stack, true
		}
		if e.Action != snapshot.ActionFreeRequested {
			sd.requested -= e.Size
			if l.named {
				sd.nm.give(int(l.name))
			}
			if ok {
				sd.blocks.remove(slot)
			}
		}
	case snapshot.ActionSegmentAlloc:
		sd.reserved += e.Size
		sd.segmentAlloc(e.Addr, e.Size)
		ev.Segment, ev.Located = e.Addr, true
	case snapshot.ActionSegmentFree:
		sd.reserved -= e.Size
		sd.segmentFree(e.Addr)
		ev.Segment, ev.Located = e.Addr, true
	case snapshot.ActionSegmentMap:
		sd.reserved += e.Size
	case snapshot.ActionSegmentUnmap:
		sd.reserved -= e.Size
	case snapshot.ActionOOM:
		ev.DeviceFree, ev.Addr = e.DeviceFree(), 0
	}
	ev.RequestedChange, ev.ReservedChange = sd.requested, sd.reserved
	s := &sd.sum
	s.RequestedChange, s.ReservedChange = sd.requested, sd.reserved
	if sd.requested > s.PeakRequested.Change {
		s.PeakRequested = StreamPeak{Index: i, Change: sd.requested}
	}
	if sd.reserved > s.PeakReserved.Change {
		s.PeakReserved = StreamPeak{Index: i, Change: sd.reserved}
	}
	if ts.q.match(i, e, sd.first) {
		s.Shown++
		return emit(ev)
	}
	return nil
}
