// Package record is `memstat record`: run a workload on the embedded
// allocator simulation and write the memory snapshot PyTorch would have
// dumped.
package record

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/atomicfile"
	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/textfile"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/report"
	"github.com/memstat/memstat/pkg/snapshot"
	"github.com/memstat/memstat/pkg/workload"
)

// DefaultDeviceMemory is the simulated GPU unless --device-memory says
// otherwise: 80 GiB, an H100 or A100-80GB.
const DefaultDeviceMemory = "80GiB"

// Options are `memstat record`'s inputs.
type Options struct {
	IO *iostreams.IOStreams

	Workload string
	File     string
	// Params are the built-in workload's parameters given on the command
	// line (flag name → value); the others keep the workload's defaults.
	Params       map[string]string
	AllocConf    string
	DeviceMemory string
	TorchVersion string
	MaxEntries   int
	Seed         uint64
	Output       string
	List         bool
}

// NewCmdRecord returns the record command. runF replaces runRecord in
// tests of flag parsing.
func NewCmdRecord(f *command.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IO, Params: map[string]string{}}
	params := make([]string, len(workload.Params))
	cmd := &cobra.Command{
		Use:   "record [--workload NAME | --file W.mem] [model flags] -o OUT.pickle",
		Short: "Run a workload on the simulated allocator and write its memory snapshot",
		Long: `Run a workload on memstat's simulation of PyTorch's CUDA caching allocator
and write the snapshot torch.cuda.memory._dump_snapshot() would have written:
segments, the trace of every allocator event (with Python stacks, time_us and
record_function annotations) and the allocator settings.

The workload is a built-in one (--workload; see --list for them and their
parameters) or a workload file (--file) describing your own sequence of
allocations and torch.cuda memory calls. Memory history is recorded from the
start, as after torch.cuda.memory._record_memory_history().

The simulated device has ` + DefaultDeviceMemory + ` (an H100) unless --device-memory says
otherwise. If the workload runs out of memory, the snapshot holds the state at
the failure (its trace ends with the oom entry), PyTorch's message goes to
stderr and the command still succeeds.

It prints what it recorded and the stats headline, the figures
'memstat stats' gives for the file.`,
		Example: `  memstat record -o out/default.pickle
  memstat record --layers 32 --hidden 4096 --heads 32 --seq 2048 --batch 1 --device-memory 24GiB -o 7b.pickle
  memstat record --workload inference --kv-cache static -o gen.pickle
  memstat record --file testdata/workloads/fragmentation.mem -o frag.pickle
  memstat record --list`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				// cobra would say `unknown command "maybe"` for
				// --checkpointing maybe: a flag with an optional value
				// takes it after "=" only.
				return command.FlagErrorf("unexpected argument %s: record takes no arguments (a flag with an optional value takes it after =, e.g. --checkpointing=false)", textfile.Quote(args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			for i, p := range workload.Params {
				if cmd.Flags().Changed(p.Name) {
					opts.Params[p.Name] = params[i]
				}
			}
			if err := opts.validate(cmd.Flags().Changed("workload")); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runRecord(opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&opts.Workload, "workload", "w", workload.Builtins[0].Name, "built-in workload to run (see --list)")
	fl.StringVarP(&opts.File, "file", "f", "", "run a workload file instead of a built-in workload")
	for i, p := range workload.Params {
		fl.StringVar(&params[i], p.Name, "", p.Usage)
		if p.Bool {
			fl.Lookup(p.Name).NoOptDefVal = "true"
		}
	}
	fl.StringVar(&opts.AllocConf, "alloc-conf", "", "PYTORCH_CUDA_ALLOC_CONF of the simulated process")
	fl.StringVar(&opts.DeviceMemory, "device-memory", DefaultDeviceMemory, "GPU memory (e.g. 24GiB, 80GB)")
	fl.StringVar(&opts.TorchVersion, "torch-version", allocator.Latest.String(), "PyTorch release whose allocator and snapshot format to simulate")
	fl.IntVar(&opts.MaxEntries, "max-entries", 0, "trace ring-buffer size, _record_memory_history(max_entries=N); 0 keeps every entry")
	fl.Uint64Var(&opts.Seed, "seed", 1, "seed of the workload's random choices (varlen's sequence lengths)")
	fl.StringVarP(&opts.Output, "output", "o", "", "snapshot file to write")
	fl.BoolVar(&opts.List, "list", false, "list the built-in workloads and their parameters")
	return cmd
}

func (o *Options) validate(workloadSet bool) error {
	if o.List {
		return nil
	}
	if o.Output == "" {
		return command.FlagErrorf("the snapshot file is missing: -o OUT.pickle")
	}
	if o.File != "" {
		if workloadSet {
			return command.FlagErrorf("--workload and --file exclude each other")
		}
		for name := range o.Params {
			return command.FlagErrorf("--%s sets a built-in workload's parameter; a workload file sets its own sizes", name)
		}
	}
	if o.MaxEntries < 0 {
		return command.FlagErrorf("--max-entries must not be negative")
	}
	return nil
}

// run is one recording: the workload, what it needs and what it did.
type run struct {
	name   string
	w      workload.Workload
	cfg    allocator.Config
	device int64
	env    *workload.Env
}

func runRecord(o *Options) error {
	if o.List {
		return listWorkloads(o.IO.Out)
	}
	if err := atomicfile.RefuseInput("-o", o.Output, o.File); err != nil {
		return err
	}
	r, err := o.prepare()
	if err != nil {
		return err
	}
	progress := newProgress(o.IO)
	r.env, err = workload.NewEnv(workload.Options{
		Config:       r.cfg,
		DeviceMemory: r.device,
		MaxEntries:   o.MaxEntries,
		Out:          o.IO.Out,
		Progress:     progress.callback(),
	})
	if err != nil {
		return err
	}
	r.w.Run(r.env)
	progress.done()
	oom := r.env.OOM()
	if err := r.env.Err(); err != nil && oom == nil {
		return err
	}
	s := r.env.Snapshot()
	s.Recorder = &snapshot.Recorder{
		Tool:      "memstat record",
		Workload:  filepath.Base(r.name),
		TimeModel: workload.TimeModel(r.w),
	}
	if err := snapshot.WriteFile(o.Output, s); err != nil {
		return err
	}
	h, err := headline(o.Output)
	if err != nil {
		return err
	}
	describe(o.IO.Out, r)
	fmt.Fprintf(o.IO.Out, "recorded %d trace entries to %s\n", s.Trace(0).Len(), o.Output)
	fmt.Fprintln(o.IO.Out, h)
	if oom != nil {
		fmt.Fprintf(o.IO.ErrOut, "%s: %s\n", oom.ExceptionName(), oom.Error())
		fmt.Fprintf(o.IO.ErrOut, "memstat: the workload ran out of memory; %s holds the state at the failure "+
			"(its trace ends with the oom entry)\n", o.Output)
	}
	return nil
}

// prepare parses everything the run needs, so that bad input fails before
// anything runs.
func (o *Options) prepare() (*run, error) {
	v, err := allocator.ParseVersion(o.TorchVersion)
	if err != nil {
		return nil, command.FlagErrorf("--torch-version: %v", err)
	}
	cfg, err := allocator.ParseConfig(o.AllocConf, v)
	if err == nil {
		err = cfg.CheckSimulated()
	}
	if err != nil {
		return nil, fmt.Errorf("--alloc-conf: %w", err)
	}
	device, err := report.ParseSize(o.DeviceMemory)
	if err != nil || device <= 0 {
		return nil, command.FlagErrorf("--device-memory %q: want a positive size such as 24GiB or 80GB", o.DeviceMemory)
	}
	r := &run{cfg: cfg, device: device}
	if o.File != "" {
		f, err := workload.ReadFile(o.File)
		if err != nil {
			return nil, err
		}
		if err := f.Check(); err != nil {
			return nil, err
		}
		r.name, r.w = o.File, f
	} else {
		b, err := workload.Lookup(o.Workload)
		if err != nil {
			return nil, command.FlagErrorf("%v", err)
		}
		if r.w, err = b.New(o.Params, o.Seed); err != nil {
			return nil, err
		}
		r.name = b.Name
	}
	return r, nil
}

// headline is the headline `memstat stats` prints for the recorded file,
// computed the same way: the file is read back and its trace replayed. The
// replay's statistics equal the simulator's at the end of the run (the
// trace is complete unless --max-entries cut it).
func headline(path string) (string, error) {
	s, err := snapshot.Load(path)
	if err != nil {
		return "", err
	}
	r, err := replay.New(s, replay.Options{Device: 0})
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	res, err := r.Run()
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return report.HeadlineText(res), nil
}

// describe prints what a built-in workload ran and what the formulas say
// it needs.
func describe(out io.Writer, r *run) {
	switch w := r.w.(type) {
	case *workload.Train:
		describeTrain(out, r.name, w, fmt.Sprintf("%d steps of %d × %d tokens", w.Steps, w.Batch.Batch, w.Batch.Seq))
	case *workload.FindBatchSize:
		describeTrain(out, r.name, &w.Train, fmt.Sprintf("one step per batch size from %d × %d tokens, doubling", w.Batch.Batch, w.Batch.Seq))
	case *workload.Generate:
		m := w.Model
		fmt.Fprintf(out, "%s: %s, %s, %d × %d prompt tokens then %d new tokens, %s KV cache\n",
			r.name, modelLine(m), w.DType.Name, w.Batch, w.Prompt, w.NewTokens, w.Cache)
		fmt.Fprintf(out, "  weights %s, KV cache %s at %d tokens\n",
			report.Size(m.NumParams()*w.DType.Size), report.Size(w.CacheBytes()), w.Prompt+w.NewTokens)
		if w.CUDAGraphs {
			var sizes []string
			for _, bs := range w.GraphBatchSizes() {
				sizes = append(sizes, fmt.Sprint(bs))
			}
			fmt.Fprintf(out, "  decode captured as CUDA graphs for batch sizes %s, each in a private pool of its own\n", strings.Join(sizes, ", "))
		}
	}
}

func describeTrain(out io.Writer, name string, w *workload.Train, steps string) {
	mem := w.Memory()
	precision := w.DType.Name
	if mem.Master > 0 {
		precision += " with fp32 master weights"
	}
	extra := ""
	if w.Checkpointing {
		extra = ", activation checkpointing"
	}
	if w.SeqLens != nil {
		steps += " at most"
	}
	fmt.Fprintf(out, "%s: %s, %s, AdamW %s%s, %s\n", name, modelLine(w.Model), precision, w.Optimizer, extra, steps)
	parts := []string{"weights " + report.Size(mem.Weights), "gradients " + report.Size(mem.Gradients)}
	if mem.Master > 0 {
		parts = append(parts, "fp32 master "+report.Size(mem.Master))
	}
	parts = append(parts, "AdamW state "+report.Size(mem.Optimizer))
	acts := "activations " + report.Size(mem.LayerActivations) + " per layer"
	if w.Checkpointing {
		acts = "activations " + report.Size(mem.LayerInput) + " per layer (its input), " +
			report.Size(mem.LayerActivations) + " for the layer being recomputed"
	}
	fmt.Fprintf(out, "  persistent %s = %s; %s; logits and loss %s\n",
		report.Size(mem.Persistent), strings.Join(parts, " + "), acts, report.Size(mem.Head))
}

func modelLine(m workload.Transformer) string {
	return fmt.Sprintf("%s parameters (%d layers, hidden %d, %d heads)", count(m.NumParams()), m.Layers, m.Hidden, m.Heads)
}

// count writes a parameter count the way model cards do: 46.1M, 6.74B.
func count(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// listWorkloads prints the built-in workloads with their parameters and
// defaults.
func listWorkloads(out io.Writer) error {
	fmt.Fprintln(out, "Built-in workloads (memstat record --workload NAME; the first is the default):")
	for _, b := range workload.Builtins {
		fmt.Fprintf(out, "\n%s\n  %s\n ", b.Name, b.Summary)
		for _, d := range b.Defaults {
			sep := " "
			if d.Value == "true" || d.Value == "false" {
				sep = "=" // a switch takes its value after "="
			}
			fmt.Fprintf(out, " --%s%s%s", d.Name, sep, d.Value)
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintln(out, "\nParameters:")
	t := &report.Table{Columns: []report.Column{{Name: "Flag", Key: "flag"}, {Name: "Meaning", Key: "meaning"}}}
	for _, p := range workload.Params {
		t.Add(report.Str("--"+p.Name), report.Str(p.Usage))
	}
	return t.Render(out, report.Text)
}

// progress shows what the workload is doing on one terminal line, only
// when stderr is a terminal.
type progress struct {
	w     io.Writer
	shown bool
}

func newProgress(io *iostreams.IOStreams) *progress {
	if !io.IsStderrTTY() {
		return &progress{}
	}
	command.ReleaseStderr(io.ErrOut) // progress is shown as it comes
	return &progress{w: io.ErrOut}
}

// callback is the function the workload reports to, nil without a
// terminal.
func (p *progress) callback() func(string) {
	if p.w == nil {
		return nil
	}
	return p.show
}

func (p *progress) show(msg string) {
	fmt.Fprintf(p.w, "\r\033[Krecording: %s", msg)
	p.shown = true
}

func (p *progress) done() {
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
