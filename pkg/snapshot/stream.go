package snapshot

import (
	"errors"
	"fmt"
	"os"

	"github.com/memstat/memstat/pkg/pickle"
)

// StreamedEntry is a trace entry handed on while its file decodes (Stream).
type StreamedEntry struct {
	// Device is the entry's device: the index of its list in
	// device_traces.
	Device int
	// Index is the entry's index in its device's trace.
	Index int
	Entry TraceEntry
	// Context is the entry's stream, compile_context, user_metadata and
	// pool (Entry.Context is not set: no table of contexts is kept).
	Context EntryContext
	// Stacks holds the stacks decoded so far, the entry's among them.
	Stacks *Stacks
}

// Streamed is what Stream returns once the whole file is read: the
// snapshot without its trace entries (every device's Trace is empty; its
// segments, stacks, settings, annotations and features are all there)
// and how many entries each device's list held.
type Streamed struct {
	Snapshot *Snapshot
	Entries  []int
}

// Stream reads the snapshot at path as Load does, within the same budgets
// and caps and with the same checks, but hands each trace entry to fn as
// soon as the decoder completes it (PyTorch writes the entries in batches
// of 1000, after the segments) and keeps none: what it holds grows with
// the segments, blocks, stacks and distinct strings, not with the trace
// (the pickle's memo, 4 bytes a memoized object, is all that does).
//
// An error of fn stops the reading and is returned as it is (a listing's
// closed pipe); an error in the file is an *InputError, returned after fn
// had every entry decoded before it. A file whose trace entries do not lie
// in device_traces' lists as PyTorch writes them (so that an entry's device
// is not known when it decodes) is refused with an error saying so: Load
// reads it.
func Stream(path string, fn func(*StreamedEntry) error) (*Streamed, error) {
	if path == "" {
		return nil, &InputError{File: `""`, Err: errors.New("an empty file name, not a snapshot file")}
	}
	st := &entryStream{fn: fn}
	var s *Snapshot
	var err error
	if path == "-" {
		s, err = readWith(os.Stdin, -1, st)
	} else {
		f, oerr := os.Open(path)
		if oerr != nil {
			return nil, &InputError{File: path, Err: errors.Unwrap(oerr)}
		}
		defer f.Close()
		size := int64(-1)
		if fi, serr := f.Stat(); serr == nil {
			if fi.IsDir() {
				return nil, &InputError{File: path, Err: errors.New("is a directory, not a snapshot file")}
			}
			size = fi.Size()
			if fi.Mode().IsRegular() {
				if out, err, ok := streamLazy(path, f, size, fn); ok {
					return out, err
				}
			}
		}
		s, err = readWith(f, size, st)
	}
	if err != nil {
		if st.err != nil && errors.Is(err, st.err) {
			return nil, st.err
		}
		return nil, &InputError{File: path, Err: err}
	}
	out := &Streamed{Snapshot: s, Entries: make([]int, len(s.Traces))}
	for d := range s.Traces {
		out.Entries[d] = st.runs[d].n
	}
	return out, nil
}

// errStreamStopped stops the decoder when a stream's fn fails; the reader
// returns fn's error in its place.
var errStreamStopped = errors.New("the listing of the trace stopped")

// entryStream hands a builder's trace entries to fn (see Stream).
type entryStream struct {
	fn func(*StreamedEntry) error
	// place says which device's list the entry being compacted is in: the
	// index of that list in device_traces (see picklePlace, readJSON).
	place func() (int, bool)
	// n counts the entries handed on; runs[d] the entries of device d, the
	// first's number among all (entries of one device decode one after
	// another; broken where they did not).
	n    int
	runs []streamRun
	ev   StreamedEntry
	// err is fn's error, which stopped the reading.
	err error
}

type streamRun struct {
	first, n int
	broken   bool
}

func (st *entryStream) entry(b *builder, e TraceEntry, c EntryContext) (pickle.Value, bool, error) {
	if st.n >= caps.entries {
		return pickle.None, false, fmt.Errorf("more than %d trace entries, the limit (MaxTraceEntries)", caps.entries)
	}
	dev, ok := -1, false
	if st.place != nil {
		dev, ok = st.place()
	}
	if !ok || dev < 0 || dev >= MaxDevices {
		return pickle.None, false, errors.New("a trace entry lies outside device_traces' lists as PyTorch writes them, so its device is not known while the file decodes: memstat trace without --stream reads the whole file first")
	}
	for len(st.runs) <= dev {
		st.runs = append(st.runs, streamRun{})
	}
	r := &st.runs[dev]
	if r.n == 0 {
		r.first = st.n
	} else if r.first+r.n != st.n {
		r.broken = true
	}
	e.Context = 0
	st.ev = StreamedEntry{Device: dev, Index: r.n, Entry: e, Context: c, Stacks: b.stacks}
	r.n++
	if err := st.fn(&st.ev); err != nil {
		st.err = err
		return pickle.None, false, errStreamStopped
	}
	st.n++
	return pickle.Record(tagEntry, uint64(st.n-1)), true, nil
}

// picklePlace returns the place function of a pickle decoder: the index,
// in device_traces, of the list taking the entry being compacted, read off
// the decoder's stack. PyTorch's pickler (CPython's, protocol 2 and up)
// leaves one of two shapes there, the top-level dict first:
//
//	..., "device_traces", outer, inner               (one device: APPEND)
//	..., "device_traces", outer, MARK, inner0, ..., inner  (APPENDS)
//
// where outer holds the lists appended before; protocols 0 and 1 leave the
// first. Any other shape is not known (the reader refuses it).
func picklePlace(d *pickle.Decoder, vs *pickle.Values) func() (int, bool) {
	key := vs.Str("device_traces").N
	isKey := func(stack []pickle.Value, marks []int, k int) bool {
		if k < 1 || stack[k].Kind != pickle.KindString || stack[k].N != key || stack[0].Kind != pickle.KindDict {
			return false
		}
		// A key of the top-level dict: SETITEM's [dict, key, value], or
		// SETITEMS' [dict, MARK, key, value, key, value, ...].
		return k == 1 || len(marks) > 0 && marks[0] == 1 && (k-1)%2 == 0
	}
	return func() (int, bool) {
		stack, marks := d.Stack()
		top := len(stack) - 1
		if top < 2 || stack[top].Kind != pickle.KindList {
			return 0, false
		}
		m := -1 // the last mark at or below top
		for i := len(marks) - 1; i >= 0; i-- {
			if marks[i] <= top {
				m = marks[i]
				break
			}
		}
		if m != top && stack[top-1].Kind == pickle.KindList && isKey(stack, marks, top-2) && m < top-1 {
			return vs.Len(stack[top-1]), true
		}
		if m < 2 || stack[m-1].Kind != pickle.KindList || !isKey(stack, marks, m-2) {
			return 0, false
		}
		for i := m; i < top; i++ {
			if stack[i].Kind != pickle.KindList {
				return 0, false
			}
		}
		return vs.Len(stack[m-1]) + top - m, true
	}
}

// streamTraces is traces for a builder that handed its entries on: each
// device's list must be the run of entries handed on as that device's, in
// file order (what the stream said while it decoded); the traces are
// empty.
func (b *builder) streamTraces(s *Snapshot, v pickle.Value) error {
	vs, st := b.vs, b.stream
	if v.Kind != pickle.KindList && v.Kind != pickle.KindTuple {
		return fmt.Errorf("%w: \"device_traces\" is a %s, not a list", ErrNotSnapshot, v.Kind)
	}
	if n := vs.Len(v); n > MaxDevices {
		return fmt.Errorf("\"device_traces\" lists %d devices, more than the limit of %d", n, MaxDevices)
	}
	items := vs.Items(v)
	for len(st.runs) < len(items) {
		st.runs = append(st.runs, streamRun{})
	}
	listed := 0
	for d, dev := range items {
		if dev.Kind != pickle.KindList && dev.Kind != pickle.KindTuple {
			return fmt.Errorf("%w: device_traces[%d] is a %s, not a list", ErrNotSnapshot, d, dev.Kind)
		}
		s.Traces = append(s.Traces, &Trace{})
		n := vs.Len(dev)
		if n == 0 {
			if st.runs[d].n != 0 {
				return fmt.Errorf("%w: device_traces[%d] is empty, but %d entries were decoded as its own", ErrNotSnapshot, d, st.runs[d].n)
			}
			continue
		}
		tag, first, rn, ok := vs.RecordRun(dev)
		r := st.runs[d]
		if !ok || tag != tagEntry || r.broken || r.n != rn || uint64(r.first) != first {
			return fmt.Errorf("%w: device_traces[%d] is not the run of trace entry dicts decoded in it (PyTorch writes each entry once, in its device's list)", ErrNotSnapshot, d)
		}
		listed += rn
	}
	if listed != st.n || len(st.runs) > len(items) {
		return fmt.Errorf("%w: %d trace entry dicts lie outside device_traces' lists", ErrNotSnapshot, st.n-listed)
	}
	return nil
}
