// Package stats is `memstat stats`: torch.cuda.memory_stats() of a
// snapshot, replayed from its trace, with the headline, the
// memory_summary-style table and what the figures cover.
package stats

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/parallel"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/report"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Options are `memstat stats`'s inputs.
type Options struct {
	IO     *iostreams.IOStreams
	Getenv func(string) string
	Files  []string
	Output command.OutputFlags
	// Format is the resolved output format.
	Format report.Format
	// Jobs caps the files decoded and replayed at once (0: one per CPU,
	// within the memory budget).
	Jobs int
	// Summary prints only the table across files (ranks).
	Summary bool
	// RuntimeSettings: the program changed allocator settings at runtime
	// (--runtime-settings, replay.Options.RuntimeSettings).
	RuntimeSettings bool
	// Captures: the program captured CUDA graphs or used a MemPool
	// (--captures, replay.Options.Captures).
	Captures bool
}

// NewCmdStats returns the stats command. runF replaces runStats in tests
// of flag parsing.
func NewCmdStats(f *command.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IO, Getenv: f.Getenv}
	cmd := &cobra.Command{
		Use:   "stats FILE...",
		Short: "torch.cuda.memory_stats() of a snapshot, replayed from its trace",
		Long: `Print, for each snapshot and each device with segments or a trace, the
figures torch.cuda.memory_stats() would have returned at the moment the
snapshot was taken: the headline (peak allocated and reserved memory, and
how much of the reserved memory no tensor used when it peaked), a table laid
out like torch.cuda.memory_summary(), and the counters.

The figures come from replaying the snapshot's trace through memstat's model
of the CUDA caching allocator, decision for decision. A trace that starts
mid-run (PyTorch keeps only the last max_entries events) gets its starting
state rebuilt from the trace and the final segments; its peaks are then over
the recorded window, and the allocated/freed/num_* counters count only the
window. A snapshot without a trace gives its final state. A line under the
headline says which case applies, and whether the replayed final state equals
the snapshot's segments.

Several files (one snapshot per rank of a distributed job) are decoded and
replayed in parallel, as many at once as --jobs and the memory available
allow (about three times each file's size), and reported in the order given,
followed by a table across them: each rank's peak allocated and reserved
memory, fragmentation and OOMs, their minimum, median and maximum, and the
rank furthest from the median. --summary prints only that table.

--json prints one object: {"files": [{"file", "devices": [{"device",
"memory_stats", "headline", "history", "agreement"}]}], "ranks": {...}},
where memory_stats has exactly the keys and values torch.cuda.memory_stats()
returns for the PyTorch version the file was written by, and "ranks" (for
more than one file or device) is the table across them.`,
		Example: `  memstat stats snapshot.pickle
  memstat stats --json a.pickle b.pickle
  memstat stats --format markdown snapshot.pickle
  memstat stats --summary rank*.pickle`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return command.FlagErrorf("no snapshot given: memstat stats FILE...")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Files = args
			if opts.Jobs < 0 {
				return command.FlagErrorf("invalid --jobs %d: give a positive number, or 0 for one per CPU", opts.Jobs)
			}
			format, err := opts.Output.Resolve()
			if err != nil {
				return err
			}
			opts.Format = format
			if runF != nil {
				return runF(opts)
			}
			return runStats(opts)
		},
	}
	command.AddOutputFlags(cmd, &opts.Output, report.Text, report.JSON, report.Markdown)
	cmd.Flags().IntVar(&opts.Jobs, "jobs", 0, "files to decode and replay at once (0: one per CPU, within the available memory)")
	cmd.Flags().BoolVar(&opts.Summary, "summary", false, "print only the table across files (ranks)")
	command.AddRuntimeSettingsFlag(cmd, &opts.RuntimeSettings)
	command.AddCapturesFlag(cmd, &opts.Captures)
	return cmd
}

// fileStats is one file's results.
type fileStats struct {
	File    string
	Devices []*replay.Result
	// Sparklines holds, per device, allocated memory after each trace
	// entry, drawn under the headline on a terminal only.
	Sparklines [][]int64
	// Warnings go to stderr, in file order.
	Warnings []string
}

func runStats(opts *Options) error {
	popts := parallel.Options{Jobs: opts.Jobs, Budget: parallel.DefaultBudget()}
	userLimit := opts.Getenv != nil && opts.Getenv("GOMEMLIMIT") != ""
	var loaded func(*snapshot.Snapshot)
	aside := false
	spark := opts.IO.IsStdoutTTY() && !opts.Summary
	switch {
	case userLimit:
	case len(opts.Files) > 1:
		// Several files at once: let the garbage collector work harder
		// rather than let their heaps together outgrow the budget.
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(popts.Budget))
	case len(opts.Files) == 1:
		// One file: keep the heap near what loading and replaying it
		// need (see parallel.HeapLimit).
		h := parallel.LimitHeapToFile(opts.Files[0], popts.Budget)
		defer h.Release()
		if st, err := os.Stat(opts.Files[0]); err == nil && st.Mode().IsRegular() && st.Size() <= startScanMaxFile {
			aside = true
		}
		loaded = func(s *snapshot.Snapshot) {
			entries, blocks := 0, 0
			for _, tr := range s.Traces {
				entries += tr.Len()
			}
			for i := range s.Segments {
				blocks += len(s.Segments[i].Blocks)
			}
			if spark {
				// The sparkline: allocated memory after each entry.
				h.Keep(int64(entries) * 8)
			}
			h.Loaded(entries, blocks)
		}
	}
	files, err := parallel.Map(opts.Files, popts, func(_ int, fn string) (fileStats, error) {
		return statsOf(fn, spark, aside, opts.RuntimeSettings, opts.Captures, loaded)
	})
	// Warnings of the files before a failed one come first, as when the
	// files are read one after another.
	for _, f := range files {
		for _, w := range f.Warnings {
			fmt.Fprintln(opts.IO.ErrOut, w)
		}
	}
	if err != nil {
		return err
	}
	ranks := rankSummary(files)
	if opts.Format == report.JSON {
		return report.WriteJSON(opts.IO.Out, jsonStats(opts, files, ranks, opts.Summary))
	}
	if !opts.Summary {
		if err := writeText(opts.IO.Out, files, opts.Format, opts.IO.TerminalWidth()); err != nil {
			return err
		}
	}
	if ranks == nil {
		return nil
	}
	if !opts.Summary {
		fmt.Fprintln(opts.IO.Out)
	}
	return writeRanks(opts.IO.Out, ranks, opts.Format)
}

// startScanMaxFile is the largest file whose start rebuild's pass runs
// beside its reading (statsOf's aside): the pass's address sets (some 11
// bytes a trace entry) then live beside the decoder's peak instead of
// after it. Up to the heap limit's 256 MiB floor the two stay under the
// limit; above it the sets raise the peak (torch-1GB: 477 -> 544 MB, past
// half the file).
const startScanMaxFile = 256 << 20

// statsOf loads one file and replays every device that has segments or a
// trace; the snapshot is dropped when it returns, only the results stay.
// With spark, it keeps allocated memory after each entry for the
// sparkline. loaded, when not nil, is told of the snapshot once read.
// With aside, the start rebuild's pass over the trace runs beside the
// reading (replay.StartScan), on the core the decoder leaves idle.
func statsOf(fn string, spark, aside, runtimeSettings, captures bool, loaded func(*snapshot.Snapshot)) (fileStats, error) {
	var scan *replay.StartScan
	var lo snapshot.LoadOptions
	if aside {
		scan = replay.NewStartScan()
		defer scan.Stop()
		lo.TraceGrown = scan.Grown
	}
	snap, err := snapshot.LoadWith(fn, lo)
	if err != nil {
		return fileStats{}, err
	}
	if loaded != nil {
		loaded(snap)
	}
	fs := fileStats{File: fn, Warnings: command.WarningLines(fn, snap)}
	for d := range snap.Devices() {
		if snap.Trace(d).Len() == 0 && len(snap.DeviceSegments(d)) == 0 {
			continue
		}
		ro := replay.Options{Device: d, RuntimeSettings: runtimeSettings, Captures: captures, StartScan: scan}
		var line []int64
		if spark {
			// One value an entry: sized once, so that the heap limit's
			// estimate holds (doubling would hold up to three times it).
			line = make([]int64, 0, snap.Trace(d).Len())
			ro.OnEvent = func(_ int, _ snapshot.TraceEntry, a *allocator.Allocator) {
				line = append(line, a.Stats().AllocatedBytes[allocator.PoolAll].Current)
			}
		}
		r, err := replay.New(snap, ro)
		if err != nil {
			return fileStats{}, fmt.Errorf("%s: device %d: %w", fn, d, err)
		}
		res, err := r.Run()
		if err != nil {
			return fileStats{}, fmt.Errorf("%s: device %d: %w", fn, d, err)
		}
		fs.Warnings = append(fs.Warnings, command.SummarizeWarnings(fmt.Sprintf("%s: device %d", fn, d), res.Warnings)...)
		fs.Devices = append(fs.Devices, res)
		fs.Sparklines = append(fs.Sparklines, line)
	}
	if len(fs.Devices) == 0 {
		fs.Warnings = append(fs.Warnings, fmt.Sprintf("memstat: %s: no device has segments or a trace", fn))
	}
	return fs, nil
}

type jsonDevice struct {
	Device       int              `json:"device"`
	TorchVersion string           `json:"torch_version"`
	MemoryStats  map[string]int64 `json:"memory_stats"`
	// Bounds are the memory_stats figures the snapshot does not
	// determine (not in MemoryStats): {"min": 3, "max": null}.
	Bounds map[string]replay.Bound `json:"bounds"`
	// Assumptions are what the exact figures assume that the recording
	// does not show (absent when none).
	Assumptions []string          `json:"assumptions,omitempty"`
	Headline    report.Headline   `json:"headline"`
	History     replay.History    `json:"history"`
	Agreement   *replay.Agreement `json:"agreement"`
	// PrivatePools: per-pool figures, when the device has private pools.
	PrivatePools *report.PoolJSON `json:"private_pools,omitempty"`
}

func jsonStats(opts *Options, files []fileStats, ranks *ranks, summary bool) any {
	env := opts.Output.Envelope(opts.Files, nil)
	if r := ranks.json(); r != nil {
		env.Summary = struct {
			Ranks *jsonRanks `json:"ranks"`
		}{r}
	}
	if summary {
		return env
	}
	for _, f := range files {
		jds := []jsonDevice{}
		for _, res := range f.Devices {
			jds = append(jds, jsonDevice{
				Device:       res.Device,
				TorchVersion: res.Version,
				MemoryStats:  res.MemoryStatsMap(),
				Bounds:       boundsOrEmpty(res.Bounds),
				Assumptions:  res.Assumptions,
				Headline:     report.HeadlineOf(res),
				History:      res.History,
				Agreement:    res.Agreement,
				PrivatePools: report.PoolsJSON(res),
			})
		}
		env.Results = append(env.Results, report.FileResult{File: f.File, Devices: jds})
	}
	return env
}

func writeText(w io.Writer, files []fileStats, format report.Format, width int) error {
	md := format == report.Markdown
	first := true
	for _, f := range files {
		for i, res := range f.Devices {
			if !first {
				fmt.Fprintln(w)
			}
			first = false
			title := report.DeviceTitle(f.File, res.Device, res.Version)
			if md {
				fmt.Fprintf(w, "### %s\n\n", report.Escape(title))
			} else {
				fmt.Fprintln(w, report.Escape(title))
			}
			para := func(s string) {
				if md {
					fmt.Fprintf(w, "%s\n\n", report.Escape(s))
				} else {
					fmt.Fprintln(w, report.Escape(s))
				}
			}
			para(report.HeadlineText(res))
			// On a terminal only: the sparkline of allocated memory.
			if i < len(f.Sparklines) && len(f.Sparklines[i]) > 1 {
				para(report.SparklineText(f.Sparklines[i], min(max(width-45, 20), 80)))
			}
			para(report.HistoryLine(res))
			para(report.AgreementLine(res))
			if !md {
				fmt.Fprintln(w)
			}
			get := res.Stat
			if err := report.StatsTable(get, res.Bounds).Render(w, format); err != nil {
				return err
			}
			fmt.Fprintln(w)
			if err := counterTable(res).Render(w, format); err != nil {
				return err
			}
			if pt := report.PoolTable(res); pt != nil {
				fmt.Fprintln(w)
				para(report.PoolLine(res))
				if !md {
					fmt.Fprintln(w)
				}
				if err := pt.Render(w, format); err != nil {
					return err
				}
			}
			if notes := report.BoundNotes(res); len(notes) > 0 {
				fmt.Fprintln(w)
				if md {
					fmt.Fprintf(w, "Notes:\n\n")
				} else {
					fmt.Fprintln(w, "Notes:")
				}
				for _, n := range notes {
					fmt.Fprintf(w, "- %s\n", n)
				}
			}
		}
	}
	return nil
}

// counterTable lists memory_stats' plain counters that the version has.
func counterTable(res *replay.Result) *report.Table {
	t := &report.Table{Columns: []report.Column{
		{Name: "Counter", Key: "counter"},
		{Name: "Key", Key: "key"},
		{Name: "Value", Key: "value", Align: report.Right},
	}}
	have := make(map[string]bool, len(res.MemoryStats)+len(res.Bounds))
	for _, kv := range res.MemoryStats {
		have[kv.Key] = true
	}
	for k := range res.Bounds {
		have[k] = true
	}
	for _, c := range report.CounterRows {
		if have[c.Stat] {
			t.Add(report.Str(c.Label), report.Str(c.Stat), report.CounterCell(res, c.Stat))
		}
	}
	if have["max_split_size"] {
		t.Add(report.Str("Max split size"), report.Str("max_split_size"), report.CounterCell(res, "max_split_size"))
	}
	return t
}

// boundsOrEmpty makes a device without bounds write "bounds": {}.
func boundsOrEmpty(b map[string]replay.Bound) map[string]replay.Bound {
	if b == nil {
		return map[string]replay.Bound{}
	}
	return b
}
