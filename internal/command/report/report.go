// Package report is `memstat report`: everything memstat knows about a
// snapshot on one self-contained HTML page.
package report

import (
	"errors"
	"fmt"
	"html/template"
	"io"
	"sync"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/atomicfile"
	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/parallel"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/report"
	"github.com/memstat/memstat/pkg/report/htmlreport"
	"github.com/memstat/memstat/pkg/report/webview"
	"github.com/memstat/memstat/pkg/snapshot"
	"github.com/memstat/memstat/pkg/timeline"
	"github.com/memstat/memstat/pkg/view"
)

// Options are `memstat report`'s inputs.
type Options struct {
	IO     *iostreams.IOStreams
	File   string
	Output string
	Device int
	Top    int
	// RuntimeSettings: the program changed allocator settings at runtime
	// (--runtime-settings, analysis.Want.RuntimeSettings).
	RuntimeSettings bool
	// Captures: the program captured CUDA graphs or used a MemPool
	// (--captures, analysis.Want.Captures).
	Captures bool
}

// NewCmdReport returns the report command. runF replaces runReport in
// tests of flag parsing.
func NewCmdReport(f *command.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "report FILE -o OUT.html [--device N]",
		Short: "Write one self-contained HTML page: headline, timeline, peak, OOMs, stats, segments",
		Long: `Write everything memstat finds in a snapshot on one HTML page, per device:
the headline (peak allocated and reserved memory, fragmentation), the picture
of memory over time, what was live at the peak of allocated memory by
allocation stack (the stacks fold out), why each out-of-memory error
happened, the torch.cuda.memory_stats() table and a map of the final
segments with their blocks.

At the top, the interactive timeline of memstat view, pre-decimated: the
largest allocations as bands (hover: size, times, stack), group by stack,
frame, file, annotation or pool, zoom and pan within what the page holds.
"memstat view" shows the same at any zoom, and the allocator state at any
event.

The page is a single file, its script inline, with no web font and no
outside resource: it opens offline, stays under 10 MB whatever the trace,
and can be attached to an issue or a pull request as it is.`,
		Example: `  memstat report snapshot.pickle -o report.html
  memstat report snapshot.pickle -o report.html --device 1`,
		Args: command.OneSnapshot("memstat report FILE -o OUT.html"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			if opts.Output == "" {
				return command.FlagErrorf("-o OUT.html is required")
			}
			if opts.Top < 1 {
				return command.FlagErrorf("--top must be at least 1")
			}
			if runF != nil {
				return runF(opts)
			}
			return runReport(opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&opts.Output, "output", "o", "", "HTML file to write")
	fl.IntVar(&opts.Device, "device", -1, "report only this device (default: every device with segments or a trace)")
	fl.IntVar(&opts.Top, "top", 15, "stacks to list live at the peak")
	command.AddRuntimeSettingsFlag(cmd, &opts.RuntimeSettings)
	command.AddCapturesFlag(cmd, &opts.Captures)
	return cmd
}

func runReport(opts *Options) error {
	if err := atomicfile.RefuseInput("-o", opts.Output, opts.File); err != nil {
		return err
	}
	// Besides the replay's state: the figures, the view's intervals (22
	// bytes each, about half the entries allocate), two captured states
	// and the final blocks (analysis.Replayed's final, 32 bytes a block).
	// Against the live heap at its peak (gctrace): torch-1GB 642 MB, need
	// 777 MB, limit 932 MB, under the file's 996 MB that was the limit
	// before (peak RSS 985 -> 924 MB); torch-100MB 68 MB, need 80 MB
	// (peak RSS 139-149 -> 106-107 MB, user CPU unchanged).
	command.NeedHeap(command.HeapNeed{PerEntry: command.FiguresPerEntry + 12, PerBlock: 2*command.StatePerBlock + 32})
	snap, scan, err := command.LoadSnapshotScanned(opts.IO.ErrOut, opts.File)
	if err != nil {
		return err
	}
	if scan != nil {
		defer scan.Stop()
	}
	rep := &htmlreport.Report{File: opts.File, Warnings: snap.Warnings}
	devices := []int{}
	if opts.Device >= 0 {
		d, err := command.StateDevice(snap, opts.File, opts.Device)
		if err != nil {
			return err
		}
		devices = append(devices, d)
	} else {
		for d := range snap.Devices() {
			if snap.Trace(d).Len() > 0 || len(snap.DeviceSegments(d)) > 0 {
				devices = append(devices, d)
			}
		}
		if len(devices) == 0 {
			return fmt.Errorf("%s: no device has segments or a trace", opts.File)
		}
	}
	// The interactive timeline of the first traced devices is drawn from
	// their models as soon as each is built, beside that device's
	// analyses and the next device's replay (on another core), rather
	// than after every device: 0.09 s of CPU a run on torch-100MB, and
	// the analyses leave the model as it was built (they read its
	// Replayed, as the timeline does, and change none of it).
	var traced []int
	for _, d := range devices {
		if snap.Trace(d).Len() > 0 {
			traced = append(traced, d)
		}
	}
	st := startStatic(opts.File, snap, traced)
	for _, d := range devices {
		dev, err := device(snap, d, opts, scan, st.built)
		if err != nil {
			st.stop()
			return fmt.Errorf("%s: device %d: %w", opts.File, d, err)
		}
		rep.Devices = append(rep.Devices, dev)
	}
	// The devices' sections are drawn (htmlreport.Prepare: the timeline's
	// picture, the segment map, the tables) while the interactive timeline
	// is finished and encoded, on the other core, not after it.
	type prepared struct {
		page *htmlreport.Page
		err  error
	}
	prep := make(chan prepared, 1)
	go func() {
		var pr prepared
		defer func() {
			if p := parallel.Recovered(recover()); p != nil {
				pr.err = p
			}
			prep <- pr
		}()
		pr.page, pr.err = htmlreport.Prepare(rep)
	}()
	if len(traced) > 0 {
		data, err := st.wait()
		if _, bug := err.(*parallel.PanicError); bug {
			return err
		} else if err != nil {
			return fmt.Errorf("%s: the interactive timeline: %w", opts.File, err)
		}
		frag, err := webview.StaticFragment(data)
		if err != nil {
			return err
		}
		rep.Interactive = template.HTML(frag)
	}
	pr := <-prep
	if _, bug := pr.err.(*parallel.PanicError); bug {
		return pr.err
	}
	// A page that could not be drawn fails as its writing did when it was
	// drawn while written: "writing OUT.html: ...".
	if err := atomicfile.Write(opts.Output, func(w io.Writer) error {
		if pr.err != nil {
			return pr.err
		}
		return pr.page.Write(w)
	}); err != nil {
		return err
	}
	fmt.Fprintf(opts.IO.Out, "%s: %d device(s)\n", opts.Output, len(rep.Devices))
	return nil
}

// device runs every analysis of one device; one that fails leaves its
// section out with a note rather than losing the page.
//
// A device with a trace is replayed once for its intervals (pkg/view),
// which the interactive timeline draws: built is given the model as soon
// as it is.
func device(snap *snapshot.Snapshot, d int, opts *Options, scan *replay.StartScan, built func(int, *view.Model)) (htmlreport.Device, error) {
	dev := htmlreport.Device{Device: d}
	fr := analysis.NewFrames(snap.Stacks, false)
	// The timeline and the interactive timeline's intervals sample the
	// same replay as every other analysis: one replay of the trace.
	var tl *timeline.Builder
	var tlErr error
	var each func(int, snapshot.TraceEntry, *allocator.Allocator)
	var rp *analysis.Replayed
	var m *view.Model
	var err error
	// The states reportStates asks for, captured during the same replay.
	// The figures after each entry in 4 bytes an entry, not 16 (the view's
	// model shares them).
	want := analysis.Want{PeakAllocated: true, OOMs: true, CompactFigures: true, RuntimeSettings: opts.RuntimeSettings, Captures: opts.Captures, StartScan: scan}
	if snap.Trace(d).Len() > 0 {
		if tl, tlErr = timeline.NewBuilder(snap, timeline.Options{Device: d}); tlErr == nil {
			each = tl.Observe
		}
		if m, err = view.BuildObserved(snap, d, fr, want, each); err != nil {
			return dev, err
		}
		built(d, m)
		rp = m.Replayed
	} else if rp, err = analysis.ReplayObservedFor(snap, d, want, nil, each); err != nil {
		return dev, err
	}
	res := rp.Result
	command.PrintWarnings(opts.IO.ErrOut, fmt.Sprintf("%s: device %d", opts.File, d), res.Warnings)
	dev.Result = res
	dev.Headline, dev.History, dev.Agreement = report.HeadlineText(res), report.HistoryLine(res), report.AgreementLine(res)
	dev.Notes = append(dev.Notes, report.BoundNotes(res)...)
	note := func(what string, err error) {
		dev.Notes = append(dev.Notes, fmt.Sprintf("%s could not be computed: %v", what, err))
	}
	if snap.Trace(d).Len() > 0 {
		if tlErr != nil {
			note("the timeline", tlErr)
		} else {
			dev.Timeline = tl.Finish()
			dev.Timeline.SetPrivateBound(res)
			dev.Notes = append(dev.Notes, dev.Timeline.Notes...)
		}
	}
	// The peak and the ooms need the states at a few entries: one replay
	// captures them all (a failure shows in the analyses below).
	_ = rp.Prefetch(reportStates(rp)...)
	// The analyses below read the Replayed, the snapshot and the states
	// Prefetch captured, and change none of them; each has a Frames of
	// its own (a Frames caches what it classifies as it reads), so they
	// run at once, one per core. Their notes keep their order.
	traced := snap.Trace(d).Len() > 0
	errs := runAll(
		func() error {
			p, err := analysis.FindPeak(rp)
			if err != nil {
				return err
			}
			dev.Peak = p
			groups := analysis.GroupBlocks(p.Live, analysis.ByStack, analysis.NewFrames(snap.Stacks, false), rp.Phases, p.LiveBytes)
			dev.Groups, dev.Rest = analysis.TopGroups(groups, opts.Top)
			// The page shows the groups, not the blocks (56 bytes each, 9
			// MB on torch-100MB, held until the page is written otherwise).
			p.Live = nil
			return nil
		},
		func() (err error) {
			if traced {
				dev.OOMs, err = analysis.ExplainOOMs(rp, analysis.NewFrames(snap.Stacks, false))
			}
			return err
		},
		func() (err error) {
			dev.Segments, err = analysis.Segments(rp, analysis.NewFrames(snap.Stacks, false), analysis.AtFinal, analysis.SegmentFilter{}, analysis.SortByAddress)
			return err
		},
	)
	for k, what := range []string{"what was live at the peak", "the out-of-memory explanations", "the segment map"} {
		if _, bug := errs[k].(*parallel.PanicError); bug {
			return dev, errs[k]
		} else if errs[k] != nil {
			note(what, errs[k])
		}
	}
	return dev, nil
}

// static draws the interactive timeline (webview.Static) on a goroutine of
// its own, from each device's model as device builds it.
type static struct {
	ready   map[int]chan *view.Model
	stopped chan struct{}
	done    chan struct{}
	data    *webview.StaticData
	err     error
}

// errStopped is what the timeline's goroutine ends with when the report
// failed before a model it waited for was built.
var errStopped = errors.New("stopped: the report failed")

// startStatic starts drawing the interactive timeline of the traced
// devices (none: nothing to draw), which waits for the models of the
// devices it shows (webview.StaticDevices).
func startStatic(file string, snap *snapshot.Snapshot, traced []int) *static {
	st := &static{ready: map[int]chan *view.Model{}, stopped: make(chan struct{}), done: make(chan struct{})}
	if len(traced) == 0 {
		close(st.done)
		return st
	}
	for _, d := range traced[:min(len(traced), webview.StaticDevices)] {
		st.ready[d] = make(chan *view.Model, 1)
	}
	go func() {
		defer close(st.done)
		defer func() {
			if p := parallel.Recovered(recover()); p != nil {
				st.err = p
			}
		}()
		st.data, st.err = webview.Static(file, snap, traced, func(d int) (*view.Model, error) {
			select {
			case m := <-st.ready[d]:
				return m, nil
			case <-st.stopped:
				return nil, errStopped
			}
		})
	}()
	return st
}

// built hands device d's model to the timeline (dropped when the timeline
// does not show d: the model is garbage once the device's analyses end).
func (st *static) built(d int, m *view.Model) {
	if ch, ok := st.ready[d]; ok {
		ch <- m
	}
}

// stop ends the timeline's goroutine without its models and waits for it.
func (st *static) stop() {
	close(st.stopped)
	<-st.done
}

// wait returns the timeline once drawn.
func (st *static) wait() (*webview.StaticData, error) {
	<-st.done
	return st.data, st.err
}

// reportStates are the entries whose states the report's analyses ask
// for: the peak of allocated memory (FindPeak), and each oom, or without
// one the peak of reserved memory (ExplainOOMs).
// runAll runs fns at once and returns their errors, in their order; a
// panic in one is its error (a *parallel.PanicError, which the command
// fails with), not a crash of the process.
func runAll(fns ...func() error) []error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for k, fn := range fns {
		wg.Go(func() {
			defer func() {
				if p := parallel.Recovered(recover()); p != nil {
					errs[k] = p
				}
			}()
			errs[k] = fn()
		})
	}
	wg.Wait()
	return errs
}

func reportStates(rp *analysis.Replayed) []int {
	if rp.Result.History.Coverage == replay.CoverageNone {
		return nil
	}
	idx := []int{rp.Result.PeakAllocated.Index}
	ooms := false
	tr := rp.Trace()
	for i, e := range tr.All() {
		if tr.Count(snapshot.ActionOOM) == 0 {
			break // no pass over the trace for nothing
		}
		if e.Action == snapshot.ActionOOM {
			idx, ooms = append(idx, i), true
		}
	}
	if !ooms {
		idx = append(idx, rp.Result.PeakReserved.Index)
	}
	return idx
}
