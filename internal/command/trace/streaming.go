package trace

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/rowpipe"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/report"
	"github.com/memstat/memstat/pkg/snapshot"
)

// streamNote says what a streaming listing's columns mean, a line each.
var streamNote = []string{
	`Streamed as the file decodes: each row holds what the entries read so far determine; the peaks follow the rows, the release comes once the whole file is read.`,
	`"Requested change", "Reserved change": the changes of requested and reserved memory since before entry 0, not totals (memstat trace without --stream shows the memory allocated after each entry).`,
	`"(seg ?)": no segment allocated in the trace so far holds the address (a segment from before the trace, or an expandable segment's mapping); a free of a block from before the trace has no name or frame.`,
}

// runStream lists the trace as the file decodes (--stream): rows go out
// as the decoder reaches each entry, nothing of the trace is kept, and
// what needs the whole file (the release, the snapshot's segments) comes
// in the lines at the end.
func runStream(opts *Options) error {
	out := newFlusher(opts.IO.Out)
	var p streamPrinter
	if opts.Format == report.JSON {
		p = newStreamJSON(out, opts)
	} else {
		p = newStreamText(out, opts)
	}
	ts := analysis.NewTraceStream(opts.query, opts.AllFrames)
	cur := -1
	var seen []int
	var st *snapshot.Streamed
	var firstOut atomic.Bool // the printer has flushed the first screen
	// The decoder and the stream's columns run here; the rows are
	// formatted and written on a second goroutine (rowpipe): on one
	// goroutine the printer took a third of a whole listing's time. The
	// printer learns what the decoder's loop did as items, in order.
	err := rowpipe.RunShipping(func(add func(*streamItem) error, ship func() error) error {
		var it streamItem
		// The printer's table starts writing once startAfter entries
		// are decoded after its first row (streamText.entries); that
		// moment is found here, where entries are counted, and sent as
		// an item, so the rows held and the layout are those of a
		// printer that sees every entry.
		heldAt, open := -1, false
		n := 0 // entries decoded so far
		defer func() { opts.streamed.Store(int64(n)) }()
		last := time.Now()
		emit := func(ev *analysis.StreamEvent) error {
			if !open {
				open, heldAt = true, n
			}
			it.kind, it.n, it.ev = itemEvent, n, *ev
			if err := add(&it); err != nil {
				return err
			}
			if !firstOut.Load() {
				// Until the first screen is out, each row is written
				// before the decoder goes on, as on one goroutine: the
				// few rows a filter keeps would otherwise wait for a
				// batch, and the first screen with them.
				return ship()
			}
			return nil
		}
		var err error
		st, err = command.StreamSnapshot(opts.IO.ErrOut, opts.File, func(se *snapshot.StreamedEntry) error {
			n++
			if n&63 == 0 {
				opts.streamed.Store(int64(n))
			}
			if n&255 == 0 && time.Since(last) >= rowpipe.TickEvery {
				// Rows that trickle out (a selective filter) are not
				// held back: the writer's clock flushes them.
				last = time.Now()
				if err := ship(); err != nil {
					return err
				}
			}
			if open && heldAt >= 0 && n-heldAt >= startAfter {
				heldAt = -1
				it = streamItem{kind: itemStart, n: n}
				if err := add(&it); err != nil {
					return err
				}
				// The held rows go out now, not when a batch of the
				// few rows a filter keeps fills.
				if err := ship(); err != nil {
					return err
				}
			}
			if opts.Device >= 0 && se.Device != opts.Device {
				return nil
			}
			if se.Device != cur {
				if cur >= 0 {
					it = streamItem{kind: itemEndDevice, sum: *ts.Summary(cur)}
					open = false
					if err := add(&it); err != nil {
						return err
					}
				}
				cur = se.Device
				seen = append(seen, cur)
				it = streamItem{kind: itemBeginDevice, device: cur, withTime: se.Entry.TimeUS != 0}
				if err := add(&it); err != nil {
					return err
				}
			}
			return ts.Entry(se, emit)
		})
		if err == nil && cur >= 0 {
			it = streamItem{kind: itemEndDevice, sum: *ts.Summary(cur)}
			err = add(&it)
		}
		return err
	}, func(it *streamItem) error {
		switch it.kind {
		case itemBeginDevice:
			return p.beginDevice(it.device, it.withTime)
		case itemEndDevice:
			return p.endDevice(&it.sum)
		case itemStart:
			if err := p.entries(it.n); err != nil {
				return err
			}
			return out.tick()
		}
		if err := p.entries(it.n); err != nil {
			return err
		}
		if err := p.event(&it.ev); err != nil {
			return err
		}
		err := out.tick()
		if !out.first {
			firstOut.Store(true)
		}
		return err
	}, out.flushBuffered)
	if err != nil {
		if out.failed(err) {
			return err
		}
		// The rows read before the error stay printed, then the error.
		if ferr := out.Flush(); ferr != nil {
			return ferr
		}
		return err
	}
	if len(seen) == 0 {
		if opts.Device >= 0 {
			return fmt.Errorf("%s: device %d has no trace", opts.File, opts.Device)
		}
		p.noTrace()
		return out.Flush()
	}
	s := st.Snapshot
	total := 0
	for _, n := range st.Entries {
		total += n
	}
	end := streamEnd{Version: replay.GuessVersionRangeEntries(s, total > 0).String()}
	for _, d := range seen {
		sg := streamSegments{Device: d}
		for _, seg := range s.DeviceSegments(d) {
			sg.Reserved += seg.TotalSize
			for _, b := range seg.Blocks {
				if b.State == snapshot.ActiveAllocated {
					sg.Allocated += b.Size
				}
			}
		}
		end.Segments = append(end.Segments, sg)
	}
	if err := p.end(&end); err != nil {
		return err
	}
	return out.Flush()
}

// streamItem is what the decoder's loop hands the printer, in order: an
// event to list (with how many entries were decoded then), a device's
// beginning or end, or the moment a held table starts (itemStart).
type streamItem struct {
	kind     streamItemKind
	n        int
	device   int
	withTime bool
	sum      analysis.StreamSummary
	ev       analysis.StreamEvent
}

type streamItemKind uint8

const (
	itemEvent streamItemKind = iota
	itemBeginDevice
	itemEndDevice
	itemStart
)

// streamEnd is what a streaming listing learns at the end of the file:
// the release its keys allow and, for each device listed, what its
// segments hold (the state after the last entry, as the snapshot says).
type streamEnd struct {
	Version  string           `json:"torch_version"`
	Segments []streamSegments `json:"segments"`
}

type streamSegments struct {
	Device    int   `json:"device"`
	Reserved  int64 `json:"reserved_bytes"`
	Allocated int64 `json:"allocated_bytes"`
}

// streamPrinter writes a streaming listing as the file decodes.
type streamPrinter interface {
	noTrace()
	beginDevice(device int, withTime bool) error
	event(ev *analysis.StreamEvent) error
	// entries says how many entries have been decoded, before each.
	entries(n int) error
	// endDevice ends a device's rows with what its entries said: its list
	// is done once the next device's begins, or the file ends.
	endDevice(sum *analysis.StreamSummary) error
	end(e *streamEnd) error
}

// streamColumns are a streaming listing's columns (see streamNote).
func streamColumns(withTime bool) []report.Column {
	cols := []report.Column{{Name: "#", Key: "index", Align: report.Right}}
	if withTime {
		cols = append(cols, report.Column{Name: "Time", Key: "seconds", Align: report.Right})
	}
	return append(cols,
		report.Column{Name: "Action", Key: "action"},
		report.Column{Name: "Name", Key: "name"},
		report.Column{Name: "Size", Key: "size", Align: report.Right},
		report.Column{Name: "Stream", Key: "stream"},
		report.Column{Name: "Where", Key: "where"},
		report.Column{Name: "Requested change", Key: "requested_change", Align: report.Right},
		report.Column{Name: "Reserved change", Key: "reserved_change", Align: report.Right},
		report.Column{Name: "Frame", Key: "frame"},
	)
}

// appendStreamWhere is report.AppendWhere, with "(seg ?)" after an
// address no segment read so far holds.
func appendStreamWhere(b []byte, ev *analysis.StreamEvent) []byte {
	n := len(b)
	b = report.AppendWhere(b, &ev.TraceEvent)
	if !ev.Located && len(b) > n && ev.Action != "oom" && ev.Action != "snapshot" {
		b = append(b, " (seg ?)"...)
	}
	return b
}

// appendChange appends a change of memory: "+1.5 GiB", "-512 B", "0 B".
func appendChange(b []byte, n int64) []byte {
	if n > 0 {
		b = append(b, '+')
	}
	return report.AppendSize(b, n)
}

// streamText writes a streaming listing as text or markdown: per device
// a title, the note and a table streamed row by row; at the end a line
// per device with what the whole file says.
type streamText struct {
	doc      *report.Doc
	opts     *Options
	table    *report.TableStream
	row      tableRow
	withTime bool
	// heldAt is how many entries had been decoded when the table took its
	// first row: the table sizes its columns on its first rows
	// (report.TableStream), and starts once startAfter more entries are
	// decoded if fewer rows came (a selective filter), a count rather
	// than a clock so that the layout is the same on every run.
	heldAt int
	// decoded is how many entries had been decoded at the last entries.
	decoded int
}

func newStreamText(w io.Writer, opts *Options) *streamText {
	return &streamText{doc: report.NewDoc(w, opts.Format), opts: opts}
}

func (t *streamText) noTrace() { t.doc.Line("%s", noTrace) }

func (t *streamText) beginDevice(device int, withTime bool) error {
	t.doc.Section(fmt.Sprintf("%s, device %d (streamed)", filepath.Base(t.opts.File), device))
	for _, l := range streamNote {
		t.doc.Line("%s", l)
	}
	t.table = nil
	t.withTime = withTime
	return t.doc.Err()
}

// startAfter is how many entries a streaming table waits for after its
// first row before it writes the rows it holds (some 10 ms of decoding).
const startAfter = 8192

func (t *streamText) entries(n int) error {
	t.decoded = n
	if t.table != nil && t.heldAt >= 0 && n-t.heldAt >= startAfter {
		t.heldAt = -1
		return t.table.Start()
	}
	return nil
}

func (t *streamText) event(ev *analysis.StreamEvent) error {
	if t.table == nil {
		t.table = report.NewTableStream(t.doc.BeginBlock(), t.opts.Format, streamColumns(t.withTime), 0)
		t.heldAt = t.decoded
	}
	r := &t.row
	r.begin(&ev.TraceEvent, t.withTime)
	r.line = appendStreamWhere(r.line, ev)
	r.end()
	r.line = appendChange(r.line, ev.RequestedChange)
	r.end()
	r.line = appendChange(r.line, ev.ReservedChange)
	r.end()
	return t.table.RowBytes(r.finish(&ev.TraceEvent))
}

func (t *streamText) endDevice(sum *analysis.StreamSummary) error {
	if t.table == nil {
		t.doc.Line("no entry of the %d matches", sum.Entries)
	} else {
		t.doc.EndBlock(t.table.Close())
		t.table = nil
	}
	t.doc.Line("%d of %d entries shown; after the last entry: requested change %s, reserved change %s; peak requested change %s, peak reserved change %s",
		sum.Shown, sum.Entries, appendChange(nil, sum.RequestedChange), appendChange(nil, sum.ReservedChange),
		peakText(sum.PeakRequested), peakText(sum.PeakReserved))
	return t.doc.Err()
}

func (t *streamText) end(e *streamEnd) error {
	t.doc.Section(fmt.Sprintf("%s: the whole file read (PyTorch %s)", filepath.Base(t.opts.File), e.Version))
	for _, sg := range e.Segments {
		t.doc.Line("device %d: the snapshot's segments hold %s reserved, %s allocated", sg.Device, report.Size(sg.Reserved), report.Size(sg.Allocated))
	}
	return t.doc.Err()
}

// peakText is a change's peak and the entry after which it was reached.
func peakText(p analysis.StreamPeak) string {
	if p.Index < 0 {
		return "0 B (before entry 0)"
	}
	return string(appendChange(nil, p.Change)) + " after entry " + strconv.Itoa(p.Index)
}

// streamJSON writes a streaming listing as JSON Lines: the header, then
// for each device a "device" record and an "event" record per entry
// shown, and at the end a "summary" record per device.
type streamJSON struct {
	w      io.Writer
	enc    *json.Encoder
	opts   *Options
	dev    int
	frames map[snapshot.StackID]*report.FrameJSON
	where  []byte
}

func newStreamJSON(w io.Writer, opts *Options) *streamJSON {
	j := &streamJSON{w: w, enc: json.NewEncoder(w), opts: opts, frames: map[snapshot.StackID]*report.FrameJSON{}}
	j.enc.SetEscapeHTML(false)
	j.enc.Encode(opts.Output.JSONLHeader([]string{opts.File}))
	return j
}

func (j *streamJSON) noTrace() {
	j.enc.Encode(struct {
		jsonRecord
		Note string `json:"note"`
	}{jsonRecord{Record: "note", File: j.opts.File}, noTrace})
}

func (j *streamJSON) beginDevice(device int, _ bool) error {
	j.dev = device
	return j.enc.Encode(struct {
		jsonRecord
		Streamed bool `json:"streamed"`
	}{jsonRecord{Record: "device", File: j.opts.File, Device: &j.dev}, true})
}

// streamEventJSON is an event record of a streaming listing.
type streamEventJSON struct {
	jsonRecord
	Index           int               `json:"index"`
	TimeUS          int64             `json:"time_us,omitempty"`
	Seconds         float64           `json:"seconds"`
	Action          string            `json:"action"`
	Addr            uint64            `json:"addr"`
	Size            int64             `json:"size"`
	Stream          int64             `json:"stream"`
	Name            string            `json:"name,omitempty"`
	Segment         uint64            `json:"segment,omitempty"`
	Offset          int64             `json:"offset"`
	Located         bool              `json:"located"`
	DeviceFree      int64             `json:"device_free,omitempty"`
	RequestedChange int64             `json:"requested_change"`
	ReservedChange  int64             `json:"reserved_change"`
	SiteOfAlloc     bool              `json:"site_of_alloc,omitempty"`
	Where           string            `json:"where"`
	Frame           *report.FrameJSON `json:"frame"`
}

func (j *streamJSON) event(ev *analysis.StreamEvent) error {
	j.where = report.AppendWhere(j.where[:0], &ev.TraceEvent)
	r := streamEventJSON{jsonRecord: jsonRecord{Record: "event", File: j.opts.File, Device: &j.dev},
		Index: ev.Index, TimeUS: ev.TimeUS, Seconds: ev.Seconds, Action: ev.Action, Addr: ev.Addr, Size: ev.Size,
		Stream: ev.Stream, Name: ev.Name, Segment: ev.Segment, Offset: ev.Offset, Located: ev.Located,
		DeviceFree: ev.DeviceFree, RequestedChange: ev.RequestedChange, ReservedChange: ev.ReservedChange,
		SiteOfAlloc: ev.SiteOfAlloc, Where: string(j.where)}
	if ev.Site != analysis.NoStackFrame {
		f, ok := j.frames[ev.SiteStack]
		if !ok {
			rec := report.FrameRecord(ev.Site)
			f = &rec
			j.frames[ev.SiteStack] = f
		}
		r.Frame = f
	}
	return j.enc.Encode(&r)
}

func (j *streamJSON) entries(int) error { return nil }

func (j *streamJSON) endDevice(sum *analysis.StreamSummary) error {
	return j.enc.Encode(struct {
		jsonRecord
		Streamed        bool                `json:"streamed"`
		Shown           int                 `json:"shown"`
		Entries         int                 `json:"trace_entries"`
		RequestedChange int64               `json:"requested_change"`
		ReservedChange  int64               `json:"reserved_change"`
		PeakRequested   analysis.StreamPeak `json:"peak_requested_change"`
		PeakReserved    analysis.StreamPeak `json:"peak_reserved_change"`
	}{jsonRecord{Record: "summary", File: j.opts.File, Device: &j.dev}, true, sum.Shown, sum.Entries,
		sum.RequestedChange, sum.ReservedChange, sum.PeakRequested, sum.PeakReserved})
}

func (j *streamJSON) end(e *streamEnd) error {
	return j.enc.Encode(struct {
		Record string `json:"record"`
		File   string `json:"file"`
		*streamEnd
	}{"end", j.opts.File, e})
}
