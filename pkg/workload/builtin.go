package workload

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// Workload is a program run on the simulated device.
type Workload interface {
	Run(e *Env)
}

// Param is a parameter of the built-in workloads (a command-line flag).
type Param struct {
	Name  string
	Usage string
	// Bool parameters are switches: --checkpointing alone means true.
	Bool bool
}

// Params are every built-in workload's parameters, in the order --help and
// --list show them.
var Params = []Param{
	{Name: "layers", Usage: "transformer blocks"},
	{Name: "hidden", Usage: "hidden size"},
	{Name: "heads", Usage: "attention heads"},
	{Name: "kv-heads", Usage: "key/value heads (grouped-query attention); 0: as many as heads"},
	{Name: "mlp", Usage: "SwiGLU intermediate size; 0: LLaMA's 8/3·hidden rounded up to 256"},
	{Name: "vocab", Usage: "vocabulary size"},
	{Name: "seq", Usage: "sequence length (inference: prompt length; varlen: the longest)"},
	{Name: "batch", Usage: "sequences per batch (oom: the first batch tried)"},
	{Name: "dtype", Usage: "weights and activations: bf16 or fp16 (mixed precision with fp32 master weights) or fp32"},
	{Name: "steps", Usage: "training steps"},
	{Name: "checkpointing", Usage: "activation checkpointing: keep only each block's input, recompute in backward", Bool: true},
	{Name: "dropout", Usage: "attention and residual dropout (their masks are kept for backward)", Bool: true},
	{Name: "clip-grad", Usage: "clip the gradient norm before the optimizer step", Bool: true},
	{Name: "optimizer", Usage: "AdamW implementation: foreach (PyTorch's default), for-loop or fused"},
	{Name: "new-tokens", Usage: "tokens generated after the prompt"},
	{Name: "kv-cache", Usage: "dynamic (torch.cat one token at a time) or static (preallocated)"},
	{Name: "cuda-graphs", Usage: "capture decode as CUDA graphs, one per batch size (--batch, then halves down to 1), each in a private pool of its own, as vLLM and torch.compile's reduce-overhead do (implies --kv-cache static)", Bool: true},
}

// Builtin is a built-in workload: its name, what it does, and its
// parameters with their defaults.
type Builtin struct {
	Name     string
	Summary  string
	Defaults []Default
	build    func(a *args, seed uint64) Workload
}

// Default is a parameter's default value for one workload.
type Default struct{ Name, Value string }

var modelDefaults = []Default{
	{"layers", "4"}, {"hidden", "512"}, {"heads", "8"}, {"kv-heads", "0"}, {"mlp", "0"},
	{"vocab", "32000"}, {"seq", "512"}, {"batch", "8"}, {"dtype", "bf16"},
}

var trainDefaults = []Default{
	{"steps", "3"}, {"checkpointing", "false"}, {"dropout", "true"}, {"clip-grad", "true"}, {"optimizer", "foreach"},
}

// with returns defaults with some values replaced.
func with(defaults []Default, over ...Default) []Default {
	out := slices.Clone(defaults)
	for _, o := range over {
		for i := range out {
			if out[i].Name == o.Name {
				out[i].Value = o.Value
			}
		}
	}
	return out
}

// Builtins are the built-in workloads; the first is the default.
var Builtins = []Builtin{
	{
		Name: "train",
		Summary: "transformer training with AdamW: weights, gradients, optimizer state (fp32 master " +
			"weights under mixed precision), per-layer activations freed in backward, logits and loss",
		Defaults: slices.Concat(modelDefaults, trainDefaults),
		build:    func(a *args, _ uint64) Workload { return a.train() },
	},
	{
		Name: "inference",
		Summary: "generation with a KV cache: prefill of the prompts, then one token at a time, " +
			"the cache grown by torch.cat (dynamic) or preallocated (static)",
		Defaults: slices.Concat(modelDefaults, []Default{{"new-tokens", "64"}, {"kv-cache", "dynamic"}, {"cuda-graphs", "false"}}),
		build: func(a *args, _ uint64) Workload {
			return &Generate{
				Model: a.model(), Batch: a.int("batch"), Prompt: a.int("seq"),
				NewTokens: a.int("new-tokens"), DType: a.dtype("dtype"), Cache: KVCache(a.str("kv-cache")),
				CUDAGraphs: a.bool("cuda-graphs"),
			}
		},
	},
	{
		Name: "varlen",
		Summary: "training on variable-length batches: each step pads to a random length " +
			"(seeded, multiples of 8 up to --seq), so activations change size and fragment the cache",
		Defaults: slices.Concat(with(modelDefaults, Default{"seq", "1024"}), with(trainDefaults, Default{"steps", "8"})),
		build: func(a *args, seed uint64) Workload {
			w := a.train()
			lens := seqLens(seed, w.Steps, w.Batch.Seq)
			w.SeqLens = func(step int) int64 { return lens[step] }
			return w
		},
	},
	{
		Name: "oom",
		Summary: "a batch-size search: one training step at --batch, then twice as many sequences, " +
			"and so on, emptying the cache between trials, until the device runs out of memory",
		Defaults: slices.Concat(modelDefaults, with(trainDefaults, Default{"steps", "1"})[1:]),
		build: func(a *args, _ uint64) Workload {
			w := a.train()
			w.Steps = 1
			return &FindBatchSize{Train: *w}
		},
	},
}

// Lookup finds a built-in workload by name.
func Lookup(name string) (*Builtin, error) {
	for i := range Builtins {
		if Builtins[i].Name == name {
			return &Builtins[i], nil
		}
	}
	names := make([]string, len(Builtins))
	for i, b := range Builtins {
		names[i] = b.Name
	}
	return nil, fmt.Errorf("unknown workload %q (built-in workloads: %s)", name, strings.Join(names, ", "))
}

// New builds the workload with the given parameter values (by name, as on
// the command line) over its defaults. A parameter the workload does not
// have is an error, so that a misplaced flag is not silently ignored. The
// seed drives the workload's randomness, if it has any.
func (b *Builtin) New(set map[string]string, seed uint64) (Workload, error) {
	a := &args{vals: map[string]string{}}
	for _, d := range b.Defaults {
		a.vals[d.Name] = d.Value
	}
	for _, name := range slices.Sorted(maps.Keys(set)) {
		if _, ok := a.vals[name]; !ok {
			return nil, fmt.Errorf("--%s does not apply to the %s workload", name, b.Name)
		}
		a.vals[name] = set[name]
	}
	w := b.build(a, seed)
	if a.err != nil {
		return nil, a.err
	}
	if v, ok := w.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return nil, fmt.Errorf("%s workload: %w", b.Name, err)
		}
	}
	return w, nil
}

// seqLens draws each step's padded sequence length: uniform in
// [longest/4, longest], rounded up to a multiple of 8 (pad_to_multiple_of=8)
// but not beyond longest. PCG keeps the draw the same on every platform
// and Go release.
func seqLens(seed uint64, steps int, longest int64) []int64 {
	r := rand.New(rand.NewPCG(seed, 0x6d656d73746174)) // "memstat"
	lo := max(1, longest/4)
	out := make([]int64, max(steps, 0))
	for i := range out {
		n := lo + r.Int64N(longest-lo+1)
		out[i] = min((n+7)/8*8, longest)
	}
	return out
}

// args reads parameter values, keeping the first error.
type args struct {
	vals map[string]string
	err  error
}

func (a *args) fail(name, v, want string) {
	if a.err == nil {
		a.err = fmt.Errorf("invalid --%s %q: %s", name, v, want)
	}
}

func (a *args) str(name string) string { return a.vals[name] }

func (a *args) int(name string) int64 {
	v := a.vals[name]
	n, err := strconv.ParseInt(strings.ReplaceAll(v, "_", ""), 10, 64)
	if err != nil || n < 0 {
		a.fail(name, v, "want a non-negative integer")
	}
	return n
}

func (a *args) bool(name string) bool {
	v := a.vals[name]
	b, err := strconv.ParseBool(v)
	if err != nil {
		a.fail(name, v, "want true or false")
	}
	return b
}

func (a *args) dtype(name string) DType {
	v := a.vals[name]
	d, err := ParseDType(v)
	if err == nil && d != Float32 && d != BFloat16 && d != Float16 {
		err = fmt.Errorf("want bf16, fp16 or fp32")
	}
	if err != nil {
		a.fail(name, v, "want bf16, fp16 or fp32")
	}
	return d
}

func (a *args) model() Transformer {
	return Transformer{
		Layers: a.int("layers"), Hidden: a.int("hidden"), Heads: a.int("heads"), KVHeads: a.int("kv-heads"),
		MLP: a.int("mlp"), Vocab: a.int("vocab"),
	}
}

func (a *args) train() *Train {
	steps := 1
	if _, ok := a.vals["steps"]; ok {
		steps = int(a.int("steps"))
	}
	return &Train{
		Model: a.model(), Batch: Batch{Batch: a.int("batch"), Seq: a.int("seq")}, DType: a.dtype("dtype"),
		Steps: steps, Checkpointing: a.bool("checkpointing"), Dropout: a.bool("dropout"),
		ClipGrad: a.bool("clip-grad"), Optimizer: OptimizerImpl(a.str("optimizer")),
	}
}
