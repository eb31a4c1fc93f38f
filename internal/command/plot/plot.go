// Package plot is `memstat plot`: a picture of a device's memory over the
// time of its trace.
package plot

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/atomicfile"
	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/report"
	rplot "github.com/memstat/memstat/pkg/report/plot"
	"github.com/memstat/memstat/pkg/snapshot"
	"github.com/memstat/memstat/pkg/timeline"
	"github.com/memstat/memstat/pkg/view"
)

// Options are `memstat plot`'s inputs.
type Options struct {
	IO       *iostreams.IOStreams
	File     string
	Output   string
	Device   int
	Pools    bool
	From, To string
	Stacked  bool
	By       string
	Top      int

	format   rplot.Format
	from, to timeline.Bound
	by       analysis.GroupBy
}

// NewCmdPlot returns the plot command. runF replaces runPlot in tests of
// flag parsing.
func NewCmdPlot(f *command.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "plot FILE -o OUT.svg|OUT.png [--device N] [--pools] [--from X] [--to Y]",
		Short: "Draw memory over time: allocated, active and reserved, the peak, OOMs and phases",
		Long: `Draw a device's memory over the time of its trace: allocated (what tensors
hold), active (allocated plus blocks freed but still waiting for other
streams) and reserved (what the caching allocator obtained from CUDA), with
the peak of allocated memory and every out-of-memory error marked, and the
phases the program annotated (record_function START/END pairs in
external_annotations) shaded.

The figures come from replaying the trace through memstat's allocator model,
following the recorded decisions, so they are the values
torch.cuda.memory_stats() had after each event. Long traces are reduced to a
few thousand points, keeping the lowest and highest value of each stretch,
so spikes stay visible.

The X axis is seconds since the first trace entry when the file records
time_us (PyTorch 2.2+), the trace entry index otherwise. --from and --to
limit the picture to part of the trace: a trace entry index (1200) or a time
since the first entry (1.5s, 250ms). The Y axis is in GiB (MiB for small
runs). The picture format comes from the -o file name: .svg or .png.

--stacked fills allocated memory with stacked bands by group: the --top N
largest groups (by their area over the picture) in colour, the rest in
grey; --by groups by stack (the default, named by its site), frame, file,
annotation (the record_function range open at the allocation) or pool, as
"memstat peak --by" and "memstat view" do. At every column the bands add up
to allocated memory at the column's highest moment.`,
		Example: `  memstat plot snapshot.pickle -o memory.png
  memstat plot snapshot.pickle -o memory.svg --pools
  memstat plot snapshot.pickle -o step.png --from 0.8s --to 1.2s
  memstat plot snapshot.pickle -o by-site.svg --stacked --by frame --top 8`,
		Args: command.OneSnapshot("memstat plot FILE -o OUT.svg|OUT.png"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			if opts.Output == "" {
				return command.FlagErrorf("-o OUT.svg or -o OUT.png is required")
			}
			var err error
			if opts.format, err = rplot.FormatOf(opts.Output); err != nil {
				return command.FlagErrorf("-o %v", err)
			}
			if opts.from, err = timeline.ParseBound(opts.From); err != nil {
				return command.FlagErrorf("--from: %v", err)
			}
			if opts.to, err = timeline.ParseBound(opts.To); err != nil {
				return command.FlagErrorf("--to: %v", err)
			}
			if opts.by, err = view.ParseGroupBy(opts.By); err != nil {
				return command.FlagErrorf("--by: %v", err)
			}
			if opts.Top < 1 {
				return command.FlagErrorf("--top must be at least 1")
			}
			if !opts.Stacked && (cmd.Flags().Changed("by") || cmd.Flags().Changed("top")) {
				return command.FlagErrorf("--by and --top go with --stacked")
			}
			if runF != nil {
				return runF(opts)
			}
			return runPlot(opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&opts.Output, "output", "o", "", "picture to write: a .svg or .png file")
	fl.IntVar(&opts.Device, "device", -1, "device to draw (default: the first with a trace)")
	fl.BoolVar(&opts.Pools, "pools", false, "also draw allocated and reserved memory per pool (small, large)")
	fl.StringVar(&opts.From, "from", "", "start at this trace entry index (1200) or time since the first entry (1.5s)")
	fl.StringVar(&opts.To, "to", "", "end at this trace entry index or time since the first entry")
	fl.BoolVar(&opts.Stacked, "stacked", false, "fill allocated memory with bands by group (see --by, --top)")
	fl.StringVar(&opts.By, "by", "stack", "with --stacked: group by {stack|frame|file|annotation|pool|allocation}")
	fl.IntVar(&opts.Top, "top", 8, "with --stacked: draw the N largest groups, the rest summed in grey")
	return cmd
}

func runPlot(opts *Options) error {
	if err := atomicfile.RefuseInput("-o", opts.Output, opts.File); err != nil {
		return err
	}
	snap, err := command.LoadSnapshot(opts.IO.ErrOut, opts.File)
	if err != nil {
		return err
	}
	device, err := command.TraceDevice(snap, opts.File, opts.Device)
	if err != nil {
		return err
	}
	if opts.Device < 0 {
		for _, line := range leftOut(snap, device) {
			fmt.Fprintf(opts.IO.ErrOut, "memstat: %s: %s\n", opts.File, line)
		}
	}
	tlo := timeline.Options{Device: device, Pools: opts.Pools, From: opts.from, To: opts.to}
	var tl *timeline.Timeline
	var bands *rplot.Bands
	if opts.Stacked {
		// One replay feeds the timeline and the bands.
		b, err := timeline.NewBuilder(snap, tlo)
		if err != nil {
			return fmt.Errorf("%s: %w", opts.File, err)
		}
		m, err := view.BuildObserved(snap, device, analysis.NewFrames(snap.Stacks, false), analysis.Want{}, b.Observe)
		if err != nil {
			return fmt.Errorf("%s: %w", opts.File, err)
		}
		tl = b.Finish()
		tl.SetPrivateBound(m.Replayed.Result)
		if bands, err = stackedBands(m, tl, opts.by, opts.Top); err != nil {
			return fmt.Errorf("%s: %w", opts.File, err)
		}
	} else if tl, err = timeline.Build(snap, tlo); err != nil {
		return fmt.Errorf("%s: %w", opts.File, err)
	}
	command.PrintWarnings(opts.IO.ErrOut, opts.File, tl.Notes)
	title := fmt.Sprintf("%s, device %d", filepath.Base(opts.File), device)
	if opts.Stacked {
		title += ", allocated by " + string(opts.by)
	}
	if err := atomicfile.Write(opts.Output, func(w io.Writer) error {
		return rplot.Write(w, tl, opts.format, rplot.Options{Title: title, Bands: bands})
	}); err != nil {
		return err
	}
	fmt.Fprintf(opts.IO.Out, "%s: %s\n", opts.Output, Summary(tl))
	return nil
}

// Summary says in a line what a timeline shows.
func Summary(tl *timeline.Timeline) string {
	s := fmt.Sprintf("device %d, trace entries %d to %d of %d", tl.Device, tl.From, tl.To, tl.Entries)
	if tl.Peak.Index >= 0 {
		s += fmt.Sprintf(", peak allocated %s at entry %d", report.Size(tl.Peak.Bytes), tl.Peak.Index)
		if tl.TimeBased {
			s += fmt.Sprintf(" (%.3f s)", tl.Peak.X)
		}
	}
	s += fmt.Sprintf(", peak reserved %s", report.Size(tl.PeakReserved.Bytes))
	switch n := len(tl.OOMs); n {
	case 0:
	case 1:
		s += ", 1 out-of-memory error"
	default:
		s += fmt.Sprintf(", %d out-of-memory errors", n)
	}
	switch n := len(tl.Phases); n {
	case 0:
	case 1:
		s += ", 1 annotated phase"
	default:
		s += fmt.Sprintf(", %d annotated phases", n)
	}
	return s
}

// StackedColumns is the resolution of --stacked's bands.
const StackedColumns = 800

// stackedBands groups allocated memory over the timeline's window into the
// top groups and the rest, on the timeline's X axis.
func stackedBands(m *view.Model, tl *timeline.Timeline, by analysis.GroupBy, top int) (*rplot.Bands, error) {
	w, err := m.Window(view.Request{From: tl.From, To: tl.To, Width: StackedColumns, By: by, Top: top})
	if err != nil {
		return nil, err
	}
	trace := m.Replayed.Trace()
	// The timeline's X of an entry: its index, or the seconds since the
	// first entry (the clock never running backwards).
	xs := func(i int) float64 { return float64(i) }
	if tl.TimeBased {
		run := make([]int64, tl.To+2)
		var hi int64
		for i, e := range trace.All() {
			if i > tl.To {
				break
			}
			hi = max(hi, e.TimeUS)
			run[i] = hi
		}
		xs = func(i int) float64 { return float64(run[min(i, tl.To)]-tl.StartUS) / 1e6 }
	}
	n := len(w.First)
	b := &rplot.Bands{X: make([]float64, n+1)}
	for c := range n {
		b.X[c] = xs(w.First[c])
	}
	b.X[n] = xs(w.To)
	for i := range w.Bands {
		bd := &w.Bands[i]
		l := rplot.Layer{Label: bd.Label, Bytes: make([]int64, n)}
		for c := range n {
			l.Bytes[c] = bd.At(c)
		}
		b.Layers = append(b.Layers, l)
	}
	rest := rplot.Layer{Label: fmt.Sprintf("%d more, summed", w.OtherCount), Bytes: w.Other, Rest: true}
	if w.OtherCount == 0 {
		rest.Label = "the rest"
	}
	b.Layers = append(b.Layers, rest)
	return b, nil
}

// leftOut names the devices with a trace that the picture of device drawn
// leaves out, those that ran out of memory first: "device 1 ran out of
// memory; use --device 1".
func leftOut(snap *snapshot.Snapshot, drawn int) []string {
	var oom, other []string
	for d := range snap.Devices() {
		tr := snap.Trace(d)
		if d == drawn || tr.Len() == 0 {
			continue
		}
		n := 0
		for _, e := range tr.All() {
			if e.Action == snapshot.ActionOOM {
				n++
			}
		}
		if n > 0 {
			times := "once"
			if n > 1 {
				times = fmt.Sprintf("%d times", n)
			}
			oom = append(oom, fmt.Sprintf("device %d ran out of memory (%s); use --device %d", d, times, d))
		} else {
			other = append(other, fmt.Sprintf("device %d has a trace too; use --device %d", d, d))
		}
	}
	return append(oom, other...)
}
