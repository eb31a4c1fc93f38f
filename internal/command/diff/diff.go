// Package diff is `memstat diff`: what changed between two snapshots
// (memory_stats, memory live at the peak by stack, segments), matched by
// content so that two runs of the same program compare.
package diff

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/parallel"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/report"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Options are `memstat diff`'s inputs.
type Options struct {
	IO            *iostreams.IOStreams
	Before, After string
	// Befores and Afters pair snapshots by position (rank by rank) when
	// more than two are given; nil for a single pair.
	Befores, Afters []string
	// Jobs caps the pairs compared at once (0: one per CPU, within the
	// memory available).
	Jobs      int
	Output    command.OutputFlags
	Format    report.Format
	Top       int
	Device    int
	Stacks    bool
	AllStats  bool
	AllFrames bool
	// RuntimeSettings: the programs changed allocator settings at
	// runtime (--runtime-settings, analysis.Want.RuntimeSettings).
	RuntimeSettings bool
	// Captures: the programs captured CUDA graphs or used a MemPool
	// (--captures, analysis.Want.Captures).
	Captures bool

	// scanBeside: the files are read with the start rebuild's pass
	// beside the reading (command.LoadSnapshotScanned), as stats reads
	// its file: a single pair, whose heap limit counts its sets; pairs
	// compared in parallel read as before.
	scanBeside bool
}

// NewCmdDiff returns the diff command. runF replaces runDiff in tests of
// flag parsing.
func NewCmdDiff(f *command.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "diff BEFORE AFTER",
		Short: "What changed between two snapshots: figures, live memory by stack, segments",
		Long: `Compare two snapshots, device by device:

  - torch.cuda.memory_stats() side by side with the change, the key figures
    first (peak allocated and reserved, current, OOMs, segments);
  - the memory live at the peak of allocated memory, by allocation stack:
    the stacks that grew and shrank the most, with the block sizes that
    changed;
  - the segments (by pool and size) that one snapshot has more of.

Stacks are matched by the content of their frames (file, line, function;
PyTorch's internal frames hidden unless --all-frames), and blocks by stack
and size, never by address, so two runs of the same program compare even
though their addresses and stack tables differ. Diffing a snapshot with
itself shows no change.`,
		Example: `  memstat diff before.pickle after.pickle
  memstat diff before/rank*.pickle after/rank*.pickle     # rank by rank
  memstat diff before.pickle after.pickle --top 20 --stacks
  memstat diff before.pickle after.pickle --format markdown   # for a PR comment
  memstat diff before.pickle after.pickle --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 || len(args)%2 != 0 {
				return command.FlagErrorf("want two snapshots, or as many after snapshots as before ones: memstat diff BEFORE AFTER, memstat diff BEFORE... AFTER...")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			n := len(args) / 2
			opts.Before, opts.After = args[0], args[n]
			if n > 1 {
				opts.Befores, opts.Afters = args[:n], args[n:]
			}
			if opts.Jobs < 0 {
				return command.FlagErrorf("invalid --jobs %d: give a positive number, or 0 for one per CPU", opts.Jobs)
			}
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
			return runDiff(opts)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&opts.Top, "top", 10, "list the N stacks that grew and the N that shrank the most")
	fl.BoolVar(&opts.Stacks, "stacks", false, "print the stack of each listed stack")
	fl.BoolVar(&opts.AllStats, "all-stats", false, "list every memory_stats key that differs, not only the key figures")
	fl.IntVar(&opts.Jobs, "jobs", 0, "pairs of snapshots to compare at once (0: one per CPU, within the available memory)")
	command.AddDeviceFlag(cmd, &opts.Device)
	command.AddAllFramesFlag(cmd, &opts.AllFrames)
	command.AddRuntimeSettingsFlag(cmd, &opts.RuntimeSettings)
	command.AddCapturesFlag(cmd, &opts.Captures)
	command.AddOutputFlags(cmd, &opts.Output, report.Text, report.JSON, report.Markdown)
	return cmd
}

type side struct {
	file string
	snap *snapshot.Snapshot
	fr   *analysis.Frames
	// scan is the start rebuild's pass made while the file was read (nil:
	// none), for the replay of the device it scanned.
	scan *replay.StartScan
}

func (o *Options) load(file string) (*side, error) {
	if o.scanBeside {
		s, scan, err := command.LoadSnapshotScanned(o.IO.ErrOut, file)
		if err != nil {
			return nil, err
		}
		return &side{file: file, snap: s, fr: analysis.NewFrames(s.Stacks, o.AllFrames), scan: scan}, nil
	}
	s, err := command.LoadSnapshot(o.IO.ErrOut, file)
	if err != nil {
		return nil, err
	}
	return &side{file: file, snap: s, fr: analysis.NewFrames(s.Stacks, o.AllFrames)}, nil
}

// stop ends the side's scan, once its replays are made.
func (s *side) stop() {
	if s.scan != nil {
		s.scan.Stop()
	}
}

// deviceSide replays one device of one side (nil: the device has no data
// there).
func (o *Options) deviceSide(s *side, device int) (*analysis.DiffSide, string, error) {
	if !slices.Contains(command.DevicesWithData(s.snap), device) {
		return nil, "", nil
	}
	rp, err := command.ReplayDeviceFor(o.IO.ErrOut, s.file, s.snap, device, analysis.Want{PeakAllocated: true, CompactFigures: true, LiveOnly: true, RuntimeSettings: o.RuntimeSettings, Captures: o.Captures, StartScan: s.scan})
	if err != nil {
		return nil, "", err
	}
	p, err := analysis.FindPeak(rp)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", s.file, err)
	}
	return &analysis.DiffSide{Replayed: rp, Frames: s.fr, Peak: p}, rp.Result.Version, nil
}

type deviceDiff struct {
	d               *analysis.DeviceDiff
	vBefore, vAfter string
	// aBefore, aAfter: what each side's exact figures assume
	// (replay.Result.Assumptions).
	aBefore, aAfter   []string
	grew, shrank      []analysis.StackDelta
	reshaped, unmoved int
}

func runDiff(opts *Options) error {
	if len(opts.Befores) == 0 {
		// One pair: the heap limit counts, per file, the figures and the
		// two states its replay holds (pairs in parallel keep the files'
		// size as a floor).
		command.NeedHeap(command.HeapNeed{PerEntry: command.FiguresPerEntry, PerBlock: 2 * command.StatePerBlock})
		opts.scanBeside = true
		out, err := compare(opts)
		if err != nil {
			return err
		}
		if opts.Format == report.JSON {
			return report.WriteJSON(opts.IO.Out, opts.Output.Envelope([]string{opts.Before, opts.After}, []report.FileResult{jsonDiff(opts, out)}))
		}
		return writeText(opts, out)
	}
	// Several pairs (the ranks of two runs): compared in parallel, each
	// pair's snapshots dropped once compared, reported in order.
	pairs := make([]string, len(opts.Befores))
	for i := range pairs {
		pairs[i] = strconv.Itoa(i)
	}
	cost := func(p string) int64 {
		i, _ := strconv.Atoi(p)
		return parallel.EstimateCost(opts.Befores[i]) + parallel.EstimateCost(opts.Afters[i])
	}
	pairOpts := func(i int) *Options {
		o := *opts
		o.Before, o.After, o.Befores, o.Afters = opts.Befores[i], opts.Afters[i], nil, nil
		return &o
	}
	// Each pair's warnings are kept and printed in pair order.
	warnings := make([]bytes.Buffer, len(pairs))
	results, err := parallel.Map(pairs, parallel.Options{Jobs: opts.Jobs, Cost: cost}, func(i int, _ string) ([]deviceDiff, error) {
		o := pairOpts(i)
		ios := *opts.IO
		ios.ErrOut = &warnings[i]
		o.IO = &ios
		return compare(o)
	})
	for i := range min(len(results)+1, len(warnings)) {
		if _, werr := warnings[i].WriteTo(opts.IO.ErrOut); werr != nil {
			return werr
		}
	}
	if err != nil {
		return err
	}
	if opts.Format == report.JSON {
		var files []string
		var pairs []report.FileResult
		for i, out := range results {
			files = append(files, opts.Befores[i], opts.Afters[i])
			pairs = append(pairs, jsonDiff(pairOpts(i), out))
		}
		return report.WriteJSON(opts.IO.Out, opts.Output.Envelope(files, pairs))
	}
	for i, out := range results {
		if i > 0 {
			fmt.Fprintln(opts.IO.Out)
		}
		if err := writeText(pairOpts(i), out); err != nil {
			return err
		}
	}
	return nil
}

// sameFile reports whether two names are one file.
func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// compare diffs opts.Before and opts.After device by device.
func compare(opts *Options) ([]deviceDiff, error) {
	before, err := opts.load(opts.Before)
	if err != nil {
		return nil, err
	}
	defer before.stop()
	// A file against itself (the same file under either name): loaded and
	// replayed once, both sides the same analysis.
	same := sameFile(opts.Before, opts.After)
	after := before
	if !same {
		if after, err = opts.load(opts.After); err != nil {
			return nil, err
		}
		defer after.stop()
	} else {
		after = &side{file: opts.After, snap: before.snap, fr: before.fr}
	}
	var devices []int
	if opts.Device >= 0 {
		if !slices.Contains(command.DevicesWithData(before.snap), opts.Device) && !slices.Contains(command.DevicesWithData(after.snap), opts.Device) {
			return nil, fmt.Errorf("device %d has no segments and no trace in %s or %s", opts.Device, opts.Before, opts.After)
		}
		devices = []int{opts.Device}
	} else {
		devices = command.DevicesWithData(before.snap)
		for _, d := range command.DevicesWithData(after.snap) {
			if !slices.Contains(devices, d) {
				devices = append(devices, d)
			}
		}
		slices.Sort(devices)
	}
	var out []deviceDiff
	for _, d := range devices {
		b, vb, err := opts.deviceSide(before, d)
		if err != nil {
			return nil, err
		}
		a, va := b, vb
		if !same {
			if a, va, err = opts.deviceSide(after, d); err != nil {
				return nil, err
			}
		}
		dd := deviceDiff{d: analysis.DiffDevices(d, b, a), vBefore: vb, vAfter: va}
		if b != nil {
			dd.aBefore = b.Replayed.Result.Assumptions
		}
		if a != nil {
			dd.aAfter = a.Replayed.Result.Assumptions
		}
		for _, s := range dd.d.Stacks {
			switch {
			case s.Delta() > 0:
				if len(dd.grew) < opts.Top {
					dd.grew = append(dd.grew, s)
				}
			case s.Delta() < 0:
				if len(dd.shrank) < opts.Top {
					dd.shrank = append(dd.shrank, s)
				}
			default:
				dd.reshaped++
			}
		}
		out = append(out, dd)
	}
	return out, nil
}

func writeText(opts *Options, devices []deviceDiff) error {
	doc := report.NewDoc(opts.IO.Out, opts.Format)
	if len(devices) == 0 {
		doc.Line("neither snapshot has segments or a trace")
	}
	for _, dd := range devices {
		d := dd.d
		doc.Section(fmt.Sprintf("device %d: %s → %s", d.Device, filepath.Base(opts.Before), filepath.Base(opts.After)))
		switch {
		case !d.InBefore:
			doc.Line("only in the after snapshot (PyTorch %s): the before snapshot has no data for this device", dd.vAfter)
		case !d.InAfter:
			doc.Line("only in the before snapshot (PyTorch %s): the after snapshot has no data for this device", dd.vBefore)
		default:
			doc.Line("before: %s (PyTorch %s); after: %s (PyTorch %s)", filepath.Base(opts.Before), dd.vBefore, filepath.Base(opts.After), dd.vAfter)
		}
		if d.Same() {
			doc.Line("no change: the same memory_stats, the same memory live at the peak by stack and block size, and the same segments")
		} else if note := coverageNote(d); note != "" {
			doc.Line("%s", note)
		}
		for _, side := range []struct {
			name string
			as   []string
		}{{"before", dd.aBefore}, {"after", dd.aAfter}} {
			for _, a := range side.as {
				doc.Line("note (%s): %s.", side.name, a)
			}
		}
		var key, other []analysis.Figure
		differ := 0
		for _, f := range d.Figures {
			switch {
			case f.KeyFigure:
				key = append(key, f)
			case f.Changed():
				differ++
				other = append(other, f)
			}
		}
		doc.Table(report.FigureTable(key, "Before", "After"))
		if d.InBefore && d.InAfter {
			b, a := d.UnusedBefore, d.UnusedAfter
			doc.Line("at the allocated peak: fragmentation (stranded in segments with live blocks) %s → %s (%s → %s); cached in free segments %s → %s (%s → %s)",
				report.Percent(b.Fragmentation), report.Percent(a.Fragmentation), report.Size(b.Stranded), report.Size(a.Stranded),
				report.Percent(b.CachedShare), report.Percent(a.CachedShare), report.Size(b.Cached), report.Size(a.Cached))
		}
		switch {
		case differ > 0 && opts.AllStats:
			doc.Line("the other memory_stats keys that differ:")
			doc.Table(report.FigureTable(other, "Before", "After"))
		case differ > 0:
			doc.Line("%s of memory_stats differ too (--all-stats lists them)", report.Plural(differ, "other key", "other keys"))
		}
		if d.Same() {
			continue
		}
		doc.Gap()
		grew, shrank := 0, 0
		for _, s := range d.Stacks {
			switch {
			case s.Delta() > 0:
				grew++
			case s.Delta() < 0:
				shrank++
			}
		}
		peakText := func(m *analysis.Moment) string {
			if m == nil {
				return "-"
			}
			if m.Phase != "" {
				return report.Size(m.Allocated) + " in " + m.Phase
			}
			return report.Size(m.Allocated)
		}
		doc.Line("live at the peak of allocated memory (%s → %s), by allocation stack, matched by frames and block sizes: %d grew, %d shrank, %d kept their bytes but changed block sizes, %d unchanged",
			peakText(d.PeakBefore), peakText(d.PeakAfter), grew, shrank, dd.reshaped, d.Unchanged)
		for _, part := range []struct {
			title  string
			stacks []analysis.StackDelta
		}{{"grew the most", dd.grew}, {"shrank the most", dd.shrank}} {
			if len(part.stacks) == 0 {
				continue
			}
			doc.Line("%s:", part.title)
			doc.Table(report.StackDeltaTable(part.stacks, opts.Stacks))
			if opts.Stacks {
				for i, s := range part.stacks {
					doc.Line("#%d: %s", i+1, report.SignedSize(s.Delta()))
					doc.Pre(report.StackLines(s.Stack, s.HiddenFrames, opts.AllFrames))
				}
			}
		}
		if len(d.Segments) > 0 {
			doc.Line("segments whose number differs in the final states (by pool and size):")
			doc.Table(report.SegmentDeltaTable(d.Segments))
		} else if d.InBefore && d.InAfter {
			doc.Line("segments: the same number of each pool and size in the final states")
		}
	}
	return doc.Err()
}

// coverageNote warns when the two traces do not cover the same kind of
// history, which makes counters and peaks compare unlike things.
func coverageNote(d *analysis.DeviceDiff) string {
	if d.CoverageBefore == d.CoverageAfter || !d.InBefore || !d.InAfter {
		return ""
	}
	what := func(c string) string {
		switch c {
		case replay.CoverageNone:
			return "has no trace (peaks are its final state; the allocated/freed/num_* counters are unknown, 0)"
		case replay.CoveragePartial:
			return "has a trace that starts mid-run (peaks and counters cover the recorded window only)"
		}
		return "has a trace from an empty allocator"
	}
	return fmt.Sprintf("note: the before snapshot %s, the after snapshot %s; compare peaks and counters with that in mind",
		what(d.CoverageBefore), what(d.CoverageAfter))
}

type jsonStack struct {
	Key          string               `json:"key"`
	Label        string               `json:"label"`
	Change       int64                `json:"change_bytes"`
	BeforeBytes  int64                `json:"before_bytes"`
	AfterBytes   int64                `json:"after_bytes"`
	BeforeBlocks int                  `json:"before_blocks"`
	AfterBlocks  int                  `json:"after_blocks"`
	Sizes        []analysis.SizeDelta `json:"sizes"`
	Site         report.FrameJSON     `json:"site"`
	Stack        []report.FrameJSON   `json:"stack,omitempty"`
}

type jsonDevice struct {
	Device              int                     `json:"device"`
	InBefore            bool                    `json:"in_before"`
	InAfter             bool                    `json:"in_after"`
	TorchBefore         string                  `json:"torch_version_before,omitempty"`
	TorchAfter          string                  `json:"torch_version_after,omitempty"`
	Same                bool                    `json:"same"`
	CoverageBefore      string                  `json:"coverage_before,omitempty"`
	CoverageAfter       string                  `json:"coverage_after,omitempty"`
	MemoryStats         []analysis.Figure       `json:"memory_stats"`
	FragmentationBefore float64                 `json:"fragmentation_before"`
	FragmentationAfter  float64                 `json:"fragmentation_after"`
	UnusedBefore        replay.Unused           `json:"at_peak_allocated_before"`
	UnusedAfter         replay.Unused           `json:"at_peak_allocated_after"`
	PeakBefore          *analysis.Moment        `json:"peak_before"`
	PeakAfter           *analysis.Moment        `json:"peak_after"`
	Stacks              []jsonStack             `json:"stacks"`
	UnchangedStacks     int                     `json:"unchanged_stacks"`
	Segments            []analysis.SegmentDelta `json:"segments"`
	// AssumptionsBefore and AssumptionsAfter are what each side's exact
	// figures assume that its recording does not show (absent when none).
	AssumptionsBefore []string `json:"assumptions_before,omitempty"`
	AssumptionsAfter  []string `json:"assumptions_after,omitempty"`
}

// jsonDiff is one pair's result: File is the snapshot compared with
// Before.
func jsonDiff(opts *Options, devices []deviceDiff) report.FileResult {
	jds := []jsonDevice{}
	for _, dd := range devices {
		d := dd.d
		jd := jsonDevice{
			Device: d.Device, InBefore: d.InBefore, InAfter: d.InAfter, TorchBefore: dd.vBefore, TorchAfter: dd.vAfter,
			Same: d.Same(), CoverageBefore: d.CoverageBefore, CoverageAfter: d.CoverageAfter, MemoryStats: d.Figures, FragmentationBefore: d.UnusedBefore.Fragmentation,
			FragmentationAfter: d.UnusedAfter.Fragmentation, UnusedBefore: d.UnusedBefore, UnusedAfter: d.UnusedAfter, PeakBefore: d.PeakBefore, PeakAfter: d.PeakAfter,
			Stacks: []jsonStack{}, UnchangedStacks: d.Unchanged, Segments: d.Segments,
			AssumptionsBefore: dd.aBefore, AssumptionsAfter: dd.aAfter,
		}
		if jd.Segments == nil {
			jd.Segments = []analysis.SegmentDelta{}
		}
		groups := make([]analysis.Group, len(d.Stacks))
		for i, s := range d.Stacks {
			groups[i] = analysis.Group{Key: s.Key, Site: s.Site, Stack: s.Stack, FreedAt: strings.HasPrefix(s.Key, analysis.FreedAtPrefix), Label: s.Label}
		}
		labels := report.GroupLabels(groups, analysis.ByStack)
		for i, s := range d.Stacks {
			js := jsonStack{Key: s.Key, Label: labels[i], Change: s.Delta(), BeforeBytes: s.BeforeBytes, AfterBytes: s.AfterBytes,
				BeforeBlocks: s.BeforeCount, AfterBlocks: s.AfterCount, Sizes: s.Sizes, Site: report.FrameRecord(s.Site)}
			if opts.Stacks {
				js.Stack = report.FrameRecords(s.Stack)
			}
			jd.Stacks = append(jd.Stacks, js)
		}
		jds = append(jds, jd)
	}
	return report.FileResult{File: opts.After, Before: opts.Before, Devices: jds}
}
