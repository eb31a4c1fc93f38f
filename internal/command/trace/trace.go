// Package trace is `memstat trace`: a snapshot's allocator trace as a
// readable event list.
package trace

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/report"
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

	query analysis.TraceQuery
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
oom, snapshot), --min-size the entries of at least that size, --addr the
entries whose block or segment contains that address (hex or decimal).
Segment locations and names come from replaying the trace, so they are
right whatever the filter keeps.`,
		Example: `  memstat trace snapshot.pickle
  memstat trace snapshot.pickle --from +0.5s --to +0.6s --action alloc --min-size 1MiB
  memstat trace snapshot.pickle --addr 0x7f2118400000 --json`,
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

type deviceTrace struct {
	rp *analysis.Replayed
	tl *analysis.TraceList
}

func runTrace(opts *Options) error {
	snap, err := command.LoadSnapshot(opts.IO.ErrOut, opts.File)
	if err != nil {
		return err
	}
	var devices []int
	if opts.Device >= 0 {
		if len(snap.Trace(opts.Device)) == 0 {
			return fmt.Errorf("%s: device %d has no trace", opts.File, opts.Device)
		}
		devices = []int{opts.Device}
	} else {
		for _, d := range command.DevicesWithData(snap) {
			if len(snap.Trace(d)) > 0 {
				devices = append(devices, d)
			}
		}
	}
	fr := analysis.NewFrames(snap.Stacks, opts.AllFrames)
	var out []deviceTrace
	for _, d := range devices {
		rp, err := command.ReplayDevice(opts.IO.ErrOut, opts.File, snap, d)
		if err != nil {
			return err
		}
		tl, err := analysis.ListTrace(rp, fr, opts.query)
		if err != nil {
			return fmt.Errorf("%s: %w", opts.File, err)
		}
		out = append(out, deviceTrace{rp, tl})
	}
	if opts.Format == report.JSON {
		return report.WriteJSON(opts.IO.Out, jsonTrace(opts, out))
	}
	return writeText(opts, out)
}

// noTrace says why a snapshot without a trace has none.
const noTrace = "no trace: the snapshot records no allocator events (memory history was not recorded with torch.cuda.memory._record_memory_history(), or the file is from PyTorch 1.13, whose snapshots have none); memstat segments shows its state"

func writeText(opts *Options, devices []deviceTrace) error {
	doc := report.NewDoc(opts.IO.Out, opts.Format)
	if len(devices) == 0 {
		doc.Line("%s", noTrace)
	}
	for _, d := range devices {
		tl := d.tl
		doc.Section(command.DeviceTitle(opts.File, d.rp))
		withTime := d.rp.FirstTimeUS() != 0
		if len(tl.Events) == 0 {
			doc.Line("no entry of the %d matches", tl.Entries)
		} else {
			doc.Table(report.TraceTable(tl.Events, withTime))
		}
		doc.Line("%d of %d entries shown; after the last entry: %s allocated, %s reserved; peak allocated %s %s; peak reserved %s %s",
			len(tl.Events), tl.Entries,
			report.Size(tl.Final.Allocated), report.Size(tl.Final.Reserved),
			report.Size(tl.PeakAllocated.Allocated), report.MomentText(tl.PeakAllocated, tl.Entries),
			report.Size(tl.PeakReserved.Reserved), report.MomentText(tl.PeakReserved, tl.Entries))
	}
	return doc.Err()
}

type jsonEvent struct {
	analysis.TraceEvent
	Where string            `json:"where"`
	Frame *report.FrameJSON `json:"frame"`
}

type jsonDevice struct {
	Device        int             `json:"device"`
	TorchVersion  string          `json:"torch_version"`
	Entries       int             `json:"trace_entries"`
	Events        []jsonEvent     `json:"events"`
	Final         analysis.Moment `json:"final"`
	PeakAllocated analysis.Moment `json:"peak_allocated"`
	PeakReserved  analysis.Moment `json:"peak_reserved"`
}

func jsonTrace(opts *Options, devices []deviceTrace) any {
	out := struct {
		File    string       `json:"file"`
		Note    string       `json:"note,omitempty"`
		Devices []jsonDevice `json:"devices"`
	}{File: opts.File, Devices: []jsonDevice{}}
	if len(devices) == 0 {
		out.Note = noTrace
	}
	for _, d := range devices {
		tl := d.tl
		jd := jsonDevice{Device: tl.Device, TorchVersion: d.rp.Result.Version, Entries: tl.Entries, Events: []jsonEvent{},
			Final: tl.Final, PeakAllocated: tl.PeakAllocated, PeakReserved: tl.PeakReserved}
		for _, ev := range tl.Events {
			je := jsonEvent{TraceEvent: ev, Where: report.Where(ev)}
			if ev.Site != analysis.NoStackFrame {
				f := report.FrameRecord(ev.Site)
				je.Frame = &f
			}
			jd.Events = append(jd.Events, je)
		}
		out.Devices = append(out.Devices, jd)
	}
	return out
}
