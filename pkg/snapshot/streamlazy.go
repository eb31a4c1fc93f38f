package snapshot

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/memstat/memstat/pkg/pickle"
)

// lazyStreamMin is where the key "device_traces" must lie at least for
// Stream to skim what comes before it instead of decoding it: below, the
// decoding costs less than a millisecond or two.
var lazyStreamMin int64 = 1 << 20

// lazyStreamOff turns the lazy reading off (tests compare both readings).
var lazyStreamOff bool

// lazySkimPiece is how long the pieces of the skim are (0: the default;
// tests make it 1, a piece a frame).
var lazySkimPiece int64

// lazyStats, when set, is told how many objects before the trace a lazy
// reading decoded on demand and how many pieces its skim joined (tests).
var lazyStats func(resolved, pieces int)

// streamLazy is Stream for a pickle file that writes its segments before
// its device_traces (as PyTorch does): the part before the trace is
// skimmed (pickle.SkimAt: its opcodes walked, nothing built) and the trace
// decoded from its start, the objects it refers to before it (the frames
// of its stacks, some strings) decoded when it does, so the first entry
// goes out after a walk over the segments rather than their decoding.
// Once the rows are out, the part before the trace is decoded in order
// (pickle.Decoder.FinishSkim) for what the end of the listing needs (the
// segments, the release): the same snapshot as an ordinary reading's.
//
// It returns handled=false, having handed nothing on, for a file the skim
// does not walk (gzip, JSON, text protocols, device_traces first or not
// found, anything but plain data) or whose lazy reading fails before its
// first entry: Stream then reads it from the start. When the lazy
// reading fails after that, or the top level is not as the skim left it,
// an ordinary reading of the file (entries discarded) decides: its error,
// or its snapshot if it holds the entries handed on and no more.
func streamLazy(path string, f *os.File, size int64, fn func(*StreamedEntry) error) (out *Streamed, err error, handled bool) {
	if lazyStreamOff || size < lazyStreamMin {
		return nil, nil, false
	}
	// The skim runs in pieces on every core (pickle.SkimAt); a file not
	// written in frames is skimmed in order, read ahead.
	var ahead *readAhead
	seq := func() io.Reader {
		var head io.Reader = io.NewSectionReader(f, 0, size)
		if size >= readAheadMin {
			ahead = newReadAhead(head)
			head = ahead
		}
		return head
	}
	sk, serr := pickle.SkimAt(f, size, "device_traces", int(max(1<<16, size/16)),
		pickle.SkimOptions{Workers: runtime.GOMAXPROCS(0), PieceBytes: lazySkimPiece, Sequential: seq})
	if ahead != nil {
		ahead.Close()
	}
	if serr != nil {
		return nil, nil, false
	}
	// The spans' memory goes back once the decoder is done with them
	// (FinishSkim), or here on any other way out.
	defer sk.Release()
	if sk.Stop < lazyStreamMin {
		return nil, nil, false
	}

	vs := pickle.NewValues()
	b := newBuilder(vs)
	st := &entryStream{fn: fn}
	b.stream = st
	var r io.Reader = io.NewSectionReader(f, sk.Stop, size-sk.Stop)
	if size-sk.Stop >= readAheadMin {
		a := newReadAhead(r)
		defer a.Close()
		r = a
	}
	var d *pickle.Decoder
	budget := func(held int64) error { return checkMemory(held+b.footprint(), d.Offset(), d.Offset()) }
	d = sk.Decoder(r, f, vs, b, budget)
	place := picklePlace(d, vs)
	st.place = func() (int, bool) {
		if d.Resolving() {
			// An entry dict stored before the trace: not in device_traces.
			return 0, false
		}
		return place()
	}
	d.SetBudget(budget)
	top, err := d.Decode()
	if lazyStats != nil {
		lazyStats(d.LazyResolved(), sk.Pieces)
	}
	if st.err != nil {
		// fn's error (a closed pipe).
		return nil, st.err, true
	}
	if err == nil {
		// The segments, decoded now that the rows are out.
		if top, err = d.FinishSkim(top); err == nil {
			var s *Snapshot
			if s, err = b.assemble(top); err != nil {
				return nil, &InputError{File: path, Err: err}, true
			}
			s.Features.PickleProtocol = d.Protocol()
			out = &Streamed{Snapshot: s, Entries: make([]int, len(s.Traces))}
			for dev := range s.Traces {
				out.Entries[dev] = st.runs[dev].n
			}
			return out, nil, true
		}
		if !errors.Is(err, pickle.ErrSkim) {
			return nil, &InputError{File: path, Err: explainPickleError(err, []byte{0x80})}, true
		}
	}
	if st.n == 0 {
		// Nothing handed on: the ordinary reading from the start.
		return nil, nil, false
	}
	// The lazy reading failed after handing entries on, or the file left
	// its top level in a shape it does not rebuild: an ordinary reading
	// (its entries discarded) says whether the file reads and holds
	// those entries and no more.
	discard := &entryStream{fn: func(*StreamedEntry) error { return nil }}
	full, ferr := readWith(io.NewSectionReader(f, 0, size), size, discard)
	switch {
	case ferr != nil:
		return nil, &InputError{File: path, Err: ferr}, true
	case !sameRuns(st.runs, discard.runs):
		if err == nil || errors.Is(err, pickle.ErrSkim) {
			err = fmt.Errorf("%d trace entries read from the trace's start, %d from the file's", st.n, discard.n)
		}
		return nil, &InputError{File: path, Err: explainPickleError(err, []byte{0x80})}, true
	}
	out = &Streamed{Snapshot: full, Entries: make([]int, len(full.Traces))}
	for dev := range full.Traces {
		out.Entries[dev] = discard.runs[dev].n
	}
	return out, nil, true
}

// sameRuns reports whether two readings handed on as many entries of each
// device.
func sameRuns(a, b []streamRun) bool {
	n := max(len(a), len(b))
	for d := range n {
		var x, y int
		if d < len(a) {
			x = a[d].n
		}
		if d < len(b) {
			y = b[d].n
		}
		if x != y {
			return false
		}
	}
	return true
}
