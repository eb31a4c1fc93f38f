package rowpipe

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/memstat/memstat/internal/parallel"
)

// TestOrder: every row arrives, in order, whatever the batch lengths.
func TestOrder(t *testing.T) {
	for _, n := range []int{0, 1, 15, 16, 17, 5000, 100000} {
		next := 0
		err := Run(func(add func(*int) error) error {
			for i := range n {
				if err := add(&i); err != nil {
					return err
				}
			}
			return nil
		}, func(v *int) error {
			if *v != next {
				t.Fatalf("%d rows: row %d arrived as the %dth", n, *v, next)
			}
			next++
			return nil
		}, nil)
		if err != nil || next != n {
			t.Fatalf("%d rows: %d written, error %v", n, next, err)
		}
	}
}

// TestWriterError: a write error stops the producer within a few batches,
// is returned once and as it is, and no goroutine is left.
func TestWriterError(t *testing.T) {
	before := runtime.NumGoroutine()
	errWrite := errors.New("write failed")
	for _, at := range []int{0, 1, 100, 10000} {
		produced, written := 0, 0
		err := Run(func(add func(*int) error) error {
			for i := range 1000000 {
				produced++
				if err := add(&i); err != nil {
					return err
				}
			}
			return nil
		}, func(v *int) error {
			if written == at {
				return errWrite
			}
			written++
			return nil
		}, nil)
		if err != errWrite {
			t.Fatalf("at %d: error %v", at, err)
		}
		if written != at || produced > at+buffers*maxBatch+1 {
			t.Errorf("at %d: %d written, %d produced: the producer went on", at, written, produced)
		}
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines, %d before", n, before)
	}
}

// TestProducerError: the rows added before the producer fails are all
// written, then its error is returned.
func TestProducerError(t *testing.T) {
	errReplay := errors.New("replay failed")
	written := 0
	err := Run(func(add func(*int) error) error {
		for i := range 1000 {
			add(&i)
		}
		return errReplay
	}, func(*int) error { written++; return nil }, nil)
	if err != errReplay || written != 1000 {
		t.Errorf("error %v after %d rows, want %v after 1000", err, written, errReplay)
	}
}

// TestWriterPanic: a panic while writing comes back as a PanicError, and
// the producer stops.
func TestWriterPanic(t *testing.T) {
	err := Run(func(add func(*int) error) error {
		for i := range 1000000 {
			if err := add(&i); err != nil {
				return err
			}
		}
		return nil
	}, func(v *int) error {
		if *v == 50 {
			panic("bad row")
		}
		return nil
	}, nil)
	var p *parallel.PanicError
	if !errors.As(err, &p) {
		t.Fatalf("error %v, want a PanicError", err)
	}
}

// TestSparseRows: a row that comes after a quiet tick is written within
// a tick or two, not when a batch fills or the producer ends.
func TestSparseRows(t *testing.T) {
	got := make(chan int, 10)
	err := Run(func(add func(*int) error) error {
		for i := range 3 {
			time.Sleep(2 * TickEvery)
			add(&i)
			deadline := time.Now().Add(3 * TickEvery)
			for time.Now().Before(deadline) && len(got) <= i {
				time.Sleep(time.Millisecond)
			}
			if len(got) <= i {
				t.Errorf("row %d not written after %v", i, 3*TickEvery)
			}
		}
		return nil
	}, func(v *int) error { got <- *v; return nil }, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
}
