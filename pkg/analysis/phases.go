package analysis

import (
	"slices"

	"github.com/memstat/memstat/pkg/snapshot"
)

// Phase is one range of a device's external annotations: a
// record_function START and its END (forward, backward,
// "Optimizer.step#AdamW.step", ...).
type Phase struct {
	Name    string `json:"name"`
	StartUS int64  `json:"start_time_us"`
	// EndUS is 0 when the range was still open when the snapshot was
	// taken.
	EndUS int64 `json:"end_time_us,omitempty"`
}

// contains reports whether t falls in the range (both ends included).
func (p Phase) contains(t int64) bool {
	return t >= p.StartUS && (p.EndUS == 0 || t <= p.EndUS)
}

// Phases are a device's annotated ranges, in start order.
type Phases []Phase

// PhasesOf pairs the START and END annotations of one device by name (the
// latest open START of a name ends first). Annotations without a stage are
// instants and make no range.
func PhasesOf(s *snapshot.Snapshot, device int) Phases {
	var out Phases
	open := map[string][]int{}
	anns := make([]snapshot.Annotation, 0, len(s.Annotations))
	for _, a := range s.Annotations {
		if a.Device == device && a.TimeUS != 0 {
			anns = append(anns, a)
		}
	}
	slices.SortStableFunc(anns, func(x, y snapshot.Annotation) int {
		switch {
		case x.TimeUS < y.TimeUS:
			return -1
		case x.TimeUS > y.TimeUS:
			return 1
		}
		return 0
	})
	for _, a := range anns {
		switch a.Stage {
		case "START":
			open[a.Name] = append(open[a.Name], len(out))
			out = append(out, Phase{Name: a.Name, StartUS: a.TimeUS})
		case "END":
			st := open[a.Name]
			if len(st) == 0 {
				// Its START happened before recording began.
				out = append(out, Phase{Name: a.Name, EndUS: a.TimeUS})
				continue
			}
			out[st[len(st)-1]].EndUS = a.TimeUS
			open[a.Name] = st[:len(st)-1]
		}
	}
	slices.SortStableFunc(out, func(x, y Phase) int {
		switch {
		case x.StartUS < y.StartUS:
			return -1
		case x.StartUS > y.StartUS:
			return 1
		}
		return 0
	})
	return out
}

// At returns the name of the innermost range open at time t (the one
// started last), or "" when none is or t is unknown (0).
func (ps Phases) At(t int64) string {
	if t == 0 {
		return ""
	}
	name := ""
	for _, p := range ps {
		if p.StartUS > t {
			break
		}
		if p.contains(t) {
			name = p.Name
		}
	}
	return name
}

// PhaseCursor answers Phases.At for times that mostly come in order (a
// trace's entries): it keeps the ranges started so far that may still be
// open, so that each range is passed once over a walk instead of every
// range up to t once an entry (2% of a trace listing's walk on a 30-step
// run's thousands of ranges). A time earlier than the last starts over.
type PhaseCursor struct {
	ps Phases
	// next is the first range that starts after last; open holds the
	// indexes of those before it that had not ended at last, in order.
	next int
	open []int
	last int64
}

// Cursor returns a cursor over ps at the start.
func (ps Phases) Cursor() *PhaseCursor { return &PhaseCursor{ps: ps} }

// At is ps.At(t).
func (c *PhaseCursor) At(t int64) string {
	if t == 0 {
		return ""
	}
	if t < c.last {
		c.next, c.open = 0, c.open[:0]
	}
	c.last = t
	for c.next < len(c.ps) && c.ps[c.next].StartUS <= t {
		c.open = append(c.open, c.next)
		c.next++
	}
	// The innermost range open is the last started that has not ended; a
	// range that ended before t has ended for every later time too, so it
	// leaves for good.
	for n := len(c.open); n > 0; n-- {
		if p := &c.ps[c.open[n-1]]; p.contains(t) {
			c.open = c.open[:n]
			return p.Name
		}
	}
	c.open = c.open[:0]
	return ""
}

// Open calls fn with the index of every range open at time t.
func (ps Phases) open(t int64, fn func(i int)) {
	if t == 0 {
		return
	}
	for i, p := range ps {
		if p.StartUS > t {
			break
		}
		if p.contains(t) {
			fn(i)
		}
	}
}
