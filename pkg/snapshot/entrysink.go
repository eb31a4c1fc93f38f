package snapshot

import "sync/atomic"

// entrySink appends the trace entries a large file decodes to the
// builder's compact trace on a goroutine of its own: the encoding
// (TraceBuilder.Append, a tenth of decoding a torch-shaped pickle) runs
// on the core the decoder leaves mostly idle, and so does TraceGrown's
// hand-over of the finished chunks. The decoder fills a batch of entries
// and passes it on; a few batches go round, so the goroutine is at most
// that far behind and the memory bounded. The trace is the one Append
// one entry at a time makes: the entries arrive in order.
type entrySink struct {
	// batch is being filled by the decoding goroutine; closed says
	// finish was called (that goroutine's too).
	batch  []TraceEntry
	closed bool
	full   chan []TraceEntry
	free   chan []TraceEntry
	done   chan struct{}
	// bytes is the trace's storage after the last batch appended (the
	// builder's footprint reads it while the goroutine appends).
	bytes atomic.Int64
	// Owned by the goroutine until done is closed.
	trace    *TraceBuilder
	grown    func(*Trace)
	grownLen int
}

const (
	sinkBatch   = 1024
	sinkBatches = 4
)

// entrySinkMin is the smallest input whose entries go through a sink:
// below it the goroutine saves nothing worth starting it (the size the
// read-ahead starts at; tests set it to 0).
var entrySinkMin int64 = readAheadMin

func startEntrySink(t *TraceBuilder, grown func(*Trace)) *entrySink {
	s := &entrySink{
		batch: make([]TraceEntry, 0, sinkBatch),
		full:  make(chan []TraceEntry, sinkBatches),
		free:  make(chan []TraceEntry, sinkBatches),
		done:  make(chan struct{}),
		trace: t,
		grown: grown,
	}
	for range sinkBatches - 1 {
		s.free <- make([]TraceEntry, 0, sinkBatch)
	}
	go s.run()
	return s
}

// add appends e (on the decoding goroutine).
func (s *entrySink) add(e TraceEntry) {
	s.batch = append(s.batch, e)
	if len(s.batch) == sinkBatch {
		s.full <- s.batch
		s.batch = (<-s.free)[:0]
	}
}

func (s *entrySink) run() {
	defer close(s.done)
	t := s.trace
	for b := range s.full {
		for i := range b {
			t.Append(b[i])
		}
		s.bytes.Store(t.Bytes())
		if s.grown != nil && t.ClosedLen() != s.grownLen {
			s.grownLen = t.ClosedLen()
			s.grown(t.Closed())
		}
		s.free <- b
	}
}

// finish appends what is left and waits for the goroutine: the trace is
// the decoding goroutine's again. Later calls do nothing.
func (s *entrySink) finish() {
	if s.closed {
		return
	}
	s.closed = true
	if len(s.batch) > 0 {
		s.full <- s.batch
		s.batch = nil
	}
	close(s.full)
	<-s.done
}
