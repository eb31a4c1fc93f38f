// Package check is `memstat check`: memory budgets for CI. It replays each
// snapshot, evaluates the rules (absolute limits, and limits on the
// increase over a baseline run), prints a pass/fail table, optionally
// writes JUnit XML and GitHub Actions annotations, and exits 1 when a rule
// fails.
package check

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/atomicfile"
	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/parallel"
	"github.com/memstat/memstat/pkg/check"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/report"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Options are `memstat check`'s inputs.
type Options struct {
	IO     *iostreams.IOStreams
	Getenv func(string) string
	Now    func() time.Time

	Files       []string
	Max         []string
	MaxIncrease []string
	Baselines   []string
	ConfigFile  string
	JUnit       string
	Device      int
	// Jobs caps the snapshots decoded and replayed at once (0: one per
	// CPU, within the memory available).
	Jobs   int
	Output command.OutputFlags
	Format report.Format
	// RuntimeSettings: the program changed allocator settings at runtime
	// (--runtime-settings): the figures a switch could change are bounds,
	// and a rule on one passes only if its whole bound does.
	RuntimeSettings bool
	// Captures: the program captured CUDA graphs or used a MemPool
	// (--captures): the figures a capture could change are bounds, and
	// a rule on one passes only if its whole bound does.
	Captures bool

	// Resolved: the rules in order (rules file first) and the baseline
	// of each file (nil entries: none).
	rules     []check.Rule
	baselines []string
}

// NewCmdCheck returns the check command. runF replaces runCheck in tests
// of flag parsing.
func NewCmdCheck(f *command.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IO, Getenv: f.Getenv, Now: f.Now}
	cmd := &cobra.Command{
		Use:   "check FILE... [--max KEY=VALUE]... [--baseline BASE --max-increase KEY=PCT|SIZE]... [--config FILE] [--junit FILE]",
		Short: "Fail when a snapshot breaks a memory budget (CI regression gate)",
		Long: `Replay each snapshot (one per rank, say) and check its memory figures
against limits: exit 0 when every rule holds, 1 when one fails, 2 for bad
input or a rule that names nothing.

KEY is a named figure or any torch.cuda.memory_stats() key:

  peak_allocated     highest memory held by tensors
  peak_reserved      highest memory the caching allocator held from the GPU
  current_allocated  memory held by tensors when the snapshot was taken
  current_reserved   memory reserved when the snapshot was taken
  fragmentation      share of reserved memory stranded at the allocated peak:
                     free inside segments that hold live blocks
  unused_at_peak     share of reserved memory no tensor used at the allocated
                     peak (stranded + cached in free segments)
  stranded_bytes_at_peak, cached_bytes_at_peak, unused_bytes_at_peak
                     the same in bytes (cached: what empty_cache() returns)
  ooms               out-of-memory errors in the trace
  segments           segments created (cudaMalloc and expandable-segment map calls)
  alloc_retries      cudaMalloc failures retried after freeing the cache
  allocated_bytes.all.peak, segment.large_pool.current, num_device_alloc, ...

--max KEY=VALUE is an absolute limit: a size for bytes (20GiB, 512MB), a
whole number for counts, a percentage for shares (fragmentation=30%).
--max-increase KEY=VALUE limits the increase over --baseline: a percentage
of the baseline's value (10%) or an amount (1GiB, 20); for a share a
percentage is in percentage points. Give --baseline once (every FILE is
compared with it) or once per FILE (in order). Devices are matched by
ordinal; a baseline with a single device serves every device.

Rules can live in a file kept in the repository (--config FILE; without
rules on the command line memstat reads ./.memstat.toml if it exists):

  baseline = "ci/baseline.pickle"   # relative to this file
  [max]
  peak_reserved = "20GiB"
  fragmentation = "30%"
  ooms = 0
  "allocated_bytes.all.peak" = "18GiB"
  [max-increase]
  peak_reserved = "10%"

Figures come from replaying the trace with the recorded settings (as
'memstat stats' prints them); a trace that starts mid-run gives peaks over
the recorded window only, and the table says so.

--junit FILE writes JUnit XML (a test suite per file, a test case per rule
and device) for CI test reports. Under GitHub Actions (GITHUB_ACTIONS=true)
each failed rule is also printed as an ::error annotation (on stdout, or on
stderr with --json).`,
		Example: `  memstat check snapshot.pickle --max peak_reserved=20GiB --max fragmentation=30%
  memstat check rank*.pickle --baseline main.pickle --max-increase peak_reserved=10% --junit memstat.xml
  memstat check snapshot.pickle --config ci/memstat.toml --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return command.FlagErrorf("no snapshot given: memstat check FILE... --max KEY=VALUE")
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
			if err := opts.resolve(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runCheck(opts)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&opts.Jobs, "jobs", 0, "snapshots to decode and replay at once (0: one per CPU, within the available memory)")
	fl.StringArrayVar(&opts.Max, "max", nil, "absolute limit KEY=VALUE, e.g. peak_reserved=20GiB, fragmentation=30%, ooms=0 (repeatable)")
	fl.StringArrayVar(&opts.MaxIncrease, "max-increase", nil, "limit on the increase over --baseline, KEY=PCT or KEY=AMOUNT, e.g. peak_reserved=10% (repeatable)")
	fl.StringArrayVar(&opts.Baselines, "baseline", nil, "baseline snapshot for --max-increase: once for all FILEs, or once per FILE")
	fl.StringVar(&opts.ConfigFile, "config", "", "rules file (default: ./"+check.DefaultConfigFile+" when no rule is given)")
	fl.StringVar(&opts.JUnit, "junit", "", "also write the results as JUnit XML to this file")
	fl.IntVar(&opts.Device, "device", -1, "check only this device (default: every device with segments or a trace)")
	command.AddRuntimeSettingsFlag(cmd, &opts.RuntimeSettings)
	command.AddCapturesFlag(cmd, &opts.Captures)
	command.AddOutputFlags(cmd, &opts.Output, report.Text, report.JSON, report.Markdown)
	return cmd
}

// resolve reads the rules and pairs files with baselines.
func (o *Options) resolve() error {
	cfgPath := o.ConfigFile
	if cfgPath == "" && len(o.Max) == 0 && len(o.MaxIncrease) == 0 {
		if _, err := os.Stat(check.DefaultConfigFile); err == nil {
			cfgPath = check.DefaultConfigFile
		}
	}
	cfgBaseline := ""
	if cfgPath != "" {
		cfg, err := check.ReadConfig(cfgPath)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%s: no such rules file", cfgPath)
			}
			return err
		}
		o.rules = append(o.rules, cfg.Rules...)
		cfgBaseline = cfg.Baseline
	}
	for _, spec := range o.Max {
		r, err := check.ParseRule(check.Max, spec, "--max "+spec)
		if err != nil {
			return err
		}
		o.rules = append(o.rules, r)
	}
	for _, spec := range o.MaxIncrease {
		r, err := check.ParseRule(check.MaxIncrease, spec, "--max-increase "+spec)
		if err != nil {
			return err
		}
		o.rules = append(o.rules, r)
	}
	if len(o.rules) == 0 {
		return command.FlagErrorf("no rules: give --max KEY=VALUE, --max-increase KEY=VALUE with --baseline, or --config FILE (or keep them in ./%s)", check.DefaultConfigFile)
	}
	bases := o.Baselines
	if len(bases) == 0 && cfgBaseline != "" {
		bases = []string{cfgBaseline}
	}
	needBase := false
	for _, r := range o.rules {
		needBase = needBase || r.Kind == check.MaxIncrease
	}
	switch {
	case needBase && len(bases) == 0:
		return command.FlagErrorf("--max-increase needs a baseline: --baseline FILE (or baseline = \"FILE\" in the rules file)")
	case len(bases) > 1 && len(bases) != len(o.Files):
		return command.FlagErrorf("%d baselines for %d files: give --baseline once, or once per file", len(bases), len(o.Files))
	}
	o.baselines = make([]string, len(o.Files))
	for i := range o.Files {
		switch {
		case !needBase:
		case len(bases) == 1:
			o.baselines[i] = bases[0]
		default:
			o.baselines[i] = bases[i]
		}
	}
	return nil
}

// replayed is one snapshot's figures by device.
type replayed struct {
	devices []int
	figures map[int]*check.Figures
	partial map[int]bool
	// assumptions: what each device's exact figures assume
	// (replay.Result.Assumptions).
	assumptions map[int][]string
	// warnings go to stderr in file order.
	warnings []string
}

// loadAll loads and replays files in parallel (within the memory
// available; only the figures are kept), prints their warnings in file
// order and returns the first failing file's error.
func (o *Options) loadAll(files []string) ([]*replayed, error) {
	reps, err := parallel.Map(files, parallel.Options{Jobs: o.Jobs}, func(_ int, fn string) (*replayed, error) {
		return load(fn, o.RuntimeSettings, o.Captures)
	})
	for _, r := range reps {
		if r != nil {
			for _, w := range r.warnings {
				fmt.Fprintln(o.IO.ErrOut, w)
			}
		}
	}
	return reps, err
}

func load(fn string, runtimeSettings, captures bool) (*replayed, error) {
	snap, err := snapshot.Load(fn)
	if err != nil {
		return nil, err
	}
	out := &replayed{figures: map[int]*check.Figures{}, partial: map[int]bool{}, assumptions: map[int][]string{}, warnings: command.WarningLines(fn, snap)}
	for d := range snap.Devices() {
		if snap.Trace(d).Len() == 0 && len(snap.DeviceSegments(d)) == 0 {
			continue
		}
		r, err := replay.New(snap, replay.Options{Device: d, RuntimeSettings: runtimeSettings, Captures: captures})
		if err != nil {
			return nil, fmt.Errorf("%s: device %d: %w", fn, d, err)
		}
		res, err := r.Run()
		if err != nil {
			return nil, fmt.Errorf("%s: device %d: %w", fn, d, err)
		}
		out.devices = append(out.devices, d)
		out.figures[d] = check.FiguresOf(res)
		out.partial[d] = res.History.Coverage == replay.CoveragePartial
		out.assumptions[d] = res.Assumptions
	}
	if len(out.devices) == 0 {
		return nil, fmt.Errorf("%s: no device has segments or a trace: nothing to check", fn)
	}
	return out, nil
}

// baselineFor picks the baseline device compared with device d.
func baselineFor(file string, d int, base *replayed) (int, error) {
	if _, ok := base.figures[d]; ok {
		return d, nil
	}
	if len(base.devices) == 1 {
		return base.devices[0], nil
	}
	return 0, fmt.Errorf("%s: no device %d to compare with (it has devices %s)", file, d, ints(base.devices))
}

func ints(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}

// checked is one device's outcomes and what the figures cover.
type checked struct {
	*check.Device
	Partial     bool
	Assumptions []string
}

func runCheck(opts *Options) error {
	inputs := append(append([]string{opts.ConfigFile, check.DefaultConfigFile}, opts.Files...), opts.Baselines...)
	if err := atomicfile.RefuseInput("--junit", opts.JUnit, inputs...); err != nil {
		return err
	}
	var baseFiles []string
	seen := map[string]bool{}
	for _, b := range opts.baselines {
		if b != "" && !seen[b] {
			seen[b] = true
			baseFiles = append(baseFiles, b)
		}
	}
	baseReps, err := opts.loadAll(baseFiles)
	if err != nil {
		return err
	}
	bases := map[string]*replayed{}
	for i, b := range baseFiles {
		bases[b] = baseReps[i]
	}
	reps, err := opts.loadAll(opts.Files)
	if err != nil {
		return err
	}
	var results []checked
	for i, fn := range opts.Files {
		rep := reps[i]
		found := false
		for _, d := range rep.devices {
			if opts.Device >= 0 && d != opts.Device {
				continue
			}
			found = true
			var base *check.Baseline
			if b := opts.baselines[i]; b != "" {
				bd, err := baselineFor(b, d, bases[b])
				if err != nil {
					return err
				}
				base = &check.Baseline{File: b, Device: bd, Figures: bases[b].figures[bd]}
			}
			dev, err := check.Evaluate(fn, d, rep.figures[d], opts.rules, base)
			if err != nil {
				return err
			}
			results = append(results, checked{dev, rep.partial[d], rep.assumptions[d]})
		}
		if !found {
			return fmt.Errorf("%s: device %d has no segments and no trace", fn, opts.Device)
		}
	}

	failed, total := 0, 0
	devices := make([]*check.Device, len(results))
	for i, r := range results {
		devices[i] = r.Device
		failed += r.Failed()
		total += len(r.Outcomes)
	}
	if opts.Format == report.JSON {
		if err := report.WriteJSON(opts.IO.Out, jsonResults(opts, results, total, failed)); err != nil {
			return err
		}
	} else if err := writeText(opts.IO.Out, opts.Format, results, total, failed); err != nil {
		return err
	}
	if opts.JUnit != "" {
		now := time.Now
		if opts.Now != nil {
			now = opts.Now
		}
		// Written atomically: a CI step reading it never sees half a
		// report.
		err := atomicfile.Write(opts.JUnit, func(w io.Writer) error {
			return check.WriteJUnit(w, opts.Files, devices, now())
		})
		if err != nil {
			return err
		}
	}
	if opts.Getenv != nil && opts.Getenv("GITHUB_ACTIONS") == "true" {
		w := opts.IO.Out
		if opts.Format == report.JSON {
			w = opts.IO.ErrOut
		}
		if err := check.WriteGitHubAnnotations(w, devices); err != nil {
			return err
		}
	}
	if failed > 0 {
		return &command.CheckFailedError{Failed: failed}
	}
	return nil
}

func writeText(w io.Writer, format report.Format, results []checked, total, failed int) error {
	md := format == report.Markdown
	for i, r := range results {
		if i > 0 {
			fmt.Fprintln(w)
		}
		title := report.DeviceTitle(r.File, r.Device.Device, r.Version)
		if r.BaselineFile != "" {
			title += fmt.Sprintf(", baseline %s device %d", filepath.Base(r.BaselineFile), r.BaselineDevice)
		}
		if md {
			fmt.Fprintf(w, "### %s\n\n", report.Escape(title))
		} else {
			fmt.Fprintln(w, report.Escape(title))
		}
		var notes []string
		if r.Partial {
			notes = append(notes, "history: partial: the trace starts mid-run, so peaks are over the recorded window only")
		}
		for _, a := range r.Assumptions {
			if replay.AssumesNoCapture(a) && gatesOnRetries(r.Device) || !replay.AssumesNoCapture(a) && gatesOnSplits(r.Device) {
				notes = append(notes, "note: "+a+".")
			}
		}
		for _, note := range notes {
			if md {
				fmt.Fprintf(w, "%s\n\n", report.Escape(note))
			} else {
				fmt.Fprintln(w, report.Escape(note))
			}
		}
		if !md {
			fmt.Fprintln(w)
		}
		if err := outcomeTable(r.Device).Render(w, format); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, report.Escape(summary(total, failed, results)))
	return nil
}

// gatesOnSplits reports whether a rule of d reads a figure that depends
// on how large-pool blocks were split (replay.Result.Assumptions): the
// allocated and active bytes' peaks and totals, inactive_split, and the
// figures at the peak of allocated memory. The final state pins the
// current values.
func gatesOnSplits(d *check.Device) bool {
	for _, o := range d.Outcomes {
		k := o.Rule.Key
		switch {
		case k == "peak_allocated", strings.HasSuffix(k, "_at_peak"), k == "fragmentation":
			return true
		case strings.HasSuffix(k, ".current"):
		case strings.HasPrefix(k, "allocated_bytes."), strings.HasPrefix(k, "active_bytes."), strings.HasPrefix(k, "inactive_split"):
			return true
		}
	}
	return false
}

// gatesOnRetries reports whether a rule of d reads a figure that counts
// a retry for every oom (replay.AssumesNoCapture).
func gatesOnRetries(d *check.Device) bool {
	return slices.ContainsFunc(d.Outcomes, func(o check.Outcome) bool {
		return o.Rule.Key == "alloc_retries" || o.Rule.Key == "num_alloc_retries" || o.Rule.Key == "num_sync_all_streams"
	})
}

// summary is the last line: the verdict and the counts.
func summary(total, failed int, results []checked) string {
	files := map[string]bool{}
	for _, r := range results {
		files[r.File] = true
	}
	scope := fmt.Sprintf("%s, %s", report.Plural(len(files), "file", "files"), report.Plural(len(results), "device", "devices"))
	checks := report.Plural(total, "check", "checks")
	if failed > 0 {
		return fmt.Sprintf("FAIL: %d of %s failed (%s)", failed, checks, scope)
	}
	return fmt.Sprintf("ok: all %s passed (%s)", checks, scope)
}

func outcomeTable(d *check.Device) *report.Table {
	withBase := false
	for _, o := range d.Outcomes {
		withBase = withBase || o.Rule.Kind == check.MaxIncrease
	}
	t := &report.Table{Columns: []report.Column{
		{Name: "Rule", Key: "rule"},
		{Name: "Actual", Key: "actual", Align: report.Right},
		{Name: "Limit", Key: "limit", Align: report.Right},
	}}
	if withBase {
		t.Columns = append(t.Columns,
			report.Column{Name: "Baseline", Key: "baseline", Align: report.Right},
			report.Column{Name: "Change", Key: "change", Align: report.Right})
	}
	t.Columns = append(t.Columns, report.Column{Name: "Verdict", Key: "verdict"})
	for _, o := range d.Outcomes {
		u := o.Rule.Unit
		actual := report.Cell{Raw: o.Actual, Text: u.Format(o.Actual)}
		if o.Bound != nil {
			actual = report.BoundCell(*o.Bound)
			if u == check.Fraction {
				// A share's bound, each end written as a share.
				b := *o.Bound
				b.Bytes = true // Format writes the ends through the function
				actual = report.Str(b.Format(func(v int64) string { return u.Format(float64(v)) }))
			}
		}
		row := []report.Cell{
			report.Str(o.Rule.String()),
			actual,
			{Raw: o.Limit, Text: u.Format(o.Limit)},
		}
		if withBase {
			if o.Rule.Kind == check.MaxIncrease {
				row = append(row, report.Cell{Raw: o.Baseline, Text: u.Format(o.Baseline)}, report.Str(o.Change()))
			} else {
				row = append(row, report.Cell{Raw: nil, Text: ""}, report.Cell{Raw: nil, Text: ""})
			}
		}
		verdict := "ok"
		if !o.Passed {
			verdict = "FAIL"
		}
		t.Add(append(row, report.Str(verdict))...)
	}
	return t
}

type jsonOutcome struct {
	Rule     string   `json:"rule"`
	Kind     string   `json:"kind"`
	Key      string   `json:"key"`
	Unit     string   `json:"unit"`
	Actual   float64  `json:"actual"`
	Limit    float64  `json:"limit"`
	Baseline *float64 `json:"baseline"`
	// Bound is set when the figure is not exact (actual is its lower
	// end); the rule passed only if the whole bound is within the limit.
	Bound   *replay.Bound `json:"bound,omitempty"`
	Passed  bool          `json:"passed"`
	Message string        `json:"message"`
	Source  string        `json:"source"`
}

type jsonBaseline struct {
	File   string `json:"file"`
	Device int    `json:"device"`
}

type jsonDevice struct {
	Device       int           `json:"device"`
	TorchVersion string        `json:"torch_version"`
	Partial      bool          `json:"partial_history"`
	Baseline     *jsonBaseline `json:"baseline"`
	Passed       bool          `json:"passed"`
	Results      []jsonOutcome `json:"results"`
	// Bounds are the figures the snapshot does not determine.
	Bounds map[string]replay.Bound `json:"bounds"`
	// Assumptions are what the exact figures assume that the recording
	// does not show (absent when none).
	Assumptions []string `json:"assumptions,omitempty"`
}

func jsonResults(opts *Options, results []checked, total, failed int) any {
	env := opts.Output.Envelope(opts.Files, nil)
	env.Summary = struct {
		Passed bool `json:"passed"`
		Checks int  `json:"checks"`
		Failed int  `json:"failed"`
	}{Passed: failed == 0, Checks: total, Failed: failed}
	for _, fn := range opts.Files {
		jds := []jsonDevice{}
		for _, r := range results {
			if r.File != fn {
				continue
			}
			jd := jsonDevice{Device: r.Device.Device, TorchVersion: r.Version, Partial: r.Partial, Passed: r.Failed() == 0, Results: []jsonOutcome{}, Bounds: r.Bounds, Assumptions: r.Assumptions}
			if jd.Bounds == nil {
				jd.Bounds = map[string]replay.Bound{}
			}
			if r.BaselineFile != "" {
				jd.Baseline = &jsonBaseline{r.BaselineFile, r.BaselineDevice}
			}
			for _, o := range r.Outcomes {
				jo := jsonOutcome{
					Rule: o.Rule.String(), Kind: o.Rule.Kind.String(), Key: o.Rule.Key, Unit: o.Rule.Unit.String(),
					Actual: o.Actual, Limit: o.Limit, Passed: o.Passed, Message: o.Message(), Source: o.Rule.Source,
					Bound: o.Bound,
				}
				if o.Rule.Kind == check.MaxIncrease {
					b := o.Baseline
					jo.Baseline = &b
				}
				jd.Results = append(jd.Results, jo)
			}
			jds = append(jds, jd)
		}
		env.Results = append(env.Results, report.FileResult{File: fn, Devices: jds})
	}
	return env
}
