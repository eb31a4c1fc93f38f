// Package peak is `memstat peak`: when allocated and reserved memory
// peaked, and what was live at the peak, grouped like pprof's top.
package peak

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/report"
)

// Options are `memstat peak`'s inputs.
type Options struct {
	IO        *iostreams.IOStreams
	File      string
	Output    command.OutputFlags
	Format    report.Format
	Top       int
	By        string
	Device    int
	Stacks    bool
	AllFrames bool

	by analysis.GroupBy
}

// NewCmdPeak returns the peak command. runF replaces runPeak in tests of
// flag parsing.
func NewCmdPeak(f *command.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "peak FILE [--top N] [--by stack|frame|file|annotation] [--stacks]",
		Short: "When memory peaked and what was live then, by allocation site",
		Long: `Find the moment allocated memory peaked (allocated_bytes.all.peak of
torch.cuda.memory_stats()) and the moment reserved memory peaked: the trace
entry, its time since the first entry, and the annotated range open then
(record_function names such as forward or "Optimizer.step#AdamW.step").

Then list what was live at the peak of allocated memory, grouped like
pprof's top: bytes, share of the peak, running share, blocks, and where they
were allocated. The bytes listed add up exactly to allocated_bytes.all.peak.
--by stack (the default) groups by the whole allocation stack and names its
innermost frame of your own code; --by frame by that frame alone; --by file
by its file; --by annotation by the range open when each block was
allocated. --stacks prints each group's stack.

The state at the peak comes from replaying the trace through memstat's model
of the caching allocator. Memory allocated before the trace began (a trace
that starts mid-run keeps only the last max_entries events) is reported
apart from memory allocated during it. With annotations, the peaks inside
each range name (forward, backward, optimizer step, ...) follow.

Frames of PyTorch's own code, code it generated and native frames are hidden
so that your code comes first; --all-frames shows them.`,
		Example: `  memstat peak snapshot.pickle
  memstat peak snapshot.pickle --by frame --top 20
  memstat peak snapshot.pickle --stacks --format markdown
  memstat peak snapshot.pickle --json`,
		Args: command.OneSnapshot("memstat peak FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			format, err := opts.Output.Resolve()
			if err != nil {
				return err
			}
			opts.Format = format
			if opts.by, err = analysis.ParseGroupBy(opts.By); err != nil {
				return command.FlagErrorf("--by: %v", err)
			}
			if opts.Top < 0 {
				return command.FlagErrorf("--top must be at least 0 (0: every group)")
			}
			if runF != nil {
				return runF(opts)
			}
			return runPeak(opts)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&opts.Top, "top", 10, "list the N largest groups and sum the rest (0: all)")
	fl.StringVar(&opts.By, "by", "stack", "group live memory by {stack|frame|file|annotation}")
	fl.BoolVar(&opts.Stacks, "stacks", false, "print the stack of each group")
	command.AddDeviceFlag(cmd, &opts.Device)
	command.AddAllFramesFlag(cmd, &opts.AllFrames)
	command.AddOutputFlags(cmd, &opts.Output, report.Text, report.JSON, report.Markdown)
	return cmd
}

// devicePeak is one device's results.
type devicePeak struct {
	rp     *analysis.Replayed
	peak   *analysis.Peak
	groups []analysis.Group
	rest   analysis.Group
}

func runPeak(opts *Options) error {
	// The heap limit counts the figures and the two states the replay holds.
	command.NeedHeap(command.HeapNeed{PerEntry: command.FiguresPerEntry, PerBlock: 2 * command.StatePerBlock})
	snap, scan, err := command.LoadSnapshotScanned(opts.IO.ErrOut, opts.File)
	if err != nil {
		return err
	}
	if scan != nil {
		defer scan.Stop()
	}
	fr := analysis.NewFrames(snap.Stacks, opts.AllFrames)
	out, err := command.ReplayEachFor(opts.IO.ErrOut, opts.File, snap, opts.Device, analysis.Want{PeakAllocated: true, CompactFigures: true, LiveOnly: true, StartScan: scan}, func(rp *analysis.Replayed) (devicePeak, error) {
		p, err := analysis.FindPeak(rp)
		if err != nil {
			return devicePeak{}, err
		}
		command.PrintWarnings(opts.IO.ErrOut, fmt.Sprintf("%s: device %d", opts.File, rp.Device), p.Warnings)
		groups := analysis.GroupBlocks(p.Live, opts.by, fr, rp.Phases, p.LiveBytes)
		top, rest := analysis.TopGroups(groups, opts.Top)
		return devicePeak{rp: rp, peak: p, groups: top, rest: rest}, nil
	})
	if err != nil {
		return err
	}
	if opts.Format == report.JSON {
		return report.WriteJSON(opts.IO.Out, jsonPeak(opts, out))
	}
	return writeText(opts, out)
}

func writeText(opts *Options, devices []devicePeak) error {
	doc := report.NewDoc(opts.IO.Out, opts.Format)
	for _, d := range devices {
		p, rp := d.peak, d.rp
		doc.Section(command.DeviceTitle(opts.File, rp))
		if note := report.SimulatedNote(rp.Snap.Recorder); note != "" {
			doc.Line("%s", note)
		}
		if p.Coverage == replay.CoverageNone {
			// Only the final state is known: the peaks are at least
			// its figures, and nothing says by how much more.
			doc.Line("peak allocated: at least %s (no trace: only the final state is known)", report.Size(p.Allocated.Allocated))
			doc.Line("peak reserved: at least %s (no trace: only the final state is known)", report.Size(p.Reserved.Reserved))
		} else {
			doc.Line("peak allocated %s %s", report.Size(p.Allocated.Allocated), report.MomentText(p.Allocated, p.Entries))
			doc.Line("peak reserved %s %s", report.Size(p.Reserved.Reserved), report.MomentText(p.Reserved, p.Entries))
		}
		doc.Line("%s", historyText(rp, p))
		if p.PrivatePools.Bytes > 0 {
			doc.Line("of the live memory, %s (%s) sat in private pools (CUDA graphs, MemPool); see memstat segments for the pools",
				report.Size(p.PrivatePools.Bytes), report.Plural(p.PrivatePools.Blocks, "block", "blocks"))
		}
		doc.Table(report.GroupTable(d.groups, d.rest, opts.by, p.LiveBytes, opts.Stacks, "peak"))
		if opts.Stacks {
			for i, g := range d.groups {
				doc.Gap()
				doc.Line("#%d: %s in %s", i+1, report.Size(g.Bytes), report.Plural(g.Count, "block", "blocks"))
				doc.Pre(report.StackLines(g.Stack, g.HiddenFrames, opts.AllFrames))
			}
		}
		if len(p.Phases) > 0 && p.Entries > 0 {
			doc.Gap()
			doc.Line("peaks by annotation (the record_function ranges of external_annotations):")
			doc.Table(report.PhaseTable(p.Phases, p.Entries))
		}
		if p.Coverage != replay.CoverageNone && p.Entries > 0 {
			command.ViewHint(opts.IO, opts.File, hintDevice(rp), "peak")
		}
	}
	return doc.Err()
}

// historyText says what the trace covers and splits the live memory by
// when it was allocated.
func historyText(rp *analysis.Replayed, p *analysis.Peak) string {
	live := fmt.Sprintf("live at the peak: %s in %s", report.Size(p.LiveBytes), report.Plural(len(p.Live), "block", "blocks"))
	switch p.Coverage {
	case replay.CoverageNone:
		return "no trace: the table is the final state, not the peak; " + strings.Replace(live, "live at the peak", "live in the final state", 1)
	case replay.CoverageComplete:
		return fmt.Sprintf("the trace starts from an empty allocator; %s, all allocated during the trace", live)
	}
	return fmt.Sprintf("the trace starts mid-run; %s: %s (%s) allocated before the trace began, %s (%s) during it",
		live, report.Size(p.BeforeTrace.Bytes), report.Plural(p.BeforeTrace.Blocks, "block", "blocks"),
		report.Size(p.DuringTrace.Bytes), report.Plural(p.DuringTrace.Blocks, "block", "blocks"))
}

type jsonDevice struct {
	Device       int                  `json:"device"`
	TorchVersion string               `json:"torch_version"`
	Coverage     string               `json:"coverage"`
	Entries      int                  `json:"trace_entries"`
	PeakAlloc    analysis.Moment      `json:"peak_allocated"`
	PeakReserved analysis.Moment      `json:"peak_reserved"`
	LiveBytes    int64                `json:"live_bytes"`
	LiveBlocks   int                  `json:"live_blocks"`
	BeforeTrace  analysis.Share       `json:"before_trace"`
	DuringTrace  analysis.Share       `json:"during_trace"`
	PrivatePools analysis.Share       `json:"private_pools"`
	By           string               `json:"by"`
	Groups       []report.GroupJSON   `json:"groups"`
	Rest         *report.GroupJSON    `json:"rest"`
	Phases       []analysis.PhasePeak `json:"phases"`
	// Bounds label the peaks a snapshot without a trace cannot give: only
	// their least value (the final state's) is known.
	Bounds map[string]peakBound `json:"bounds,omitempty"`
}

// peakBound is a figure known only to lie in [Min, Max]; a nil Max is
// unbounded.
type peakBound struct {
	Min int64  `json:"min"`
	Max *int64 `json:"max"`
}

func jsonPeak(opts *Options, devices []devicePeak) any {
	jds := []jsonDevice{}
	for _, d := range devices {
		p := d.peak
		jd := jsonDevice{
			Device: p.Device, TorchVersion: d.rp.Result.Version, Coverage: p.Coverage, Entries: p.Entries,
			PeakAlloc: p.Allocated, PeakReserved: p.Reserved, LiveBytes: p.LiveBytes, LiveBlocks: len(p.Live),
			BeforeTrace: p.BeforeTrace, DuringTrace: p.DuringTrace, PrivatePools: p.PrivatePools, By: string(opts.by),
			Groups: []report.GroupJSON{}, Phases: p.Phases,
		}
		if p.Coverage == replay.CoverageNone {
			jd.Bounds = map[string]peakBound{
				"peak_allocated": {Min: p.Allocated.Allocated},
				"peak_reserved":  {Min: p.Reserved.Reserved},
			}
			jd.Phases = nil
		}
		if jd.Phases == nil {
			jd.Phases = []analysis.PhasePeak{}
		}
		jd.Groups = report.GroupRecords(d.groups, opts.by, opts.Stacks)
		if d.rest.Count > 0 {
			r := report.GroupRecord(d.rest, 0, d.rest.Key, false)
			jd.Rest = &r
		}
		jds = append(jds, jd)
	}
	return opts.Output.Envelope([]string{opts.File}, []report.FileResult{{File: opts.File, Devices: jds}})
}

// hintDevice is the --device of memstat view's hint: none for a snapshot
// of one device.
func hintDevice(rp *analysis.Replayed) int {
	if rp.Snap.Devices() > 1 {
		return rp.Device
	}
	return -1
}
