package trace

import (
	"math"
	"strconv"

	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/report"
)

// tableRow builds one text row of a listing (the default one and
// --stream's) in a buffer reused for every row: the cells lie one after
// another in line and cells slices it, not a string per cell.
type tableRow struct {
	line  []byte
	ends  []int
	cells [][]byte
	// frames holds each site cell's text, made once; frameAt[2*stack +
	// (1 if of the alloc)] is 1 + its index (0: not yet): an index per
	// entry, not a map lookup.
	frames  []string
	frameAt []int32
}

// begin starts a row with the cells both listings open with: index,
// time (withTime), action, name, size, stream.
func (r *tableRow) begin(ev *analysis.TraceEvent, withTime bool) {
	r.line, r.ends = r.line[:0], r.ends[:0]
	r.line = strconv.AppendInt(r.line, int64(ev.Index), 10)
	r.end()
	if withTime {
		r.line = report.AppendSeconds(r.line, ev.Seconds)
		r.end()
	}
	r.line = append(r.line, ev.Action...)
	r.end()
	r.line = report.AppendTraceName(r.line, ev)
	r.end()
	r.line = report.AppendSize(r.line, ev.Size)
	r.end()
	r.line = report.AppendStream(r.line, ev.Stream)
	r.end()
}

// end closes the cell appended to line since the previous one.
func (r *tableRow) end() { r.ends = append(r.ends, len(r.line)) }

// finish appends the frame cell and returns the row's cells (valid until
// the next begin).
func (r *tableRow) finish(ev *analysis.TraceEvent) [][]byte {
	r.line = append(r.line, r.frame(ev)...)
	r.end()
	c, start := r.cells[:0], 0
	for _, end := range r.ends {
		c = append(c, r.line[start:end:end])
		start = end
	}
	r.cells = c
	return c
}

// frame is the entry's site cell, made once per stack.
func (r *tableRow) frame(ev *analysis.TraceEvent) string {
	slot := 2 * int(ev.SiteStack)
	if ev.SiteOfAlloc {
		slot++
	}
	if slot >= len(r.frameAt) {
		r.frameAt = append(r.frameAt, make([]int32, slot+1-len(r.frameAt))...)
	}
	if k := r.frameAt[slot]; k > 0 {
		return r.frames[k-1]
	}
	frame := report.TraceFrame(ev)
	if len(r.frames) < math.MaxInt32 {
		r.frames = append(r.frames, frame)
		r.frameAt[slot] = int32(len(r.frames))
	}
	return frame
}
