package trace

import (
	"bytes"
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/report"
	"github.com/memstat/memstat/pkg/snapshot"
)

// longTrace records a snapshot whose trace has pairs allocations and
// frees (with frames, never more than 64 blocks live, so that the state
// stays small whatever the length) and returns its path.
func longTrace(t testing.TB, pairs int) string {
	t.Helper()
	stacks := snapshot.NewStacks()
	a, err := allocator.New(allocator.DefaultConfig(allocator.Latest), allocator.Options{Stacks: stacks})
	if err != nil {
		t.Fatal(err)
	}
	a.RecordHistory(allocator.HistoryOptions{Enabled: allocator.HistoryAll, Context: allocator.ContextAll})
	var sites []snapshot.StackID
	for i := range 16 {
		sites = append(sites, stacks.InternFrames([]snapshot.Frame{
			{Filename: "train.py", Line: int64(100 + i), Name: "forward"},
			{Filename: "train.py", Line: 7, Name: "main"},
		}))
	}
	var live []uint64
	for i := range pairs {
		if len(live) == 64 {
			if err := a.Free(live[0], 0); err != nil {
				t.Fatal(err)
			}
			live = live[1:]
		}
		addr, err := a.Malloc(int64(512+(i%97)*4096), 0, sites[i%len(sites)])
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, addr)
	}
	p := filepath.Join(t.TempDir(), "long.pickle")
	if err := snapshot.WriteFile(p, a.Snapshot()); err != nil {
		t.Fatal(err)
	}
	return p
}

// probe is an output that calls at with the bytes written so far before
// each write; with discard it keeps none of them.
type probe struct {
	bytes.Buffer
	at      func(n int) error
	n       int
	discard bool
}

func (p *probe) Write(b []byte) (int, error) {
	if err := p.at(p.n); err != nil {
		return 0, err
	}
	p.n += len(b)
	if p.discard {
		return len(b), nil
	}
	return p.Buffer.Write(b)
}

func newOptions(out *probe, file string, format report.Format) *Options {
	ios, _, _, _ := iostreams.Test()
	ios.Out = out
	return &Options{IO: ios, File: file, Format: format, Device: -1}
}

// TestStreams: the first lines are written when the replay has applied
// only the first entries, in text and in JSON Lines; the whole listing is
// still every entry.
func TestStreams(t *testing.T) {
	fn := longTrace(t, 20000)
	for _, f := range []report.Format{report.Text, report.JSON} {
		t.Run(string(f), func(t *testing.T) {
			out := &probe{}
			opts := newOptions(out, fn, f)
			firstAt := -1
			out.at = func(n int) error {
				if firstAt < 0 {
					firstAt = opts.walk.Applied()
				}
				return nil
			}
			if err := runTrace(opts); err != nil {
				t.Fatal(err)
			}
			entries := opts.walk.Entries()
			if firstAt < 0 || firstAt > entries/20 {
				t.Errorf("first write after %d of %d entries: the listing does not stream", firstAt, entries)
			}
			lines := strings.Count(out.String(), "\n")
			if lines < entries {
				t.Errorf("%d lines for %d entries", lines, entries)
			}
		})
	}
}

// TestClosedPipe: a write error (the reader closed the pipe) stops the
// replay at once and is returned as it is, and the printer goroutine has
// ended when runTrace returns; root.Main turns EPIPE into a quiet exit 0
// (see root's TestClosedPipeExitsZero).
func TestClosedPipe(t *testing.T) {
	fn := longTrace(t, 20000)
	before := runtime.NumGoroutine()
	for _, f := range []report.Format{report.Text, report.Markdown, report.JSON} {
		out := &probe{}
		opts := newOptions(out, fn, f)
		out.at = func(n int) error {
			if n > 0 {
				return syscall.EPIPE
			}
			return nil
		}
		err := runTrace(opts)
		if !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("%s: error %v, want EPIPE", f, err)
		}
		if got, all := opts.walk.Applied(), opts.walk.Entries(); got > all/10 {
			t.Errorf("%s: the replay went on to entry %d of %d after the pipe closed", f, got, all)
		}
		if n := goroutinesAfter(before); n > before {
			t.Errorf("%s: %d goroutines after the listing, %d before: the printer did not end", f, n, before)
		}
	}
}

// TestWriteErrorLate: a write error after many batches (the walk well
// ahead, the printer's buffers all in use) still ends the listing with
// that error, once, and no goroutine is left behind.
func TestWriteErrorLate(t *testing.T) {
	fn := longTrace(t, 20000)
	before := runtime.NumGoroutine()
	for _, f := range []report.Format{report.Text, report.JSON} {
		for _, at := range []int{1 << 20, 2<<20 + 17} {
			out := &probe{discard: true}
			opts := newOptions(out, fn, f)
			fails := 0
			out.at = func(n int) error {
				if n >= at {
					fails++
					return syscall.EPIPE
				}
				return nil
			}
			err := runTrace(opts)
			if !errors.Is(err, syscall.EPIPE) {
				t.Fatalf("%s: error %v, want EPIPE", f, err)
			}
			if fails != 1 {
				t.Errorf("%s: %d writes after the first failed one", f, fails-1)
			}
			if got, all := opts.walk.Applied(), opts.walk.Entries(); got == all {
				t.Errorf("%s: the replay went on to the end after the pipe closed", f)
			}
			if n := goroutinesAfter(before); n > before {
				t.Errorf("%s: %d goroutines after the listing, %d before: the printer did not end", f, n, before)
			}
		}
	}
}

// TestBoundedMemory: listing a long trace keeps no more than the loaded
// snapshot and the live state: the heap in use while the lines are
// written (sampled after a collection at every MiB of output) grows by
// less than 4 MiB from the first line to the last, and never reaches
// twice the heap the loaded snapshot alone takes, for a trace of 200,000
// entries (listed in full, the old list of events took 100 MB).
func TestBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: records and lists a trace of 200,000 entries")
	}
	fn := longTrace(t, 100000)
	for _, f := range []report.Format{report.Text, report.JSON} {
		opts, h := listingHeap(t, fn, f, false)
		loaded, first, peak, samples := h.loaded, h.first, h.peak, h.samples
		if n := opts.walk.Entries(); n < 200000 {
			t.Fatalf("the trace has %d entries", n)
		}
		t.Logf("%s: loaded snapshot %.1f MB; while listing: first %.1f MB, peak %.1f MB (%d samples, %.0f MB written)",
			f, float64(loaded)/1e6, float64(first)/1e6, float64(peak)/1e6, samples, float64(h.written)/1e6)
		if samples < 10 {
			t.Errorf("%s: %d samples: the listing was not written as it went", f, samples)
		}
		if peak-first > 4<<20 {
			t.Errorf("%s: the heap grew by %.1f MB while listing", f, float64(peak-first)/1e6)
		}
		if peak > 2*loaded {
			t.Errorf("%s: heap %.1f MB while listing, the snapshot alone takes %.1f MB", f, float64(peak)/1e6, float64(loaded)/1e6)
		}
	}
}

// listingHeap is what a trace listing of fn in format f (streamed or
// not) holds: the heap the loaded snapshot alone takes, and the heap in
// use while the lines are written, sampled after a collection at every
// MiB of output (the first sample, the peak, how many).
type listingHeapSamples struct {
	loaded, first, peak int64
	samples             int
	written             int64
}

func listingHeap(t *testing.T, fn string, f report.Format, stream bool) (*Options, listingHeapSamples) {
	t.Helper()
	heap := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	var h listingHeapSamples
	base := heap()
	snap, err := snapshot.Load(fn)
	if err != nil {
		t.Fatal(err)
	}
	h.loaded = heap() - base
	runtime.KeepAlive(snap)
	snap = nil
	next := 0
	out := &probe{discard: true}
	opts := newOptions(out, fn, f)
	opts.Stream = stream
	out.at = func(n int) error {
		if n < next {
			return nil
		}
		next = n + 1<<20
		v := heap() - base
		if h.samples == 0 {
			h.first = v
		}
		h.peak = max(h.peak, v)
		h.samples++
		return nil
	}
	if err := runTrace(opts); err != nil {
		t.Fatal(err)
	}
	h.written = int64(out.n)
	return opts, h
}

// goroutinesAfter returns how many goroutines run once those a command
// waited for have exited: a goroutine that signalled its end (a closed
// channel, a WaitGroup's Done) runs on for a moment, which a loaded
// machine stretches (TestClosedPipe read 5 against 4 during a land), so
// the count is polled until it is back to before or a second has passed.
func goroutinesAfter(before int) int {
	deadline := time.Now().Add(time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	return runtime.NumGoroutine()
}
