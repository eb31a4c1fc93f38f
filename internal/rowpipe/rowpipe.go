// Package rowpipe runs a listing's producer (a replay that yields rows)
// and its writer (formatting and writing each row) on two goroutines, so
// that a long listing (memstat trace, memstat export) takes the longer of
// the two rather than their sum.
//
// The producer copies each row into a batch; full batches go to the
// writer in order over a channel, and a fixed set of batch buffers goes
// round between the two, so memory stays bounded whatever the listing's
// length and the producer is never more than a few batches ahead of the
// output: a write error (a closed pipe) stops it promptly.
package rowpipe

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/memstat/memstat/internal/parallel"
)

const (
	// firstBatch is the first batch's length; each next batch is twice
	// as long, up to maxBatch: the first rows go out as soon as they
	// would on one goroutine, and the producer is only a few rows ahead
	// then.
	firstBatch = 16
	maxBatch   = 512
	// buffers is how many batches exist: one being filled, the rest
	// waiting to be written or being written.
	buffers = 4
)

// TickEvery is how often the writer's clock ticks: it calls the tick
// function (flush what is buffered) and asks the producer to send the
// batch it is filling at its next row however short, so that a row that
// comes after a quiet tick (a filter that keeps few) goes out at once.
const TickEvery = 100 * time.Millisecond

// ErrStopped is what add returns once the writer has stopped (its error
// is the one Run returns); the producer should return it as it is.
var ErrStopped = errors.New("rowpipe: the writer stopped")

// Run calls produce on this goroutine with add, which queues a copy of a
// row (the producer may reuse it), and write on a second goroutine with
// each row in order; tick (nil: none) runs on the writer's goroutine every
// TickEvery. It returns once both have ended: the writer's error if it
// stopped (its rows come before the producer's failure, if any), else
// produce's. The rows added before a failure of produce are written. A
// panic of the writer comes back as a *parallel.PanicError.
func Run[T any](produce func(add func(*T) error) error, write func(*T) error, tick func() error) error {
	return RunShipping(func(add func(*T) error, _ func() error) error { return produce(add) }, write, tick)
}

// RunShipping is Run for a producer that also knows when rows must not
// wait for more (a decoder whose filter keeps few rows, a file read slowly):
// ship hands the rows added so far to the writer at once, however few, and
// returns once they are written, so that what the writer has written by
// then is what a writer on the producer's goroutine would have (on a busy
// machine the writer's goroutine may otherwise run late).
func RunShipping[T any](produce func(add func(*T) error, ship func() error) error, write func(*T) error, tick func() error) error {
	p := &pipe[T]{
		full:  make(chan []T, buffers),
		free:  make(chan []T, buffers),
		done:  make(chan struct{}),
		limit: firstBatch,
	}
	for range buffers - 1 {
		p.free <- nil // grown by append as the batches lengthen
	}
	p.ship.Store(true) // the first row goes out at once
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		p.write(write, tick)
	}()
	closed := false
	defer func() {
		// On every way out (a panic of produce included) the writer's
		// goroutine ends before Run returns.
		if !closed {
			close(p.full)
		}
		<-finished
	}()
	err := produce(p.add, p.drain)
	if !errors.Is(err, ErrStopped) {
		p.send()
	}
	close(p.full)
	closed = true
	<-finished
	if p.err != nil {
		return p.err
	}
	return err
}

type pipe[T any] struct {
	// full holds the batches to write, in order; free the written ones,
	// to be filled again.
	full, free chan []T
	// done is closed when the writer stops early, its error in err.
	done chan struct{}
	err  error
	// ship is set by the writer's clock (and at the start): send the
	// batch being filled at the next row.
	ship  atomic.Bool
	batch []T
	limit int
}

func (p *pipe[T]) add(row *T) error {
	p.batch = append(p.batch, *row)
	if len(p.batch) >= p.limit || p.ship.Load() {
		return p.send()
	}
	return nil
}

// send hands the batch being filled to the writer and takes an empty one;
// ErrStopped once the writer has stopped.
func (p *pipe[T]) send() error {
	if len(p.batch) == 0 {
		return nil
	}
	p.ship.Store(false)
	select {
	case p.full <- p.batch:
	case <-p.done:
		return ErrStopped
	}
	p.limit = min(2*p.limit, maxBatch)
	select {
	case b := <-p.free:
		p.batch = b[:0]
	case <-p.done:
		return ErrStopped
	}
	return nil
}

// drain sends the batch being filled and waits until the writer has
// written every batch sent: it has then handed back every buffer but the
// one being filled.
func (p *pipe[T]) drain() error {
	if err := p.send(); err != nil {
		return err
	}
	var held [buffers - 1][]T
	for i := range held {
		select {
		case held[i] = <-p.free:
		case <-p.done:
			return ErrStopped
		}
	}
	for _, b := range held {
		p.free <- b
	}
	return nil
}

func (p *pipe[T]) write(write func(*T) error, tick func() error) {
	defer func() {
		if r := parallel.Recovered(recover()); r != nil {
			p.stop(r)
		}
	}()
	clock := time.NewTicker(TickEvery)
	defer clock.Stop()
	for {
		select {
		case b, ok := <-p.full:
			if !ok {
				return
			}
			for i := range b {
				if err := write(&b[i]); err != nil {
					p.stop(err)
					return
				}
			}
			p.free <- b // never blocks: it has room for every buffer
		case <-clock.C:
			p.ship.Store(true)
			if tick != nil {
				if err := tick(); err != nil {
					p.stop(err)
					return
				}
			}
		}
	}
}

func (p *pipe[T]) stop(err error) {
	p.err = err
	close(p.done)
}
