package snapshot

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"sync/atomic"
	"testing"

	"github.com/memstat/memstat/internal/chunkread"
)

// TestReadAheadHandsOutTheSource: the bytes come back whole and in order,
// across buffer boundaries, whatever sizes the source and the reader use,
// then io.EOF (and io.EOF again).
func TestReadAheadHandsOutTheSource(t *testing.T) {
	data := make([]byte, 3*readAheadSize+12345)
	rand.New(rand.NewSource(1)).Read(data)
	for _, tc := range []struct {
		name string
		src  io.Reader
		read int
	}{
		{"whole reads", bytes.NewReader(data), 1 << 20},
		{"small reads", bytes.NewReader(data), 777},
		{"small source chunks", chunkread.New(data), 100000},
	} {
		a := newReadAhead(tc.src)
		var got []byte
		p := make([]byte, tc.read)
		for {
			n, err := a.Read(p)
			got = append(got, p[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		if n, err := a.Read(p); n != 0 || err != io.EOF {
			t.Errorf("%s: a read after the end gave %d, %v; want 0, EOF", tc.name, n, err)
		}
		a.Close()
		if !bytes.Equal(got, data) {
			t.Errorf("%s: read %d bytes, not the source's %d (or not in order)", tc.name, len(got), len(data))
		}
	}
}

// failingSource gives n bytes, then err.
type failingSource struct {
	n   int
	err error
}

func (f *failingSource) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, f.err
	}
	m := min(len(p), f.n)
	f.n -= m
	return m, nil
}

// TestReadAheadPassesTheSourceError: every byte before a read error, then
// the error itself (not io.EOF), again at each read.
func TestReadAheadPassesTheSourceError(t *testing.T) {
	bad := errors.New("disk on fire")
	a := newReadAhead(&failingSource{n: readAheadSize + 10, err: bad})
	defer a.Close()
	n, err := io.Copy(io.Discard, a)
	if n != readAheadSize+10 || err != bad {
		t.Fatalf("copied %d bytes, %v; want %d bytes, then %v", n, err, readAheadSize+10, bad)
	}
	if _, err := a.Read(make([]byte, 1)); err != bad {
		t.Errorf("a second read: %v, want %v", err, bad)
	}
}

// countingSource counts its reads and never ends.
type countingSource struct{ reads atomic.Int64 }

func (c *countingSource) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return len(p), nil
}

// TestReadAheadCloseStopsReading: after Close the source is not read again
// (the goroutine has returned), even when the reader stopped early with
// buffers full and the goroutine waiting to hand over the next.
func TestReadAheadCloseStopsReading(t *testing.T) {
	src := &countingSource{}
	a := newReadAhead(src)
	if _, err := a.Read(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	a.Close()
	n := src.reads.Load()
	if n > readAheadBuffers+1 {
		t.Errorf("the source was read %d times for %d buffers", n, readAheadBuffers)
	}
	a.Close() // twice is fine
	for range 1000 {
		if src.reads.Load() != n {
			t.Fatal("the source was read after Close returned")
		}
	}
}

// TestReadLargeFileAhead: a snapshot past readAheadMin read with its size
// (through the read-ahead, the decoder reading its buffers directly) gives
// the model of the same bytes streamed in small chunks, and the same error
// when it is cut short.
func TestReadLargeFileAhead(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, synthetic(100, 60000, 100, 10)); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	if len(data) < readAheadMin+readAheadSize {
		t.Fatalf("the test snapshot is %d bytes, under the read-ahead's %d", len(data), readAheadMin+readAheadSize)
	}
	if _, err := checkRead(t, data); err != nil {
		t.Fatal(err)
	}
	if _, err := checkRead(t, data[:len(data)-readAheadSize-3]); err == nil {
		t.Fatal("a truncated file read without error")
	}
}
