package snapshot

import (
	"io"
	"sync"
)

// readAhead reads its source in a goroutine of its own, a few buffers
// ahead of its reader, so that the read system calls (copying the file out
// of the page cache) run on another core while the decoder works on what
// came before. Read hands out the buffers' bytes in order, then the
// source's error (io.EOF at the end), as the source gave them.
//
// Close stops the goroutine and waits for it: after Close the source is
// not read again. The source must not block for long (a file or bytes in
// memory, not a pipe or a terminal): Close waits for a read under way.
type readAhead struct {
	full chan aheadChunk
	free chan []byte
	done chan struct{}
	wg   sync.WaitGroup

	cur  []byte // the unread part of the buffer being read
	held []byte // that buffer, to give back once read
	err  error  // the source's error, after the buffers
	once sync.Once
}

type aheadChunk struct {
	b   []byte
	err error
}

// Read-ahead sizes: readAheadBuffers buffers of readAheadSize bytes (the
// decoder reads up to 1 MiB at a time, and a hand-over costs a few
// microseconds), and files from readAheadMin bytes (a goroutine is not
// worth it for a small file).
const (
	readAheadBuffers = 4
	readAheadSize    = 256 << 10
	readAheadMin     = 4 << 20
)

func newReadAhead(src io.Reader) *readAhead {
	a := &readAhead{
		full: make(chan aheadChunk, readAheadBuffers),
		free: make(chan []byte, readAheadBuffers),
		done: make(chan struct{}),
	}
	for range readAheadBuffers {
		a.free <- make([]byte, readAheadSize)
	}
	a.wg.Add(1)
	go a.run(src)
	return a
}

// run fills free buffers from src and passes them on, until src ends or
// fails or the reader closes.
func (a *readAhead) run(src io.Reader) {
	defer a.wg.Done()
	for {
		var buf []byte
		select {
		case buf = <-a.free:
		case <-a.done:
			return
		}
		n := 0
		var err error
		for n < len(buf) && err == nil {
			var m int
			m, err = src.Read(buf[n:])
			n += m
		}
		select {
		case a.full <- aheadChunk{buf[:n], err}:
		case <-a.done:
			return
		}
		if err != nil {
			return
		}
	}
}

func (a *readAhead) Read(p []byte) (int, error) {
	for len(a.cur) == 0 {
		if a.err != nil {
			return 0, a.err
		}
		if a.held != nil {
			a.free <- a.held[:cap(a.held)]
			a.held = nil
		}
		c := <-a.full
		a.cur, a.held, a.err = c.b, c.b, c.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	n := copy(p, a.cur)
	a.cur = a.cur[n:]
	return n, nil
}

// Close stops the reading goroutine and waits until it has returned.
func (a *readAhead) Close() {
	a.once.Do(func() {
		close(a.done)
		a.wg.Wait()
	})
}
