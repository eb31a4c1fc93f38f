// Package advise is `memstat advise`: which PYTORCH_CUDA_ALLOC_CONF a run
// should use, found by replaying its trace under candidate settings, and
// whether it fits a smaller GPU.
package advise

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/pkg/advise"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/report"
)

// Options are `memstat advise`'s inputs.
type Options struct {
	IO     *iostreams.IOStreams
	File   string
	Output command.OutputFlags
	Format report.Format

	DeviceMemory string
	Device       int
	Top          int
	Jobs         int
	TorchVersion string

	capacity int64
	version  allocator.Version
}

// NewCmdAdvise returns the advise command. runF replaces runAdvise in
// tests of flag parsing.
func NewCmdAdvise(f *command.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "advise FILE [--device-memory SIZE] [--device N] [--top N] [--jobs N]",
		Short: "Find the PYTORCH_CUDA_ALLOC_CONF that lowers peak memory, and whether a run fits a smaller GPU",
		Long: `Replay the snapshot's trace through memstat's simulation of the CUDA caching
allocator under candidate settings and print the PYTORCH_CUDA_ALLOC_CONF line
to use, with the figures behind it and why it helps.

The candidates change one knob of the recorded settings at a time:
expandable_segments:True; max_split_size_mb at the byte-weighted quartiles and
90th percentile of the trace's large request sizes; roundup_power2_divisions
2, 4, 8, 16 and the list form [256:1,512:2,1024:4,>:8];
garbage_collection_threshold 0.6 and 0.8 under per_process_memory_fraction
0.99 (PyTorch 2.10+, with a known device memory). Then the best of each of the
three leading knobs are combined, in pairs and all three.

Every candidate replays the same requests (what-if mode: the simulator
decides everything; requests that run out of memory are counted and their
frees skipped). They are ranked by OOMs (fewest first), then peak reserved
memory, then fragmentation at the allocated peak, then fewest changes. The
recorded settings are replayed the same way, as the baseline; a setting is
recommended only when it has fewer OOMs or less peak reserved memory.

The device memory is the recorded one when the trace has an oom entry (its
device_free plus the memory reserved then; the answer then says whether a
setting would have avoided the OOM), unlimited otherwise. --device-memory
SIZE replays every setting on a GPU of that size and says whether the run
fits (24GiB, 80GB, ...). Candidates run in parallel, --jobs at a time
(default: GOMAXPROCS).`,
		Example: `  memstat advise snapshot.pickle
  memstat advise snapshot.pickle --device-memory 24GiB
  memstat advise snapshot.pickle --json --top 5`,
		Args: command.OneSnapshot("memstat advise FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			if err := opts.resolve(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runAdvise(opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.DeviceMemory, "device-memory", "", "GPU memory to replay every setting with, e.g. 24GiB, 80GB (default: as recorded)")
	fl.IntVar(&opts.Device, "device", -1, "advise on this device only (default: every device with a trace)")
	fl.IntVar(&opts.Top, "top", 10, "settings to list in the ranking (the recorded settings are always listed)")
	fl.IntVar(&opts.Jobs, "jobs", 0, "replays to run at once (default: GOMAXPROCS)")
	fl.StringVar(&opts.TorchVersion, "torch-version", "", "PyTorch release whose allocator rules to apply (default: guessed from the file's format)")
	command.AddOutputFlags(cmd, &opts.Output, report.Text, report.JSON, report.Markdown)
	return cmd
}

func (o *Options) resolve() error {
	format, err := o.Output.Resolve()
	if err != nil {
		return err
	}
	o.Format = format
	if o.DeviceMemory != "" {
		if o.capacity, err = command.ParseDeviceMemory(o.DeviceMemory); err != nil {
			return err
		}
	}
	if o.TorchVersion != "" {
		v, err := allocator.ParseVersion(o.TorchVersion)
		if err != nil {
			return command.FlagErrorf("--torch-version: %v", err)
		}
		o.version = v
	}
	if o.Top < 1 {
		return command.FlagErrorf("--top must be at least 1")
	}
	if o.Jobs < 0 {
		return command.FlagErrorf("--jobs must not be negative")
	}
	return nil
}

func runAdvise(opts *Options) error {
	snap, err := command.LoadSnapshot(opts.IO.ErrOut, opts.File)
	if err != nil {
		return err
	}
	var advice []*advise.Advice
	for d := range snap.Devices() {
		if opts.Device >= 0 && d != opts.Device || snap.Trace(d).Len() == 0 {
			continue
		}
		a, err := advise.Advise(snap, advise.Options{Device: d, Version: opts.version, DeviceMemory: opts.capacity, Jobs: opts.Jobs})
		if err != nil {
			return fmt.Errorf("%s: device %d: %w", opts.File, d, err)
		}
		advice = append(advice, a)
	}
	if len(advice) == 0 {
		if opts.Device >= 0 {
			return fmt.Errorf("%s: device %d: %w", opts.File, opts.Device, advise.ErrNoTrace)
		}
		return fmt.Errorf("%s: %w", opts.File, advise.ErrNoTrace)
	}
	if opts.Format == report.JSON {
		return report.WriteJSON(opts.IO.Out, jsonAdvice(opts, advice))
	}
	return writeText(opts.IO.Out, opts, advice)
}

type jsonDevice struct {
	*advise.Advice
	Verdict      string   `json:"verdict"`
	Use          string   `json:"use"`
	SimplerLine  string   `json:"simpler_line"`
	MemoryAnswer string   `json:"memory_answer"`
	Why          []string `json:"why"`
}

func jsonAdvice(opts *Options, advice []*advise.Advice) any {
	jds := []jsonDevice{}
	for _, a := range advice {
		why := a.Why()
		if why == nil {
			why = []string{}
		}
		jds = append(jds, jsonDevice{a, a.Verdict(), use(a), a.SimplerLine(), a.MemoryAnswer(), why})
	}
	env := opts.Output.Envelope([]string{opts.File}, []report.FileResult{{File: opts.File, Devices: jds}})
	env.Summary = struct {
		Ranking string `json:"ranking"`
	}{advise.RankingNote}
	return env
}

// use is the environment line of the setting to use.
func use(a *advise.Advice) string {
	if a.Best != nil {
		return advise.EnvLine(a.Best.Conf)
	}
	return advise.EnvLine(a.RecordedConf)
}

func writeText(w io.Writer, opts *Options, advice []*advise.Advice) error {
	md := opts.Format == report.Markdown
	para := func(s string) {
		if md {
			fmt.Fprintf(w, "%s\n\n", report.Escape(s))
		} else {
			fmt.Fprintln(w, report.Escape(s))
		}
	}
	for i, a := range advice {
		if i > 0 {
			fmt.Fprintln(w)
		}
		title := report.DeviceTitle(opts.File, a.Device, a.TorchVersion)
		if md {
			fmt.Fprintf(w, "### %s\n\n", report.Escape(title))
		} else {
			fmt.Fprintln(w, report.Escape(title))
		}
		para(fmt.Sprintf("replayed %d settings on %s; recorded with %s; %s", len(a.Ranked), report.DeviceMemoryText(a.DeviceMemory, a.DeviceMemoryBy, "--device-memory SIZE asks whether it fits a GPU"),
			report.AllocConfText(a.RecordedConf), historyText(a)))
		if !md {
			fmt.Fprintln(w)
		}
		para(a.Verdict())
		if md {
			fmt.Fprintf(w, "```sh\n%s\n```\n\n", report.Escape(use(a)))
		} else {
			fmt.Fprintf(w, "  %s\n", report.Escape(use(a)))
		}
		if l := a.SimplerLine(); l != "" {
			if md {
				para(l)
			} else {
				fmt.Fprintln(w, report.Escape(l))
			}
		}
		if m := a.MemoryAnswer(); m != "" {
			if !md {
				fmt.Fprintln(w)
			}
			para(m)
		}
		if a.Best != nil {
			if !md {
				fmt.Fprintln(w)
			}
			if err := comparison(a).Render(w, opts.Format); err != nil {
				return err
			}
			// A blank line ends a table, in markdown too (a line right
			// after a markdown table would be read as one more row).
			fmt.Fprintln(w)
			for _, why := range a.Why() {
				para("why: " + why)
			}
		}
		if !md {
			fmt.Fprintln(w)
		}
		if err := ranking(a, opts.Top).Render(w, opts.Format); err != nil {
			return err
		}
		fmt.Fprintln(w)
		para(advise.RankingNote)
		for _, s := range a.Skipped {
			para("not tried: " + s)
		}
	}
	return nil
}

func historyText(a *advise.Advice) string {
	if a.Coverage == replay.CoveragePartial {
		return fmt.Sprintf("%d trace entries starting mid-run (peaks are over the recorded window); every setting, the recorded one included, was replayed from a rebuilt start state whose live blocks were allocated afresh, while the recorded run's figures are the recording's (as memstat stats gives them)", a.Entries)
	}
	return fmt.Sprintf("%d trace entries from an empty allocator", a.Entries)
}

// comparison puts the recorded run (as `memstat stats` replays it) and
// the best setting side by side.
func comparison(a *advise.Advice) *report.Table {
	base, best := &a.Recorded, a.Best
	t := &report.Table{Columns: []report.Column{
		{Name: "", Key: "figure"},
		{Name: "Recorded run", Key: "recorded", Align: report.Right},
		{Name: "Best", Key: "best", Align: report.Right},
		{Name: "Change", Key: "change", Align: report.Right},
	}}
	bytes := func(label string, r, s int64) {
		t.Add(report.Str(label), report.Bytes(r), report.Bytes(s), report.DeltaBytes(s-r))
	}
	count := func(label string, r, s int64) {
		t.Add(report.Str(label), report.Int(r), report.Int(s), report.Cell{Raw: s - r, Text: fmt.Sprintf("%+d", s-r)})
	}
	bytes("Peak reserved", base.PeakReserved, best.PeakReserved)
	bytes("Peak allocated", base.PeakAllocated, best.PeakAllocated)
	bytes("Peak requested", base.PeakRequested, best.PeakRequested)
	t.Add(report.Str("Fragmentation at peak allocated"), report.Pct(base.Fragmentation), report.Pct(best.Fragmentation),
		report.Cell{Raw: best.Fragmentation - base.Fragmentation, Text: fmt.Sprintf("%+.1f pt", 100*(best.Fragmentation-base.Fragmentation))})
	count("OOMs", int64(base.OOMs), int64(best.OOMs))
	count("Segments created (cudaMalloc/map)", base.SegmentsCreated, best.SegmentsCreated)
	count("cudaMalloc retries", base.AllocRetries, best.AllocRetries)
	return t
}

// ranking lists the top settings, and the recorded settings wherever they
// rank.
func ranking(a *advise.Advice, top int) *report.Table {
	t := &report.Table{Columns: []report.Column{
		{Name: "Rank", Key: "rank", Align: report.Right},
		{Name: "Changes to the recorded settings", Key: "changes"},
		{Name: "OOMs", Key: "ooms", Align: report.Right},
		{Name: "First OOM", Key: "first_oom", Align: report.Right},
		{Name: "Peak reserved", Key: "peak_reserved", Align: report.Right},
		{Name: "vs recorded", Key: "change", Align: report.Right},
		{Name: "Fragmentation", Key: "fragmentation", Align: report.Right},
		{Name: "Segments", Key: "segments_created", Align: report.Right},
	}}
	for i := range a.Ranked {
		r := &a.Ranked[i]
		if i >= top && len(r.Changes) > 0 {
			continue
		}
		first := report.Cell{Raw: nil, Text: "-"}
		ooms := report.Int(int64(r.OOMs))
		switch {
		case r.StartFailed:
			// The starting state's failures come before the first entry.
			first = report.Cell{Raw: "start", Text: "start"}
			ooms.Text += " + start"
		case r.FirstOOM >= 0:
			first = report.Cell{Raw: r.FirstOOM, Text: fmt.Sprintf("event %d", r.FirstOOM)}
		}
		label := r.Label()
		if len(r.Changes) == 0 && a.Coverage == replay.CoveragePartial {
			label += ", replayed from the rebuilt start"
		}
		t.Add(report.Int(int64(r.Rank)), report.Str(label), ooms, first,
			report.Bytes(r.PeakReserved), report.DeltaBytes(r.PeakReserved-a.Baseline.PeakReserved),
			report.Pct(r.Fragmentation), report.Int(r.SegmentsCreated))
	}
	return t
}
