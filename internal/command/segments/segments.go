// Package segments is `memstat segments`: a map of every segment with its
// blocks, its fragmentation, sorted and filtered.
package segments

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/report"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Options are `memstat segments`'s inputs.
type Options struct {
	IO      *iostreams.IOStreams
	File    string
	Output  command.OutputFlags
	Format  report.Format
	Sort    string
	Pool    string
	MinSize string
	Stream  string
	PoolID  string
	At      string
	Device  int
	Width   int
	Top     int

	order  analysis.SegmentSort
	filter analysis.SegmentFilter
	at     int
}

// NewCmdSegments returns the segments command. runF replaces runSegments
// in tests of flag parsing.
func NewCmdSegments(f *command.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "segments FILE [--sort size|address|free|fragmentation] [--pool small|large] [--min-size SIZE] [--stream S] [--at EVENT|peak]",
		Short: "Map every segment: its blocks, free space and fragmentation",
		Long: `List every segment the caching allocator holds (each cudaMalloc, or each
mapped range of an expandable segment): address, size, pool, stream, whether
it is expandable, its blocks summed by state (allocated, freed but pending
on another stream, cached free), the largest free block, the rounding of its
live blocks (internal fragmentation: size - requested) and the share of the
segment no tensor uses, with a map of its blocks drawn as a bar:
# allocated, = pending, . cached free. A total row ends the table.

By default the state is the snapshot's own final state. --at N rebuilds the
state after trace entry N by replaying the trace, --at peak the state at the
peak of reserved memory. --sort orders the list (size, the default; address;
free; fragmentation); --pool, --min-size and --stream filter it. Sizes take
binary units (KiB, MiB, GiB) or decimal ones (KB, MB, GB). --top N lists
the first N segments of the order chosen and sums the rest in one row.`,
		Example: `  memstat segments snapshot.pickle
  memstat segments snapshot.pickle --sort fragmentation --pool large --min-size 20MiB
  memstat segments snapshot.pickle --at peak --json`,
		Args: command.OneSnapshot("memstat segments FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			if err := opts.resolve(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runSegments(opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Sort, "sort", "size", "order: {size|address|free|fragmentation}")
	fl.StringVar(&opts.Pool, "pool", "", "only segments of this pool: {small|large}")
	fl.StringVar(&opts.MinSize, "min-size", "", "only segments of at least this size, e.g. 20MiB")
	fl.StringVar(&opts.PoolID, "pool-id", "", "only segments of this private pool, as segment_pool_id: A,B (0,0: the default pools)")
	fl.StringVar(&opts.Stream, "stream", "", "only segments of this stream (0, or the stream's value in decimal or 0x hex)")
	fl.StringVar(&opts.At, "at", "", "the state after trace entry N, or at the peak of reserved memory (peak); default: the final state")
	fl.IntVar(&opts.Width, "width", 32, "cells of each segment's map")
	fl.IntVar(&opts.Top, "top", 0, "list the first N segments in the order chosen and sum the rest (0: all)")
	command.AddDeviceFlag(cmd, &opts.Device)
	command.AddOutputFlags(cmd, &opts.Output, report.Text, report.JSON, report.Markdown)
	return cmd
}

func (o *Options) resolve() error {
	format, err := o.Output.Resolve()
	if err != nil {
		return err
	}
	o.Format = format
	if o.order, err = analysis.ParseSegmentSort(o.Sort); err != nil {
		return command.FlagErrorf("--sort: %v", err)
	}
	switch o.Pool {
	case "", "small", "large":
		o.filter.Pool = o.Pool
	default:
		return command.FlagErrorf("--pool: invalid pool %q: choose small or large", o.Pool)
	}
	if o.MinSize != "" {
		n, err := report.ParseSize(o.MinSize)
		if err != nil {
			return command.FlagErrorf("--min-size: %v", err)
		}
		o.filter.MinSize = n
	}
	if o.Stream != "" {
		n, err := parseStream(o.Stream)
		if err != nil {
			return command.FlagErrorf("--stream: %v", err)
		}
		o.filter.Stream = &n
	}
	if o.PoolID != "" {
		a, b, ok := strings.Cut(o.PoolID, ",")
		x, err1 := strconv.ParseInt(strings.TrimSpace(strings.Trim(a, "(")), 10, 64)
		y, err2 := strconv.ParseInt(strings.TrimSpace(strings.Trim(b, ")")), 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return command.FlagErrorf("--pool-id: invalid pool id %q: want two integers A,B as in segment_pool_id, e.g. 0,1", o.PoolID)
		}
		o.filter.PoolID = &snapshot.PoolID{x, y}
	}
	switch o.At {
	case "":
		o.at = analysis.AtFinal
	case "peak":
		o.at = analysis.AtPeak
	default:
		n, err := strconv.Atoi(o.At)
		if err != nil || n < 0 {
			return command.FlagErrorf("--at: invalid %q: want a trace entry index or peak", o.At)
		}
		o.at = n
	}
	if o.Top < 0 {
		return command.FlagErrorf("--top must be at least 0 (0: every segment)")
	}
	if o.Width < 1 || o.Width > 200 {
		return command.FlagErrorf("--width must be between 1 and 200")
	}
	return nil
}

// parseStream reads a stream value: decimal or 0x hex (how memstat prints
// streams).
func parseStream(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if strings.HasPrefix(t, "0x") {
		u, err := strconv.ParseUint(t[2:], 16, 64)
		if err != nil {
			return 0, fmt.Errorf("invalid stream %q", s)
		}
		return int64(u), nil
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid stream %q", s)
	}
	return n, nil
}

type deviceSegments struct {
	rp *analysis.Replayed
	m  *analysis.SegmentMap
}

func runSegments(opts *Options) error {
	// The heap limit counts the figures and, with --at, two states (--at
	// peak: the start and the peak's guess).
	command.NeedHeap(command.HeapNeed{PerEntry: command.FiguresPerEntry, PerBlock: 2 * command.StatePerBlock})
	snap, scan, err := command.LoadSnapshotScanned(opts.IO.ErrOut, opts.File)
	if err != nil {
		return err
	}
	if scan != nil {
		defer scan.Stop()
	}
	fr := analysis.NewFrames(snap.Stacks, false)
	// The figures are printed at one entry: compact (see Want).
	want := analysis.Want{CompactFigures: true, StartScan: scan}
	switch {
	case opts.at == analysis.AtPeak:
		want.PeakReserved = true
	case opts.at >= -1:
		want.Indices = []int{opts.at}
	}
	out, err := command.ReplayEachFor(opts.IO.ErrOut, opts.File, snap, opts.Device, want, func(rp *analysis.Replayed) (deviceSegments, error) {
		m, err := analysis.Segments(rp, fr, opts.at, opts.filter, opts.order)
		return deviceSegments{rp, m}, err
	})
	if err != nil {
		return err
	}
	if opts.Format == report.JSON {
		return report.WriteJSON(opts.IO.Out, jsonSegments(opts, out))
	}
	return writeText(opts, out)
}

func momentText(opts *Options, d deviceSegments) string {
	entries := d.rp.Trace().Len()
	switch {
	case d.m.Final:
		return "the final state (the snapshot's segments)"
	case opts.at == analysis.AtPeak:
		return "the peak of reserved memory, " + report.MomentText(d.m.Moment, entries)
	}
	return "the state " + report.MomentText(d.m.Moment, entries)
}

func writeText(opts *Options, devices []deviceSegments) error {
	doc := report.NewDoc(opts.IO.Out, opts.Format)
	for _, d := range devices {
		m := d.m
		doc.Section(command.DeviceTitle(opts.File, d.rp))
		shown := report.Plural(len(m.Segments), "segment", "segments")
		if m.Omitted > 0 {
			shown = fmt.Sprintf("%d of %d segments (filtered)", len(m.Segments), len(m.Segments)+m.Omitted)
		}
		doc.Line("%s: %s, %s reserved, %s allocated", momentText(opts, d), shown,
			report.Size(m.Moment.Reserved), report.Size(m.Moment.Allocated))
		if len(m.Segments) == 0 {
			continue
		}
		rows, cut := m.Segments, []analysis.SegmentInfo(nil)
		if opts.Top > 0 && len(rows) > opts.Top {
			rows, cut = rows[:opts.Top], rows[opts.Top:]
		}
		doc.Table(report.SegmentTable(rows, cut, m.Total, opts.Width))
		doc.Line("%s", report.BarLegend)
		t := m.Total
		doc.Line("fragmentation of the listed segments: internal (rounding of live blocks) %s, %s of what they hold live; external (cached free blocks) %s, %s of their size; largest free block %s",
			report.Size(t.Rounding), report.Percent(report.Ratio(t.Rounding, t.Allocated+t.Pending)),
			report.Size(t.Free), report.Percent(report.Ratio(t.Free, t.Size)), report.Size(t.LargestFree))
		doc.Line("%s", report.SegmentsUnusedText(t))
	}
	return doc.Err()
}

type jsonBlock struct {
	Address   uint64 `json:"address"`
	Size      int64  `json:"size"`
	Requested int64  `json:"requested_size"`
	State     string `json:"state"`
}

type jsonSegment struct {
	analysis.SegmentInfo
	Fragmentation float64     `json:"fragmentation"`
	Map           string      `json:"map"`
	Blocks        []jsonBlock `json:"blocks"`
}

type jsonDevice struct {
	Device       int             `json:"device"`
	TorchVersion string          `json:"torch_version"`
	Moment       analysis.Moment `json:"moment"`
	Final        bool            `json:"final"`
	Segments     []jsonSegment   `json:"segments"`
	Total        jsonSegment     `json:"total"`
	Omitted      int             `json:"omitted"`
	// Cut counts the segments --top left out of the list (the total still
	// counts them).
	Cut int `json:"cut"`
}

func segmentJSON(s analysis.SegmentInfo, width int) jsonSegment {
	js := jsonSegment{SegmentInfo: s, Fragmentation: s.Fragmentation(), Map: report.SegmentBar(s.Blocks, width), Blocks: []jsonBlock{}}
	for _, b := range s.Blocks {
		js.Blocks = append(js.Blocks, jsonBlock{b.Address, b.Size, b.RequestedSize, b.State.String()})
	}
	return js
}

func jsonSegments(opts *Options, devices []deviceSegments) any {
	jds := []jsonDevice{}
	for _, d := range devices {
		jd := jsonDevice{Device: d.m.Device, TorchVersion: d.rp.Result.Version, Moment: d.m.Moment, Final: d.m.Final,
			Segments: []jsonSegment{}, Total: segmentJSON(d.m.Total, opts.Width), Omitted: d.m.Omitted}
		jd.Total.Map = ""
		segs := d.m.Segments
		if opts.Top > 0 && len(segs) > opts.Top {
			jd.Cut = len(segs) - opts.Top
			segs = segs[:opts.Top]
		}
		for _, s := range segs {
			jd.Segments = append(jd.Segments, segmentJSON(s, opts.Width))
		}
		jds = append(jds, jd)
	}
	return opts.Output.Envelope([]string{opts.File}, []report.FileResult{{File: opts.File, Devices: jds}})
}
