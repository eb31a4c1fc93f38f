package trace

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/memstat/memstat/internal/parallel"
	"github.com/memstat/memstat/pkg/analysis"
)

// The walk (the replay, locating and naming) and the printing (formatting
// and writing each line) each take about half of a listing's time. They
// run on two goroutines: the walk copies each event it selects into a
// batch, and a printer goroutine formats and writes the batches in order.
// A fixed set of batch buffers goes round between the two, so memory stays
// bounded whatever the trace's length, and the walk is at most a few
// batches ahead of the output: a closed pipe stops it promptly.
const (
	// firstBatch is the first batch's length; each next batch is twice
	// as long, up to maxBatch: the first lines go out as soon as they
	// would on one goroutine, and the walk is only a few rows ahead then.
	firstBatch = 16
	maxBatch   = 512
	// batchBuffers is how many batches exist: one being filled, the rest
	// waiting to be printed or being printed.
	batchBuffers = 4
)

// errStopped is what the walk's emit returns once the printer has
// stopped (a write error): it ends the walk; the printer's own error is
// the one returned.
var errStopped = errors.New("trace: the printer stopped")

// pipe carries the selected events from the walk to the printer.
type pipe struct {
	// full holds the batches to print, in order; free the printed ones,
	// to be filled again.
	full, free chan []analysis.TraceEvent
	// done is closed when the printer stops early, its error in err.
	done chan struct{}
	err  error
	// ship is set by the printer's clock: the walk sends the batch it is
	// filling however short, so that sparse lines (a filter that keeps
	// few entries) are not held back for long.
	ship  atomic.Bool
	batch []analysis.TraceEvent
	limit int
}

// printWalk runs the walk of w with the printer p writing to out on a
// second goroutine, and returns once both have ended: the walk's summary,
// or the first error (the printer's, e.g. a closed pipe, before the
// walk's, since the rows it failed on come first). A panic in the printer
// comes back as a *parallel.PanicError, which root.Main reports as one.
func printWalk(w *analysis.TraceWalk, fr *analysis.Frames, q analysis.TraceQuery, p printer, out *flusher) (*analysis.TraceSummary, error) {
	pp := &pipe{
		full:  make(chan []analysis.TraceEvent, batchBuffers),
		free:  make(chan []analysis.TraceEvent, batchBuffers),
		done:  make(chan struct{}),
		limit: firstBatch,
	}
	for range batchBuffers - 1 {
		pp.free <- nil // grown by append as the batches lengthen
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		pp.print(p, out)
	}()
	closed := false
	defer func() {
		// On every way out (a panic of the walk included) the printer
		// goroutine ends before printWalk returns.
		if !closed {
			close(pp.full)
		}
		<-finished
	}()
	sum, err := w.Run(fr, q, pp.add)
	if !errors.Is(err, errStopped) {
		// The rows before a failure of the walk are printed, as they were
		// when the walk printed them itself.
		pp.send()
	}
	close(pp.full)
	closed = true
	<-finished
	if pp.err != nil {
		return nil, pp.err
	}
	return sum, err
}

// add is the walk's emit: it copies the event (the walk reuses it) into
// the batch being filled, and sends the batch when it is full or the
// printer's clock asks for it.
func (pp *pipe) add(ev *analysis.TraceEvent) error {
	pp.batch = append(pp.batch, *ev)
	if len(pp.batch) >= pp.limit || pp.ship.Load() {
		return pp.send()
	}
	return nil
}

// send hands the batch being filled to the printer and takes an empty
// one; errStopped once the printer has stopped.
func (pp *pipe) send() error {
	if len(pp.batch) == 0 {
		return nil
	}
	pp.ship.Store(false)
	select {
	case pp.full <- pp.batch:
	case <-pp.done:
		return errStopped
	}
	pp.limit = min(2*pp.limit, maxBatch)
	select {
	case b := <-pp.free:
		pp.batch = b[:0]
	case <-pp.done:
		return errStopped
	}
	return nil
}

// print formats and writes the batches in order until full is closed or
// a write fails. Every flushEvery it flushes what is buffered and asks
// the walk for the batch it is filling.
func (pp *pipe) print(p printer, out *flusher) {
	defer func() {
		if r := parallel.Recovered(recover()); r != nil {
			pp.stop(r)
		}
	}()
	clock := time.NewTicker(flushEvery)
	defer clock.Stop()
	for {
		select {
		case b, ok := <-pp.full:
			if !ok {
				return
			}
			for i := range b {
				err := p.event(&b[i])
				if err == nil {
					err = out.tick()
				}
				if err != nil {
					pp.stop(err)
					return
				}
			}
			pp.free <- b // never blocks: it has room for every buffer
		case <-clock.C:
			pp.ship.Store(true)
			if err := out.flushBuffered(); err != nil {
				pp.stop(err)
				return
			}
		}
	}
}

// stop ends the printing with err and tells the walk.
func (pp *pipe) stop(err error) {
	pp.err = err
	close(pp.done)
}
