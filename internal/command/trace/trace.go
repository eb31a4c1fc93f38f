// Package trace is `memstat trace`: a snapshot's allocator trace as a
// readable event list.
package trace

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/rowpipe"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/report"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Options are `memstat trace`'s inputs.
type Options struct {
	IO        *iostreams.IOStreams
	File      string
	Output    command.OutputFlags
	Format    report.Format
	From, To  string
	Action    string
	MinSize   string
	Addr      string
	Device    int
	AllFrames bool
	// Stream lists the entries as the file decodes (runStream).
	Stream bool

	query analysis.TraceQuery
	// walk is the device's trace being listed (tests look at how far it
	// is when a line is written).
	walk *analysis.TraceWalk
	// streamed counts the entries a --stream listing has been handed so
	// far, published every 64 entries and at the end (tests look at it
	// when a line is written, on the writer's goroutine).
	streamed atomic.Int64
}

// NewCmdTrace returns the trace command. runF replaces runTrace in tests
// of flag parsing.
func NewCmdTrace(f *command.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "trace FILE [--from A] [--to B] [--action alloc,free_completed,...] [--min-size SIZE] [--addr A]",
		Short: "The allocator's trace as a readable event list",
		Long: `Print the trace of allocator events the snapshot recorded, one line each:
the entry's index, its time since the first entry, the action, a short name
for each allocation (a, b, ..., z, aa, ...; shared by its alloc and its
frees, and given to a new allocation once the block is freed), the size, the
stream, where the block lives (the segment's address and the block's offset
in it, "seg 0x7f..000+0x200000"), the memory allocated after the event, and
the innermost frame of your own code (for a free recorded without frames, the
frame that allocated the block). A line at the end gives the figures after
the last entry and the peaks, over the whole trace.

--from and --to (inclusive) take an entry index (1200), a time since the
first entry (+2.5s) or a time since the epoch in seconds (1773270053.8s, as
time_us / 1e6). --action keeps some actions (alloc, free_requested,
free_completed, segment_alloc, segment_free, segment_map, segment_unmap,
oom, snapshot, annotate), --min-size the entries of at least that size, --addr the
entries whose block or segment contains that address (hex or decimal).
Segment locations and names come from replaying the trace, so they are
right whatever the filter keeps.

The listing waits for the whole file: the header's release and each row's
allocated memory and segment depend on all of it. --stream prints each
entry as the file decodes instead, with the columns the entries read so
far determine: index, time, action, name, size, stream, where (the segment
when one allocated in the trace so far holds the block, else the address
and "(seg ?)"), the changes of requested and reserved memory since before
the first entry ("Requested change", "Reserved change": not totals) and
the frame.
Its memory follows the live blocks, not the trace's length; the release,
the peaks of the changes and the snapshot's own figures come at the end.
Every filter applies; --json writes JSON Lines as it goes.`,
		Example: `  memstat trace snapshot.pickle
  memstat trace snapshot.pickle --from +0.5s --to +0.6s --action alloc --min-size 1MiB
  memstat trace snapshot.pickle --addr 0x7f2118400000 --json
  memstat trace --stream big-snapshot.pickle | less`,
		Args: command.OneSnapshot("memstat trace FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			if err := opts.resolve(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runTrace(opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.From, "from", "", "first entry: an index, +SECONDSs since the first entry, or SECONDSs since the epoch")
	fl.StringVar(&opts.To, "to", "", "last entry (inclusive), as --from")
	fl.StringVar(&opts.Action, "action", "", "only these actions, comma-separated (alloc,free_completed,...)")
	fl.StringVar(&opts.MinSize, "min-size", "", "only entries of at least this size, e.g. 1MiB")
	fl.StringVar(&opts.Addr, "addr", "", "only entries whose block or segment contains this address (0x hex or decimal)")
	fl.BoolVar(&opts.Stream, "stream", false, "print each entry as the file decodes, with the changes of memory since the first entry instead of the totals")
	command.AddDeviceFlag(cmd, &opts.Device)
	command.AddAllFramesFlag(cmd, &opts.AllFrames)
	command.AddOutputFlags(cmd, &opts.Output, report.Text, report.JSON, report.Markdown)
	return cmd
}

func (o *Options) resolve() error {
	format, err := o.Output.Resolve()
	if err != nil {
		return err
	}
	o.Format = format
	for _, b := range []struct {
		flag, val string
		dst       **analysis.TraceBound
	}{{"--from", o.From, &o.query.From}, {"--to", o.To, &o.query.To}} {
		if b.val == "" {
			continue
		}
		tb, err := analysis.ParseTraceBound(b.val)
		if err != nil {
			return command.FlagErrorf("%s: %v", b.flag, err)
		}
		*b.dst = &tb
	}
	if f, t := o.query.From, o.query.To; f != nil && t != nil && f.Kind == t.Kind && (f.Index > t.Index || f.US > t.US) {
		return command.FlagErrorf("--from %s is after --to %s: no entry lies between them", o.From, o.To)
	}
	if o.Action != "" {
		if o.query.Actions, err = analysis.ParseActions(o.Action); err != nil {
			return command.FlagErrorf("--action: %v", err)
		}
	}
	if o.MinSize != "" {
		if o.query.MinSize, err = report.ParseSize(o.MinSize); err != nil {
			return command.FlagErrorf("--min-size: %v", err)
		}
	}
	if o.Addr != "" {
		a, err := parseAddr(o.Addr)
		if err != nil {
			return command.FlagErrorf("--addr: %v", err)
		}
		o.query.Addr = &a
	}
	return nil
}

func parseAddr(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	base := 10
	if strings.HasPrefix(t, "0x") {
		t, base = t[2:], 16
	}
	a, err := strconv.ParseUint(t, base, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid address %q: want 0x hex or decimal", s)
	}
	return a, nil
}

func runTrace(opts *Options) error {
	if opts.Stream {
		return runStream(opts)
	}
	// The heap limit counts the walk's live blocks besides the replay
	// (the batches the printer goroutine holds are a few hundred KB).
	command.NeedHeap(command.HeapNeed{PerBlock: analysis.TraceLivePerBlock})
	snap, scan, err := command.LoadSnapshotScanned(opts.IO.ErrOut, opts.File)
	if err != nil {
		return err
	}
	if scan != nil {
		defer scan.Stop()
	}
	var devices []int
	if opts.Device >= 0 {
		if snap.Trace(opts.Device).Len() == 0 {
			return fmt.Errorf("%s: device %d has no trace", opts.File, opts.Device)
		}
		devices = []int{opts.Device}
	} else {
		for _, d := range command.DevicesWithData(snap) {
			if snap.Trace(d).Len() > 0 {
				devices = append(devices, d)
			}
		}
	}
	// The listing streams: the walk hands each entry it applies to a
	// printer goroutine (printWalk), which writes it through a buffer that
	// is flushed once the first screen is out and then whenever it fills
	// or some time has passed.
	out := newFlusher(opts.IO.Out)
	var p printer
	if opts.Format == report.JSON {
		p = newJSONLines(out, opts)
	} else {
		p = newTextTrace(out, opts)
	}
	fr := analysis.NewFrames(snap.Stacks, opts.AllFrames)
	if len(devices) == 0 {
		p.noTrace()
	}
	for _, d := range devices {
		w, err := analysis.BeginTraceScanned(snap, d, scan)
		if err != nil {
			return fmt.Errorf("%s: %w", opts.File, err)
		}
		opts.walk = w
		if err := p.begin(d, w); err != nil {
			return err
		}
		sum, err := printWalk(w, fr, opts.query, p, out)
		if err != nil {
			if out.failed(err) {
				return err
			}
			return fmt.Errorf("%s: %w", opts.File, err)
		}
		for _, w := range sum.Result.Warnings {
			fmt.Fprintf(opts.IO.ErrOut, "memstat: %s: device %d: %s\n", opts.File, d, w)
		}
		if err := p.end(sum); err != nil {
			return err
		}
	}
	return out.Flush()
}

// printWalk runs the walk of w with the printer p writing to out on a
// second goroutine (rowpipe.Run): the walk and the printing each take
// about half of a listing's time. It returns the walk's summary, or the
// first error: the printer's (a closed pipe) before the walk's, since the
// rows it failed on come first.
func printWalk(w *analysis.TraceWalk, fr *analysis.Frames, q analysis.TraceQuery, p printer, out *flusher) (*analysis.TraceSummary, error) {
	var sum *analysis.TraceSummary
	err := rowpipe.Run(func(add func(*analysis.TraceEvent) error) error {
		var err error
		sum, err = w.Run(fr, q, add)
		return err
	}, func(ev *analysis.TraceEvent) error {
		if err := p.event(ev); err != nil {
			return err
		}
		return out.tick()
	}, out.flushBuffered)
	if err != nil {
		return nil, err
	}
	return sum, nil
}

// noTrace says why a snapshot without a trace has none.
const noTrace = "no trace: the snapshot records no allocator events (memory history was not recorded with torch.cuda.memory._record_memory_history(), or the file is from PyTorch 1.13, whose snapshots have none); memstat segments shows its state"

// printer writes the listing as the walk goes.
type printer interface {
	noTrace()
	begin(device int, w *analysis.TraceWalk) error
	event(ev *analysis.TraceEvent) error
	end(sum *analysis.TraceSummary) error
}

// flusher buffers the listing and flushes it when the first screen is
// out (firstScreen bytes) and then when the printer's clock ticks
// (rowpipe.TickEvery), so that a pager shows lines at once and a file
// gets few large writes.
type flusher struct {
	*bufio.Writer
	first bool
	// err is the first write error, which ends the listing.
	err error
}

const firstScreen = 8 << 10

func newFlusher(w io.Writer) *flusher {
	bw, ok := w.(*bufio.Writer) // memstat's stdout is one already
	if !ok {
		bw = bufio.NewWriterSize(w, 64<<10)
	}
	return &flusher{Writer: bw, first: true}
}

// tick, after each row, flushes the buffer when the first screen is in
// it; it returns the first write error.
func (f *flusher) tick() error {
	if f.err != nil {
		return f.err
	}
	if f.first && f.Buffered() >= firstScreen {
		f.first = false
		f.err = f.Writer.Flush()
	}
	if f.err == nil {
		// bufio.Writer keeps a write error too.
		_, f.err = f.Write(nil)
	}
	return f.err
}

// flushBuffered writes what is buffered (the printer's clock ticked); it
// returns the first write error.
func (f *flusher) flushBuffered() error {
	if f.err == nil && f.Buffered() > 0 {
		f.err = f.Writer.Flush()
	}
	return f.err
}

// failed reports whether err is the output's own write error.
func (f *flusher) failed(err error) bool { return f.err != nil && errors.Is(err, f.err) }

// textTrace writes the listing as a text or markdown document, each
// device's entries a table streamed row by row.
type textTrace struct {
	doc      *report.Doc
	opts     *Options
	format   report.Format
	table    *report.TableStream
	withTime bool
	row      tableRow
}

func newTextTrace(w io.Writer, opts *Options) *textTrace {
	return &textTrace{doc: report.NewDoc(w, opts.Format), opts: opts, format: opts.Format}
}

func (t *textTrace) noTrace() { t.doc.Line("%s", noTrace) }

func (t *textTrace) begin(device int, w *analysis.TraceWalk) error {
	t.doc.Section(report.DeviceTitle(t.opts.File, device, w.Version()))
	t.withTime = w.FirstTimeUS() != 0
	if note := report.SimulatedNote(w.Recorder()); note != "" && t.withTime {
		t.doc.Line("%s", note)
	}
	t.table = nil
	return t.doc.Err()
}

func (t *textTrace) event(ev *analysis.TraceEvent) error {
	if t.table == nil {
		t.table = report.NewTableStream(t.doc.BeginBlock(), t.format, report.TraceColumns(t.withTime), 0)
	}
	r := &t.row
	r.begin(ev, t.withTime)
	r.line = report.AppendWhere(r.line, ev)
	r.end()
	r.line = report.AppendSize(r.line, ev.Allocated)
	r.end()
	return t.table.RowBytes(r.finish(ev))
}

func (t *textTrace) end(sum *analysis.TraceSummary) error {
	if t.table == nil {
		t.doc.Line("no entry of the %d matches", sum.Entries)
	} else {
		t.doc.EndBlock(t.table.Close())
	}
	t.doc.Line("%d of %d entries shown; after the last entry: %s allocated, %s reserved; peak allocated %s %s; peak reserved %s %s",
		sum.Shown, sum.Entries,
		report.Size(sum.Final.Allocated), report.Size(sum.Final.Reserved),
		report.Size(sum.PeakAllocated.Allocated), report.MomentText(sum.PeakAllocated, sum.Entries),
		report.Size(sum.PeakReserved.Reserved), report.MomentText(sum.PeakReserved, sum.Entries))
	return t.doc.Err()
}

// jsonLines writes the listing as JSON Lines: a header, then for each
// device a "device" record, an "event" record per entry shown and a
// "summary" record; each record names its file and device.
type jsonLines struct {
	w      io.Writer
	buf    []byte
	enc    *json.Encoder
	opts   *Options
	dev    int
	ev     jsonEvent
	frames map[snapshot.StackID]*frameEncoded
	// fileJSON and where: see jsonEvent.
	fileJSON, where []byte
}

// frameEncoded is a stack's frame and its JSON object, encoded once.
type frameEncoded struct {
	frame report.FrameJSON
	json  []byte
}

type jsonRecord struct {
	Record string `json:"record"`
	File   string `json:"file"`
	Device *int   `json:"device,omitempty"`
}

type jsonEvent struct {
	jsonRecord
	analysis.TraceEvent
	Where string            `json:"where"`
	Frame *report.FrameJSON `json:"frame"`
	// What jsonLines encodes once, not for every event (appendEvent
	// writes them when set): the file as a JSON string, the frame as a
	// JSON object, and the where text (report.AppendWhere) in place of
	// Where.
	fileJSON, frameJSON, where []byte
}

func newJSONLines(w io.Writer, opts *Options) *jsonLines {
	j := &jsonLines{w: w, enc: json.NewEncoder(w), opts: opts, frames: map[snapshot.StackID]*frameEncoded{}}
	j.enc.SetEscapeHTML(false)
	// The header is the envelope every --json has, less its results
	// (report.JSONLHeader).
	j.enc.Encode(opts.Output.JSONLHeader([]string{opts.File}))
	return j
}

func (j *jsonLines) noTrace() {
	j.enc.Encode(struct {
		jsonRecord
		Note string `json:"note"`
	}{jsonRecord{Record: "note", File: j.opts.File}, noTrace})
}

func (j *jsonLines) begin(device int, w *analysis.TraceWalk) error {
	j.dev = device
	return j.enc.Encode(struct {
		jsonRecord
		TorchVersion string `json:"torch_version"`
		Entries      int    `json:"trace_entries"`
	}{jsonRecord{Record: "device", File: j.opts.File, Device: &j.dev}, w.Version(), w.Entries()})
}

func (j *jsonLines) event(ev *analysis.TraceEvent) error {
	if j.fileJSON == nil {
		j.fileJSON = appendString([]byte{}, j.opts.File)
	}
	je := &j.ev
	j.where = report.AppendWhere(j.where[:0], ev)
	*je = jsonEvent{jsonRecord: jsonRecord{Record: "event", File: j.opts.File, Device: &j.dev}, TraceEvent: *ev,
		fileJSON: j.fileJSON, where: j.where}
	if ev.Site != analysis.NoStackFrame {
		f, ok := j.frames[ev.SiteStack]
		if !ok {
			r := report.FrameRecord(ev.Site)
			f = &frameEncoded{r, appendFrame(nil, &r)}
			j.frames[ev.SiteStack] = f
		}
		je.Frame, je.frameJSON = &f.frame, f.json
	}
	j.buf = appendEvent(j.buf[:0], je)
	_, err := j.w.Write(j.buf)
	return err
}

func (j *jsonLines) end(sum *analysis.TraceSummary) error {
	return j.enc.Encode(struct {
		jsonRecord
		Shown         int             `json:"shown"`
		Entries       int             `json:"trace_entries"`
		Final         analysis.Moment `json:"final"`
		PeakAllocated analysis.Moment `json:"peak_allocated"`
		PeakReserved  analysis.Moment `json:"peak_reserved"`
	}{jsonRecord{Record: "summary", File: j.opts.File, Device: &j.dev}, sum.Shown, sum.Entries, sum.Final, sum.PeakAllocated, sum.PeakReserved})
}
