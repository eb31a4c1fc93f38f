package allocator

import (
	"cmp"
	"slices"

	"github.com/memstat/memstat/pkg/snapshot"
)

// Segments returns the device's segments as torch.cuda.memory_snapshot()
// reports them, sorted by address. Each cudaMalloc'd segment is one
// segment; an expandable segment yields one segment per contiguous mapped
// range (unmapped address space is not reported). Block requested sizes are
// the block objects' own values, so free blocks show the stale figure of
// their last allocation, as in PyTorch.
func (a *Allocator) Segments() []snapshot.Segment {
	// One array holds every segment's blocks (each segment has its own
	// part, capacity ending with it): a state of a million blocks costs
	// two allocations, not one growing slice per segment.
	n := 0
	for _, r := range a.regions.list {
		for b := r.head; b != nil; b = b.next {
			if b.mapped {
				n++
			}
		}
	}
	all := make([]snapshot.Block, 0, n)
	out := make([]snapshot.Segment, 0, len(a.regions.list))
	a.EachSegment(nil, func(seg *snapshot.Segment) {
		start := len(all)
		all = append(all, seg.Blocks...)
		s := *seg
		s.Blocks = all[start:len(all):len(all)]
		out = append(out, s)
	})
	if kept := a.outside.segs; len(kept) > 0 {
		// Segments kept outside the simulation, in address order
		// among the others.
		for _, s := range kept {
			s.Blocks = slices.Clone(s.Blocks)
			out = append(out, s)
		}
		slices.SortStableFunc(out, func(x, y snapshot.Segment) int { return cmp.Compare(x.Address, y.Address) })
	}
	return out
}

// EachSegment calls fn with each segment Segments would return, in the
// same order, without keeping them: seg and its Blocks (built in buf,
// which may be nil) are reused by the next call. Comparing a replayed
// state of a million blocks with a snapshot this way holds one segment at
// a time instead of a copy of the whole state.
func (a *Allocator) EachSegment(buf []snapshot.Block, fn func(seg *snapshot.Segment)) {
	a.eachSegmentOf(a.regions.list, buf, fn)
}

// eachSegmentOf is EachSegment over some of a's regions. It only reads the
// allocator: calls on disjoint regions may run at once.
func (a *Allocator) eachSegmentOf(rs []*region, buf []snapshot.Block, fn func(seg *snapshot.Segment)) {
	var seg snapshot.Segment
	for _, r := range rs {
		for b := r.head; b != nil; {
			if !b.mapped {
				b = b.next
				continue
			}
			seg = snapshot.Segment{
				Device:     a.dev.index,
				Address:    b.addr,
				Stream:     r.stream,
				Pool:       r.pool.kind(),
				PoolID:     r.pool.id,
				Expandable: r.expandable,
				// Only the first block of a segment carries the segment's
				// stack; splitting hands the front to a new block without
				// it, which is why split segments show no frames.
				Stack: b.segStack,
			}
			buf = buf[:0]
			for ; b != nil && b.mapped; b = b.next {
				st := b.state()
				buf = append(buf, snapshot.Block{
					Address:       b.addr,
					Size:          b.size,
					RequestedSize: b.requested,
					State:         st,
					Stack:         b.stack,
				})
				seg.TotalSize += b.size
				if st == snapshot.ActiveAllocated {
					seg.AllocatedSize += b.size
				}
				if st.Active() {
					seg.ActiveSize += b.size
					seg.RequestedSize += b.requested
				}
			}
			seg.Blocks = buf
			fn(&seg)
		}
	}
}

// Snapshot is torch.cuda.memory._snapshot() for this device: the trace,
// the segments and the allocator settings, with the schema features of the
// simulated version. As in PyTorch, the trace is copied first and a
// "snapshot" entry (size = total active bytes) is recorded afterwards, so
// it shows up in the next snapshot.
func (a *Allocator) Snapshot() *snapshot.Snapshot {
	v := a.v
	// Traces is indexed by device ordinal; other devices have no history.
	traces := make([]*snapshot.Trace, a.dev.index+1)
	traces[a.dev.index] = a.hist.ring.trace()
	s := &snapshot.Snapshot{
		Traces:  traces,
		Stacks:  a.stacks,
		Strings: []string{""},
		// A copy: recording goes on after the snapshot is taken.
		Contexts: a.hist.contexts.Clone(),
		Features: snapshot.Features{
			BlockHistory:     v < V2_1,
			BlockAddresses:   v >= V2_1,
			TimeUS:           v.hasTimeUS(),
			CompileContext:   v.hasCompileContext(),
			UserMetadata:     v.hasUserMetadata(),
			AllocatorSetting: v.HasAllocatorSettings(),
			Annotations:      v.hasAnnotations(),
			TracePoolID:      v.TracesPoolID(),
		},
	}
	if v.hasCompileContext() {
		s.Strings = append(s.Strings, "N/A") // CompileContextNA
	}
	s.Segments = a.Segments()
	if v < V2_1 {
		s.History = a.historyChains()
	}
	if s.Stacks == nil {
		s.Stacks = snapshot.NewStacks()
	}
	if v.HasAllocatorSettings() {
		settings := a.cfg.Settings()
		s.Settings = &settings
	}
	var active int64
	for i := range s.Segments {
		active += s.Segments[i].ActiveSize
	}
	a.record(snapshot.ActionSnapshot, 0, active, 0, nil, snapshot.NoStack)
	return s
}

// historyChains is each mapped block's 2.0 history chain, for
// Snapshot.History (an empty map when no block has one).
func (a *Allocator) historyChains() map[snapshot.HistoryKey][]snapshot.HistoryItem {
	m := map[snapshot.HistoryKey][]snapshot.HistoryItem{}
	for _, r := range a.regions.list {
		for b := r.head; b != nil; b = b.next {
			if h := b.hist(); b.mapped && len(h) > 0 {
				m[snapshot.HistoryKey{Device: a.dev.index, Address: b.addr}] = h
			}
		}
	}
	return m
}

// numSegments is len(a.Segments()) without building them.
func (a *Allocator) NumSegments() int {
	n := 0
	for _, r := range a.regions.list {
		inRange := false
		for b := r.head; b != nil; b = b.next {
			if b.mapped && !inRange {
				n++
			}
			inRange = b.mapped
		}
	}
	return n + len(a.outside.segs)
}
