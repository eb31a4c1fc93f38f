package view

import (
	"container/heap"

	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/snapshot"
)

// grouping assigns each interval a group: of[k] indexes keys.
type grouping struct {
	keys   []string
	labels []string
	of     []uint32
}

// grouping returns (and keeps) the groups of one kind, with the keys
// `peak --by` gives live blocks.
func (m *Model) grouping(by analysis.GroupBy) *grouping {
	if g, ok := m.groups[by]; ok {
		return g
	}
	g := &grouping{of: make([]uint32, m.Len())}
	ids := map[string]uint32{}
	label := ""
	intern := func(key string) uint32 {
		id, ok := ids[key]
		if !ok {
			id = uint32(len(g.keys))
			ids[key] = id
			g.keys = append(g.keys, key)
			if label == "" {
				label = key
			}
			g.labels = append(g.labels, label)
		}
		label = ""
		return id
	}
	fr := m.Frames
	var anns []string
	if by == analysis.ByAnnotation {
		anns = m.annotations()
	}
	byStack := map[snapshot.StackID]uint32{}
	trace := m.reader()
	for k := range m.Start {
		stack := m.stackOf(trace, k)
		before := m.Entry[k] < 0
		switch by {
		case ByPool:
			g.of[k] = intern(m.Pools[m.Pool[k]].String())
			continue
		case analysis.ByAnnotation:
			key := anns[k]
			switch {
			case before:
				key = analysis.BeforeTraceLabel
			case key == "":
				key = analysis.NoAnnotationLabel
			}
			g.of[k] = intern(key)
			continue
		}
		if stack == snapshot.NoStack && before {
			g.of[k] = intern(analysis.NoStackBeforeTrace.Name)
			continue
		}
		if id, ok := byStack[stack]; ok {
			g.of[k] = id
			continue
		}
		var key string
		switch by {
		case analysis.ByFrame:
			key = analysis.FrameString(fr.Site(stack))
		case analysis.ByFile:
			s := fr.Site(stack)
			key = s.Name
			if s.Filename != "" {
				key = analysis.ShortFile(s.Filename)
			}
		default:
			if key = fr.Key(stack); key == "" {
				key = analysis.NoStackFrame.Name
			}
			// A whole stack is too long to read: its site names it.
			label = analysis.FrameString(fr.Site(stack)) + " (stack)"
		}
		byStack[stack] = intern(key)
		g.of[k] = byStack[stack]
	}
	m.groups[by] = g
	return g
}

// annotations returns, for each interval allocated during the trace, the
// innermost annotated range open at its alloc entry (Phases.At), in one
// sweep over the time-ordered entries; an entry earlier than the one
// before it (threads' clocks) is looked up directly.
func (m *Model) annotations() []string {
	rp := m.Replayed
	ph := rp.Phases
	trace := m.reader()
	out := make([]string, m.Len())
	open := &maxInts{}
	next := 0
	var last int64
	for k, e := range m.Entry {
		if e < 0 {
			continue
		}
		t := trace.At(int(e)).TimeUS
		if t == 0 {
			continue
		}
		if t < last {
			out[k] = ph.At(t)
			continue
		}
		last = t
		for next < len(ph) && ph[next].StartUS <= t {
			heap.Push(open, next)
			next++
		}
		// The innermost range is the latest started that still holds t;
		// ranges that ended before t never hold a later time either.
		for open.Len() > 0 {
			p := ph[open.s[0]]
			if p.EndUS != 0 && p.EndUS < t {
				heap.Pop(open)
				continue
			}
			break
		}
		if open.Len() > 0 {
			out[k] = ph[open.s[0]].Name
		}
	}
	return out
}

// maxInts is a max-heap of ints.
type maxInts struct{ s []int }

func (h *maxInts) Len() int           { return len(h.s) }
func (h *maxInts) Less(i, j int) bool { return h.s[i] > h.s[j] }
func (h *maxInts) Swap(i, j int)      { h.s[i], h.s[j] = h.s[j], h.s[i] }
func (h *maxInts) Push(x any)         { h.s = append(h.s, x.(int)) }
func (h *maxInts) Pop() any {
	x := h.s[len(h.s)-1]
	h.s = h.s[:len(h.s)-1]
	return x
}
