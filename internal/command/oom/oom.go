// Package oom is `memstat oom`: for every out-of-memory error a snapshot
// recorded, the state it happened in, PyTorch's message, why it failed
// and what to do about it.
package oom

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/report"
)

// Options are `memstat oom`'s inputs.
type Options struct {
	IO        *iostreams.IOStreams
	File      string
	Output    command.OutputFlags
	Format    report.Format
	Device    int
	Top       int
	Stacks    bool
	AllFrames bool
}

// NewCmdOOM returns the oom command. runF replaces runOOM in tests of
// flag parsing.
func NewCmdOOM(f *command.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "oom FILE",
		Short: "Explain each out-of-memory error: the state, the message, the cause, the fix",
		Long: `For every oom entry of the snapshot's trace (PyTorch records one each time an
allocation fails for good), rebuild the allocator's state at that moment by
replaying the trace, and print:

  - PyTorch's error message, recreated in the wording of the file's PyTorch
    version: the request, the device's free memory, what PyTorch had
    allocated and what it held reserved but unallocated;
  - the largest free block of each pool against the request, and how
    scattered the cached free memory was;
  - the stacks that held the memory;
  - a verdict: too much live memory (even reusing every free byte the request
    could not fit) or fragmentation (the memory existed, not in one piece),
    and what to do: smaller batches, activation checkpointing,
    expandable_segments:True, max_split_size_mb, and why empty_cache() does
    not help.

The snapshot does not record the GPU's size: the "total capacity" is
device_free + reserved, what PyTorch could have had. When the trace has no
oom entry, the state at the peak of reserved memory is shown instead.`,
		Example: `  memstat oom snapshot.pickle
  memstat oom snapshot.pickle --stacks --format markdown
  memstat oom snapshot.pickle --json`,
		Args: command.OneSnapshot("memstat oom FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			format, err := opts.Output.Resolve()
			if err != nil {
				return err
			}
			opts.Format = format
			if opts.Top < 1 {
				return command.FlagErrorf("--top must be at least 1")
			}
			if runF != nil {
				return runF(opts)
			}
			return runOOM(opts)
		},
	}
	cmd.Flags().IntVar(&opts.Top, "top", analysis.HolderCount, "list the N stacks holding the most memory")
	cmd.Flags().BoolVar(&opts.Stacks, "stacks", false, "print the stack of each holder")
	command.AddDeviceFlag(cmd, &opts.Device)
	command.AddAllFramesFlag(cmd, &opts.AllFrames)
	command.AddOutputFlags(cmd, &opts.Output, report.Text, report.JSON, report.Markdown)
	return cmd
}

// maxStackLines is how much of the failing allocation's stack is shown
// without --stacks.
const maxStackLines = 12

type deviceOOM struct {
	rp  *analysis.Replayed
	rep *analysis.OOMReport
}

func runOOM(opts *Options) error {
	// The heap limit counts the figures and two states (the start and the
	// peak's guess; a trace's ooms add one each: few).
	command.NeedHeap(command.HeapNeed{PerEntry: command.FiguresPerEntry, PerBlock: 2 * command.StatePerBlock})
	snap, scan, err := command.LoadSnapshotScanned(opts.IO.ErrOut, opts.File)
	if err != nil {
		return err
	}
	if scan != nil {
		defer scan.Stop()
	}
	fr := analysis.NewFrames(snap.Stacks, opts.AllFrames)
	out, err := command.ReplayEachFor(opts.IO.ErrOut, opts.File, snap, opts.Device, analysis.Want{OOMs: true, CompactFigures: true, StartScan: scan}, func(rp *analysis.Replayed) (deviceOOM, error) {
		rep, err := analysis.ExplainOOMsTop(rp, fr, opts.Top)
		return deviceOOM{rp, rep}, err
	})
	if err != nil {
		return err
	}
	if opts.Format == report.JSON {
		return report.WriteJSON(opts.IO.Out, jsonOOM(opts, out))
	}
	return writeText(opts, out)
}

func writeText(opts *Options, devices []deviceOOM) error {
	doc := report.NewDoc(opts.IO.Out, opts.Format)
	for _, d := range devices {
		rp, rep := d.rp, d.rep
		entries := rp.Trace().Len()
		doc.Section(command.DeviceTitle(opts.File, rp))
		if note := report.SimulatedNote(rp.Snap.Recorder); note != "" {
			doc.Line("%s", note)
		}
		if rep.AtPeak != nil {
			switch {
			case entries == 0:
				doc.Line("no out-of-memory error: the snapshot has no trace for this device. Its final state:")
			case rp.Result.History.Coverage == replay.CoveragePartial:
				doc.Line("no out-of-memory error in the %d recorded trace entries (the trace starts mid-run). The state at the peak of reserved memory, %s:",
					entries, report.MomentText(rep.AtPeak.Moment, entries))
			default:
				doc.Line("no out-of-memory error in the %d recorded trace entries. The state at the peak of reserved memory, %s:",
					entries, report.MomentText(rep.AtPeak.Moment, entries))
			}
			writeState(doc, opts, rep.AtPeak)
			continue
		}
		if len(rep.OOMs) > 1 {
			doc.Line("%d out-of-memory errors in the trace.", len(rep.OOMs))
		}
		for i := range rep.OOMs {
			o := &rep.OOMs[i]
			if i > 0 {
				doc.Gap()
			}
			doc.Line("out of memory %s: tried to allocate %s (%s pool, stream %s) at %s",
				report.AtEntryText(o.Moment, entries), report.Size(o.AllocSize), o.Pool, report.Stream(o.Stream).Text,
				analysis.FrameString(o.Site))
			doc.Line("PyTorch's message, rebuilt from the trace (the total capacity is device_free + reserved, what PyTorch could have had: the snapshot does not record the GPU's size):")
			doc.Pre([]string{o.Message})
			doc.Line("verdict: %s", report.VerdictText(o))
			doc.Line("the request needs %s from the %s pool on stream %s; the largest free block there was %s",
				report.Size(o.AllocSize), o.Pool, report.Stream(o.Stream).Text, report.Size(o.LargestInPool))
			writeState(doc, opts, &o.MemoryState)
			doc.Line("the failing allocation was requested at:")
			stack := report.StackLines(o.Stack, o.HiddenFrames, opts.AllFrames)
			if !opts.Stacks && len(stack) > maxStackLines+1 {
				n := len(stack) - maxStackLines
				stack = append(stack[:maxStackLines:maxStackLines], fmt.Sprintf("(%d more lines; --stacks shows them)", n))
			}
			doc.Pre(stack)
			doc.Line("what to do:")
			doc.List(report.AdviceText(o))
			dev := -1
			if rp.Snap.Devices() > 1 {
				dev = rp.Device
			}
			command.ViewHint(opts.IO, opts.File, dev, strconv.Itoa(o.Moment.Index))
		}
	}
	return doc.Err()
}

func writeState(doc *report.Doc, opts *Options, ms *analysis.MemoryState) {
	doc.Line("state: %s", report.StateText(ms))
	doc.Table(report.FreeSpaceTable(ms))
	doc.Gap()
	doc.Line("who held the memory, by allocation stack:")
	doc.Table(report.GroupTable(ms.Holders, ms.HoldersRest, analysis.ByStack, ms.Allocated, opts.Stacks, "allocated"))
	if opts.Stacks {
		for i, g := range ms.Holders {
			doc.Gap()
			doc.Line("#%d: %s in %s", i+1, report.Size(g.Bytes), report.Plural(g.Count, "block", "blocks"))
			doc.Pre(report.StackLines(g.Stack, g.HiddenFrames, opts.AllFrames))
		}
	}
	doc.Gap()
}

type jsonState struct {
	analysis.MemoryState
	Holders []report.GroupJSON `json:"holders"`
	Rest    *report.GroupJSON  `json:"holders_rest"`
}

type jsonAdvice struct {
	Kind analysis.Advice `json:"kind"`
	Text string          `json:"text"`
}

type jsonOOMEvent struct {
	Moment             analysis.Moment    `json:"moment"`
	Requested          int64              `json:"requested_bytes"`
	AllocSize          int64              `json:"alloc_size"`
	Stream             int64              `json:"stream"`
	Pool               string             `json:"pool"`
	DeviceFree         int64              `json:"device_free"`
	DeviceTotal        int64              `json:"device_total_lower_bound"`
	LargestInPool      int64              `json:"largest_free_in_pool"`
	RequestPoolID      [2]int64           `json:"request_pool_id"`
	RequestPoolKnown   bool               `json:"request_pool_known"`
	OtherPoolsFree     int64              `json:"free_in_other_pools_bytes"`
	Message            string             `json:"message"`
	Verdict            analysis.Verdict   `json:"verdict"`
	Explanation        string             `json:"explanation"`
	Shortfall          int64              `json:"shortfall_bytes"`
	ExpandableSegments bool               `json:"expandable_segments"`
	Advice             []jsonAdvice       `json:"advice"`
	Site               report.FrameJSON   `json:"site"`
	RequestedAt        []report.FrameJSON `json:"requested_at"`
	HiddenFrames       int                `json:"hidden_frames"`
	State              jsonState          `json:"state"`
}

type jsonDevice struct {
	Device       int            `json:"device"`
	TorchVersion string         `json:"torch_version"`
	OOMs         []jsonOOMEvent `json:"ooms"`
	AtPeak       *jsonState     `json:"at_peak_reserved"`
}

func stateJSON(ms analysis.MemoryState, stacks bool) jsonState {
	js := jsonState{MemoryState: ms, Holders: report.GroupRecords(ms.Holders, analysis.ByStack, stacks)}
	if ms.HoldersRest.Count > 0 {
		r := report.GroupRecord(ms.HoldersRest, 0, ms.HoldersRest.Key, false)
		js.Rest = &r
	}
	return js
}

func jsonOOM(opts *Options, devices []deviceOOM) any {
	jds := []jsonDevice{}
	for _, d := range devices {
		jd := jsonDevice{Device: d.rep.Device, TorchVersion: d.rp.Result.Version, OOMs: []jsonOOMEvent{}}
		for _, o := range d.rep.OOMs {
			je := jsonOOMEvent{
				Moment: o.Moment, Requested: o.Requested, AllocSize: o.AllocSize, Stream: o.Stream, Pool: o.Pool,
				DeviceFree: o.DeviceFree, DeviceTotal: o.DeviceTotal, LargestInPool: o.LargestInPool, Message: o.Message,
				RequestPoolID: o.RequestPoolID, RequestPoolKnown: o.RequestPoolKnown, OtherPoolsFree: o.OtherPoolsFree,
				Verdict: o.Verdict, Explanation: report.VerdictText(&o), Shortfall: o.Shortfall,
				ExpandableSegments: o.ExpandableSegments, Advice: []jsonAdvice{}, Site: report.FrameRecord(o.Site),
				RequestedAt: report.FrameRecords(o.Stack), HiddenFrames: o.HiddenFrames,
				State: stateJSON(o.MemoryState, opts.Stacks),
			}
			for i, text := range report.AdviceText(&o) {
				je.Advice = append(je.Advice, jsonAdvice{Kind: o.Advice[i], Text: text})
			}
			jd.OOMs = append(jd.OOMs, je)
		}
		if d.rep.AtPeak != nil {
			s := stateJSON(*d.rep.AtPeak, opts.Stacks)
			jd.AtPeak = &s
		}
		jds = append(jds, jd)
	}
	return opts.Output.Envelope([]string{opts.File}, []report.FileResult{{File: opts.File, Devices: jds}})
}
