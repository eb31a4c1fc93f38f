// Package replay is `memstat replay`: replay a snapshot's trace through the
// allocator simulation and put what the real allocator did next to what the
// simulator does, with the recorded settings (a fidelity check) or with
// other ones (a what-if).
package replay

import (
	"fmt"
	"io"
	"maps"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/parallel"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/report"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Options are `memstat replay`'s inputs.
type Options struct {
	IO     *iostreams.IOStreams
	File   string
	Output command.OutputFlags
	Format report.Format

	AllocConf    string
	DeviceMemory string
	TorchVersion string
	WhatIf       bool
	Device       int
	// RuntimeSettings: the program changed allocator settings at runtime
	// (--runtime-settings): the follow replay's figures a switch could
	// change are bounds.
	RuntimeSettings bool
	// Captures: the program captured CUDA graphs or used a MemPool
	// (--captures): the follow replay's figures a capture could change
	// are bounds.
	Captures bool

	// Resolved from the flags.
	conf     *string
	capacity int64
	version  allocator.Version
}

// NewCmdReplay returns the replay command. runF replaces runReplay in
// tests of flag parsing.
func NewCmdReplay(f *command.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "replay FILE [--alloc-conf S] [--device-memory SIZE] [--torch-version V] [--what-if]",
		Short: "Replay a snapshot's trace: the real allocator and the simulator side by side",
		Long: `Replay the trace of a snapshot through memstat's simulation of PyTorch's
CUDA caching allocator and print, side by side, what the real allocator did
(recorded) and what the simulator does (simulated): segments created, peak
allocated and reserved memory, fragmentation, out-of-memory errors.

Recorded figures come from following the trace: the simulator makes every
decision itself, each one is checked against the recording, and where one
differed the recorded operation is applied instead. The fidelity line counts
the decisions that were the simulator's own: segment events reproduced with
the same size in the same order, and placements at the same offset of the
same segment.

Simulated figures come from the simulator alone, with its own addresses: the
trace's allocations and frees (matched by allocation, not by address) are
its input, the program's empty_cache() calls are kept, and a trace that
starts mid-run begins with its live blocks allocated afresh. Allocations that
run out of memory in the simulation are counted and their frees skipped.

With the recorded settings (the default) the simulated column shows how far
the simulator alone matches the recording. --alloc-conf, --device-memory or
--what-if make it a what-if: the same run under other settings, with no
fidelity claim. Sizes take binary units (KiB, MiB, GiB, or K, M, G) or
decimal ones (KB, MB, GB): 24GiB, 24G, 80GB, 512MiB.`,
		Example: `  memstat replay snapshot.pickle
  memstat replay snapshot.pickle --alloc-conf expandable_segments:True
  memstat replay snapshot.pickle --device-memory 24GiB --json
  memstat replay snapshot.pickle --alloc-conf max_split_size_mb:128 --torch-version 2.4`,
		Args: command.OneSnapshot("memstat replay FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			if err := opts.resolve(cmd); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runReplay(opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.AllocConf, "alloc-conf", "", "PYTORCH_CUDA_ALLOC_CONF to simulate instead of the recorded settings (a what-if)")
	fl.StringVar(&opts.DeviceMemory, "device-memory", "", "GPU memory the simulator may use, e.g. 24GiB, 80GB (a what-if; default: as recorded)")
	fl.StringVar(&opts.TorchVersion, "torch-version", "", "PyTorch release whose allocator rules to apply (default: guessed from the file's format)")
	fl.BoolVar(&opts.WhatIf, "what-if", false, "simulate with the recorded settings but claim no fidelity")
	fl.IntVar(&opts.Device, "device", -1, "replay only this device (default: every device with segments or a trace)")
	command.AddRuntimeSettingsFlag(cmd, &opts.RuntimeSettings)
	command.AddCapturesFlag(cmd, &opts.Captures)
	command.AddOutputFlags(cmd, &opts.Output, report.Text, report.JSON, report.Markdown)
	return cmd
}

func (o *Options) resolve(cmd *cobra.Command) error {
	format, err := o.Output.Resolve()
	if err != nil {
		return err
	}
	o.Format = format
	if o.TorchVersion != "" {
		v, err := allocator.ParseVersion(o.TorchVersion)
		if err != nil {
			return command.FlagErrorf("--torch-version: %v", err)
		}
		o.version = v
	}
	if cmd.Flags().Changed("alloc-conf") {
		o.conf = &o.AllocConf
		o.WhatIf = true
	}
	if o.DeviceMemory != "" {
		if o.capacity, err = command.ParseDeviceMemory(o.DeviceMemory); err != nil {
			return err
		}
		o.WhatIf = true
	}
	return nil
}

// deviceReplay is one device's pair of replays.
type deviceReplay struct {
	Recorded  *replay.Result
	Simulated *replay.Result
}

func runReplay(opts *Options) error {
	// The heap limit counts what replay holds besides the follow
	// replay's state: the what-if replay's simulator, live at the same
	// time (parallel's 128 bytes a block, and 4 an entry for what its
	// state gains while it runs), and the follow replay's rebuilt
	// starting state, kept for it (KeepStart: a 32-byte snapshot.Block
	// a block).
	command.NeedHeap(command.HeapNeed{PerEntry: 4, PerBlock: 128 + command.StatePerBlock})
	snap, scan, err := command.LoadSnapshotScanned(opts.IO.ErrOut, opts.File)
	if err != nil {
		return err
	}
	if scan != nil {
		defer scan.Stop()
	}
	v := opts.version
	if v == 0 {
		v = replay.GuessVersion(snap)
	}
	var cfg *allocator.Config
	if opts.conf != nil {
		c, err := allocator.ParseConfig(*opts.conf, v)
		if err == nil {
			err = c.CheckSimulated()
		}
		if err != nil {
			return command.FlagErrorf("--alloc-conf: %v (PyTorch %s)", err, v)
		}
		cfg = &c
	}
	var devices []deviceReplay
	for d := range snap.Devices() {
		if opts.Device >= 0 && d != opts.Device || snap.Trace(d).Len() == 0 && len(snap.DeviceSegments(d)) == 0 {
			continue
		}
		rec, sim, err := replayPair(snap, replay.Options{Device: d, Version: v, KeepStart: true, RuntimeSettings: opts.RuntimeSettings, Captures: opts.Captures, StartScan: scan},
			replay.Options{Device: d, Version: v, Mode: replay.WhatIf, Config: cfg, Capacity: opts.capacity})
		if err != nil {
			return fmt.Errorf("%s: device %d: %w", opts.File, d, err)
		}
		command.PrintWarnings(opts.IO.ErrOut, fmt.Sprintf("%s: device %d", opts.File, d), rec.Warnings)
		devices = append(devices, deviceReplay{rec, sim})
	}
	if len(devices) == 0 {
		if opts.Device >= 0 {
			return fmt.Errorf("%s: device %d has no segments and no trace", opts.File, opts.Device)
		}
		fmt.Fprintf(opts.IO.ErrOut, "memstat: %s: no device has segments or a trace\n", opts.File)
	}
	if opts.Format == report.JSON {
		return report.WriteJSON(opts.IO.Out, jsonReplay(opts, devices))
	}
	return writeText(opts.IO.Out, opts, devices)
}

// replayPair runs the follow replay (fo) and the what-if replay (wo) of
// one device side by side, on two cores: the what-if replay starts from
// the follow replay's rebuilt state instead of following the recording
// again itself, and steps behind it (replay.NewLive). It starts as soon
// as the state is rebuilt, allocating its copy of it while the follow
// replay seeds its simulator: it is the longer of the two. A failure of
// the follow replay is reported first, as when they ran one after the
// other.
func replayPair(snap *snapshot.Snapshot, fo, wo replay.Options) (rec, sim *replay.Result, err error) {
	var simErr error
	var done chan struct{}
	started := func(live *replay.Recording) {
		wo.Recording = live
		done = make(chan struct{})
		go func() {
			defer close(done)
			defer func() {
				if p := parallel.Recovered(recover()); p != nil {
					simErr = p
				}
			}()
			sim, simErr = run(snap, wo)
		}()
	}
	var recErr error
	func() {
		var fr *replay.Replay
		defer func() {
			if p := parallel.Recovered(recover()); p != nil {
				recErr = p
			}
		}()
		if fr, recErr = replay.NewLive(snap, fo, started); recErr != nil {
			return
		}
		// Whatever happens, the what-if replay must not wait for ever.
		defer fr.EndLive()
		rec, recErr = fr.Run()
	}()
	if done != nil {
		<-done
	}
	if recErr != nil {
		return nil, nil, recErr
	}
	if simErr != nil {
		return nil, nil, simErr
	}
	return rec, sim, nil
}

func run(snap *snapshot.Snapshot, o replay.Options) (*replay.Result, error) {
	r, err := replay.New(snap, o)
	if err != nil {
		return nil, err
	}
	return r.Run()
}

type pair struct {
	Recorded  int64 `json:"recorded"`
	Simulated int64 `json:"simulated"`
}

type jsonDevice struct {
	Device       int              `json:"device"`
	TorchVersion string           `json:"torch_version"`
	WhatIf       bool             `json:"what_if"`
	AllocConf    string           `json:"alloc_conf"`
	DeviceMemory int64            `json:"device_memory"`
	Coverage     string           `json:"coverage"`
	Entries      int              `json:"entries"`
	Recorded     map[string]int64 `json:"recorded"`
	// Bounds are the recorded figures the snapshot does not determine
	// (not in Recorded); the simulated column is exact for the
	// simulation.
	Bounds map[string]replay.Bound `json:"bounds"`
	// Assumptions are what the recorded column's exact figures assume
	// that the recording does not show (absent when none).
	Assumptions  []string         `json:"assumptions,omitempty"`
	Simulated    map[string]int64 `json:"simulated"`
	Segments     pair             `json:"segments_created"`
	PeakAlloc    pair             `json:"peak_allocated"`
	PeakReserved pair             `json:"peak_reserved"`
	Fidelity     *jsonFidelity    `json:"fidelity"`
	OOMs         pair             `json:"ooms"`
}

type jsonFidelity struct {
	SegmentEvents    replay.Tally `json:"segment_events"`
	Placements       replay.Tally `json:"placements"`
	ForcedOperations int64        `json:"forced_operations"`
	Divergences      int          `json:"divergences"`
}

func jsonReplay(opts *Options, devices []deviceReplay) any {
	jds := []jsonDevice{}
	for _, d := range devices {
		rec, sim := d.Recorded, d.Simulated
		jd := jsonDevice{
			Device:       rec.Device,
			TorchVersion: sim.Version,
			WhatIf:       opts.WhatIf,
			AllocConf:    sim.Settings,
			DeviceMemory: sim.Capacity,
			Coverage:     rec.History.Coverage,
			Entries:      rec.History.Entries,
			Recorded:     rec.MemoryStatsMap(),
			Bounds:       map[string]replay.Bound{},
			Assumptions:  rec.Assumptions,
			Simulated:    sim.MemoryStatsMap(),
			Segments:     pair{rec.SegmentsCreated, sim.SegmentsCreated},
			PeakAlloc:    pair{rec.PeakAllocated.Bytes, sim.PeakAllocated.Bytes},
			PeakReserved: pair{rec.PeakReserved.Bytes, sim.PeakReserved.Bytes},
			OOMs:         pair{int64(rec.OOMs.Recorded), int64(sim.OOMs.Simulated)},
		}
		maps.Copy(jd.Bounds, rec.Bounds)
		if !opts.WhatIf {
			f := rec.Fidelity
			jd.Fidelity = &jsonFidelity{f.SegmentEvents, f.Placements, f.ForcedOperations, f.Divergences}
		}
		jds = append(jds, jd)
	}
	return opts.Output.Envelope([]string{opts.File}, []report.FileResult{{File: opts.File, Devices: jds}})
}

func writeText(w io.Writer, opts *Options, devices []deviceReplay) error {
	md := opts.Format == report.Markdown
	para := func(s string) {
		if md {
			fmt.Fprintf(w, "%s\n\n", report.Escape(s))
		} else {
			fmt.Fprintln(w, report.Escape(s))
		}
	}
	for i, d := range devices {
		rec, sim := d.Recorded, d.Simulated
		if i > 0 {
			fmt.Fprintln(w)
		}
		title := report.DeviceTitle(opts.File, rec.Device, sim.Version)
		if md {
			fmt.Fprintf(w, "### %s\n\n", report.Escape(title))
		} else {
			fmt.Fprintln(w, report.Escape(title))
		}
		if opts.WhatIf {
			para(fmt.Sprintf("what-if: simulated with %s and %s; recorded with %s",
				report.AllocConfText(sim.Settings), report.DeviceMemoryText(sim.Capacity, sim.CapacitySource, ""), report.AllocConfText(rec.Settings)))
		} else {
			para(fmt.Sprintf("simulated with the recorded settings: %s and %s", report.AllocConfText(sim.Settings), report.DeviceMemoryText(sim.Capacity, sim.CapacitySource, "")))
		}
		if !md {
			fmt.Fprintln(w)
		}
		if err := sideBySide(rec, sim).Render(w, opts.Format); err != nil {
			return err
		}
		// A blank line ends the table, in markdown too (a line right after
		// a markdown table would be read as one more row).
		fmt.Fprintln(w)
		para(historyNote(rec))
		for _, n := range report.BoundNotes(rec) {
			para("note: " + n)
		}
		if opts.WhatIf {
			para("fidelity: not claimed (what-if: the recorded run had other settings)")
		} else {
			para(report.FidelityLine(rec))
		}
	}
	return nil
}

func historyNote(rec *replay.Result) string {
	switch rec.History.Coverage {
	case replay.CoverageNone:
		return "history: none: no trace, so both columns are the final state (the simulated one re-allocates its live blocks)"
	case replay.CoveragePartial:
		return fmt.Sprintf("history: partial: the trace starts mid-run (%d segments and %d live blocks before its first entry); the simulator alone starts by allocating those blocks afresh, and peaks are over the recorded window",
			rec.History.PreexistingSegments, rec.History.PreexistingBlocks)
	}
	return fmt.Sprintf("history: complete: %d trace entries from an empty allocator", rec.History.Entries)
}

func sideBySide(rec, sim *replay.Result) *report.Table {
	t := &report.Table{Columns: []report.Column{
		{Name: "", Key: "figure"},
		{Name: "Recorded", Key: "recorded", Align: report.Right},
		{Name: "Simulated", Key: "simulated", Align: report.Right},
		{Name: "Change", Key: "change", Align: report.Right},
	}}
	bytes := func(label string, r, s int64) {
		t.Add(report.Str(label), report.Bytes(r), report.Bytes(s), report.DeltaBytes(s-r))
	}
	count := func(label string, r, s int64) {
		t.Add(report.Str(label), report.Int(r), report.Int(s), report.Cell{Raw: s - r, Text: fmt.Sprintf("%+d", s-r)})
	}
	// unapplied: the recorded side left entries unapplied, so its peaks
	// and totals are bounds (no change is claimed on them).
	rb, unapplied := rec.Bounds["reserved_bytes.all.peak"]
	unapplied = unapplied && rb.Max == nil
	noChange := report.Cell{Raw: nil, Text: ""}
	if unapplied {
		t.Add(report.Str("Segments created (cudaMalloc/map)"), report.BoundCell(replay.Bound{}), report.Int(sim.SegmentsCreated), noChange)
	} else {
		count("Segments created (cudaMalloc/map)", rec.SegmentsCreated, sim.SegmentsCreated)
	}
	count("Segments at the end", int64(rec.FinalSegments), int64(sim.FinalSegments))
	if b, ok := rec.Bounds["allocated_bytes.all.peak"]; ok {
		// Block sizes known within bounds (a runtime settings switch):
		// its bound, and no change.
		b.Bytes = true
		t.Add(report.Str("Peak allocated"), report.BoundCell(b), report.Bytes(sim.PeakAllocated.Bytes), report.Cell{Raw: nil, Text: ""})
	} else {
		bytes("Peak allocated", rec.PeakAllocated.Bytes, sim.PeakAllocated.Bytes)
	}
	if unapplied {
		rb.Bytes = true
		t.Add(report.Str("Peak reserved"), report.BoundCell(rb), report.Bytes(sim.PeakReserved.Bytes), noChange)
	} else {
		bytes("Peak reserved", rec.PeakReserved.Bytes, sim.PeakReserved.Bytes)
	}
	share := func(label string, r, s float64) {
		if unapplied {
			// Taken in the state the replay reached: any share.
			t.Add(report.Str(label), report.Str("0.0%-100.0%"), report.Pct(s), noChange)
			return
		}
		t.Add(report.Str(label), report.Pct(r), report.Pct(s), report.Cell{Raw: s - r, Text: fmt.Sprintf("%+.1f pt", 100*(s-r))})
	}
	share("Fragmentation at peak allocated", rec.AtPeak.Fragmentation, sim.AtPeak.Fragmentation)
	share("Cached at peak allocated", rec.AtPeak.CachedShare, sim.AtPeak.CachedShare)
	// The recorded side's from its memory_stats: the final segments'
	// where the replay could not apply some entries.
	bytes("Reserved at the end", rec.Stat("reserved_bytes.all.current"), sim.Stats.ReservedBytes[allocator.PoolAll].Current)
	count("OOMs", int64(rec.OOMs.Recorded), int64(sim.OOMs.Simulated))
	if b, ok := rec.Bounds["num_alloc_retries"]; ok {
		// The recording does not determine it: its bound, and no change.
		t.Add(report.Str("cudaMalloc retries"), report.BoundCell(b), report.Int(sim.Stats.NumAllocRetries), report.Cell{Raw: nil, Text: ""})
	} else {
		count("cudaMalloc retries", rec.Stat("num_alloc_retries"), sim.Stats.NumAllocRetries)
	}
	return t
}
