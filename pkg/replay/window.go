package replay

import "github.com/memstat/memstat/pkg/snapshot"

// traceWindow reads a compact trace (snapshot.Trace) for the step loop:
// it keeps a run of decoded entries around the position, so that reading
// the entry at hand and its neighbours is an index, and an allocator
// call's entries (usually a few, sometimes thousands) are a slice of it.
//
// A slice span returns stays valid until the next step (release): the
// window decodes into a buffer no span of this step points into, and
// reuses the buffers only once the step is over, so that the step loop
// allocates nothing (a new buffer for each run made the collector mark
// the whole allocator state every few thousand entries). No caller may
// modify a span.
type traceWindow struct {
	tr  *snapshot.Trace
	n   int
	lo  int // trace index of buf[0]
	buf []snapshot.TraceEntry
	// lent: a span of buf was handed out this step; held are the other
	// buffers spans of this step point into, spare the buffers free.
	lent        bool
	held, spare [][]snapshot.TraceEntry
}

// windowLen is how many entries a window decodes at once; windowBack of
// them lie before the entry that made it decode (the step code looks a
// few entries back).
const (
	windowLen  = 4096
	windowBack = 64
)

func newTraceWindow(tr *snapshot.Trace) traceWindow {
	return traceWindow{tr: tr, n: tr.Len()}
}

// at returns entry k.
func (w *traceWindow) at(k int) snapshot.TraceEntry {
	if d := k - w.lo; uint(d) < uint(len(w.buf)) {
		return w.buf[d]
	}
	w.load(k, k+1)
	return w.buf[k-w.lo]
}

// span returns entries [i, j), read-only, valid until the next release.
func (w *traceWindow) span(i, j int) []snapshot.TraceEntry {
	if i < w.lo || j > w.lo+len(w.buf) || i > j {
		w.load(i, j)
	}
	w.lent = true
	return w.buf[i-w.lo : j-w.lo : j-w.lo]
}

// release says that the spans handed out so far are no longer used.
func (w *traceWindow) release() {
	w.lent = false
	w.spare = append(w.spare, w.held...)
	clear(w.held)
	w.held = w.held[:0]
}

// load decodes a new run that covers [i, j).
func (w *traceWindow) load(i, j int) {
	if i < 0 || j > w.n || i > j {
		panic("replay: trace window out of range")
	}
	lo := max(0, i-windowBack)
	hi := min(w.n, max(j, lo+windowLen))
	buf := w.buf
	if w.lent {
		w.held = append(w.held, w.buf)
		buf = nil
		for k, b := range w.spare {
			if cap(b) >= hi-lo {
				buf = b
				w.spare = append(w.spare[:k], w.spare[k+1:]...)
				break
			}
		}
		w.lent = false
	}
	if cap(buf) < hi-lo {
		buf = make([]snapshot.TraceEntry, 0, max(hi-lo, windowLen))
	}
	w.lo, w.buf = lo, w.tr.Slice(lo, hi, buf)
}
