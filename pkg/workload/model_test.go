package workload

import (
	"testing"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Published parameter counts: LLaMA-7B (6,738,415,616) and Llama-2-70B
// with grouped-query attention (68,976,648,192).
func TestNumParams(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    Transformer
		want int64
	}{
		{"llama-7b", Transformer{Layers: 32, Hidden: 4096, Heads: 32, MLP: 11008, Vocab: 32000}, 6_738_415_616},
		{"llama-7b, default mlp", Transformer{Layers: 32, Hidden: 4096, Heads: 32, Vocab: 32000}, 6_738_415_616},
		{"llama-2-70b", Transformer{Layers: 80, Hidden: 8192, Heads: 64, KVHeads: 8, MLP: 28672, Vocab: 32000}, 68_976_648_192},
	} {
		if got := tc.m.NumParams(); got != tc.want {
			t.Errorf("%s: NumParams = %d, want %d", tc.name, got, tc.want)
		}
		var sum int64
		for _, w := range tc.m.Weights() {
			sum += w.Numel()
		}
		if sum != tc.want {
			t.Errorf("%s: Weights add up to %d, want %d", tc.name, sum, tc.want)
		}
	}
	if got := DefaultMLP(4096); got != 11008 {
		t.Errorf("DefaultMLP(4096) = %d, want 11008", got)
	}
}

func TestValidateShape(t *testing.T) {
	for _, m := range []Transformer{
		{Layers: 2, Hidden: 100, Heads: 3, Vocab: 10},
		{Layers: 2, Hidden: 64, Heads: 8, KVHeads: 3, Vocab: 10},
		{Layers: 0, Hidden: 64, Heads: 8, Vocab: 10},
	} {
		if m.Validate() == nil {
			t.Errorf("%+v: no error", m)
		}
	}
}

// liveAt walks a trace and returns the bytes requested by live
// allocations at each annotation (by name and stage, in order of
// appearance), using only the snapshot: alloc adds the request,
// free_completed removes the block's request.
func liveAt(s *snapshot.Snapshot) map[string][]int64 {
	out := map[string][]int64{}
	trace := s.Trace(0).Entries()
	var live int64
	i := 0
	for _, a := range s.Annotations {
		for ; i < len(trace) && trace[i].TimeUS < a.TimeUS; i++ {
			switch trace[i].Action {
			case snapshot.ActionAlloc:
				live += trace[i].Size
			case snapshot.ActionFreeCompleted:
				live -= trace[i].Size
			}
		}
		k := a.Name + " " + a.Stage
		out[k] = append(out[k], live)
	}
	return out
}

// The 7B training shape gives the figures practitioners know: 6.74B
// parameters, 13.5 GB of bf16 weights, 16 bytes per parameter of
// persistent state under mixed precision (bf16 weights and gradients,
// fp32 master weights, fp32 exp_avg and exp_avg_sq), and per-layer
// activations on top; the recorded trace holds exactly these amounts.
func TestTrain7B(t *testing.T) {
	m := Transformer{Layers: 32, Hidden: 4096, Heads: 32, MLP: 11008, Vocab: 32000}
	b := Batch{Batch: 1, Seq: 2048}
	w := &Train{Model: m, Batch: b, DType: BFloat16, Steps: 2, Dropout: true, ClipGrad: true, Optimizer: Foreach}
	e, err := NewEnv(Options{Config: allocator.DefaultConfig(allocator.Latest), DeviceMemory: 256 << 30})
	if err != nil {
		t.Fatal(err)
	}
	w.Run(e)
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}

	const P = 6_738_415_616
	if w := P * 2; w < 13.4e9 || w > 13.6e9 {
		t.Fatalf("bf16 weights %d bytes, want ≈13.5 GB", w)
	}
	mem := w.Memory()
	if mem.Params != P || mem.Weights != 2*P || mem.Gradients != 2*P || mem.Master != 4*P || mem.Optimizer != 8*P || mem.Persistent != 16*P {
		t.Fatalf("Memory() = %+v, want 2+2+4+8 = 16 bytes per parameter", mem)
	}

	// Independent per-layer formula: layer input, normed inputs of attention
	// and MLP, q, k, v, attention output, residual sum (8 × T·h·2), fp32
	// softmax + bf16 probabilities + dropout mask over b·a·s² scores,
	// gate/up/silu/product (4 × T·f·2), two fp32 rstd, two hidden masks.
	T, h, f, a, s := b.Tokens(), m.Hidden, m.MLP, m.Heads, b.Seq
	perLayer := 8*T*h*2 + (4+2+1)*b.Batch*a*s*s + 4*T*f*2 + 2*T*4 + 2*T*h
	if mem.LayerActivations != perLayer {
		t.Errorf("LayerActivations = %d, want %d", mem.LayerActivations, perLayer)
	}

	snap := e.Snapshot()
	at := liveAt(snap)
	// Persistent state: just before zero_grad of the first step, live
	// memory is the 16 bytes per parameter plus the cuBLAS workspace, the
	// batch (2 × T int64) and a few scalars.
	beforeZero := at["Optimizer.zero_grad#AdamW.zero_grad START"]
	if len(beforeZero) != 2 {
		t.Fatalf("zero_grad annotations: %v", beforeZero)
	}
	extra := int64(cublasWorkspace + 2*T*8)
	if got := beforeZero[0]; got < 16*P+extra || got > 16*P+extra+4096 {
		t.Errorf("live before zero_grad = %d, want 16·P + %d (+ scalars) = %d", got, extra, 16*P+extra)
	}
	// The second step's forward keeps L layers of activations plus the
	// last block's output, cos/sin, the final norm's output and rstd, and
	// the fp32 log-probabilities and loss.
	fwdStart, fwdEnd := at["forward START"], at["forward END"]
	d := m.HeadDim()
	want := m.Layers*perLayer + T*h*2 + 2*T*d*2 + T*h*2 + T*4 + T*m.Vocab*4 + 4
	if got := fwdEnd[1] - fwdStart[1]; got != want {
		t.Errorf("forward keeps %d bytes, want %d (%d layers × %d + head)", got, want, m.Layers, perLayer)
	}
	// Peak allocated covers the persistent state and at least one layer's
	// activations.
	st := e.Allocator().Stats()
	if peak := st.AllocatedBytes[allocator.PoolAll].Peak; peak < 16*P+perLayer {
		t.Errorf("peak allocated %d < persistent %d + one layer %d", peak, 16*P, perLayer)
	}
	// After the run: weights, master weights, AdamW state and workspace
	// remain, and the last batch, loss and gradient norm.
	if got := st.AllocatedBytes[allocator.PoolAll].Current; got < 14*P || got > 14*P+extra+8<<20 {
		t.Errorf("allocated at the end = %d, want ≈ 14·P = %d", got, 14*P)
	}
}

// Activation checkpointing keeps only each block's input across the
// forward pass.
func TestCheckpointingKeepsInputsOnly(t *testing.T) {
	m := Transformer{Layers: 6, Hidden: 256, Heads: 4, Vocab: 1000}
	b := Batch{Batch: 2, Seq: 128}
	live := func(ckpt bool) int64 {
		w := &Train{Model: m, Batch: b, DType: BFloat16, Steps: 1, Dropout: true, Checkpointing: ckpt}
		e, _ := NewEnv(Options{Config: allocator.DefaultConfig(allocator.Latest), DeviceMemory: 80 << 30})
		w.Run(e)
		if e.Err() != nil {
			t.Fatal(e.Err())
		}
		at := liveAt(e.Snapshot())
		return at["forward END"][0] - at["forward START"][0]
	}
	full, ckpt := live(false), live(true)
	T := b.Tokens()
	if full-ckpt != m.Layers*(layerActivations(m.normalized(), b, BFloat16, true)-T*m.Hidden*2) {
		t.Errorf("checkpointing saves %d bytes in forward, want %d layers × (activations − input)", full-ckpt, m.Layers)
	}
}

// Every built-in workload runs to its end on an 80 GiB device, except the
// OOM one, which stops at an out-of-memory error with PyTorch's message and
// an oom trace entry; invariants hold throughout.
func TestBuiltins(t *testing.T) {
	for _, b := range Builtins {
		t.Run(b.Name, func(t *testing.T) {
			w, err := b.New(nil, 1)
			if err != nil {
				t.Fatal(err)
			}
			e, _ := NewEnv(Options{Config: allocator.DefaultConfig(allocator.Latest), DeviceMemory: 80 << 30})
			w.Run(e)
			if err := e.Allocator().CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			s := e.Snapshot()
			trace := s.Trace(0).Entries()
			last := trace[len(trace)-1]
			if b.Name != "oom" {
				if e.Err() != nil {
					t.Fatal(e.Err())
				}
				if last.Action == snapshot.ActionOOM {
					t.Fatal("unexpected oom entry")
				}
				return
			}
			oom := e.OOM()
			if oom == nil {
				t.Fatalf("no OOM; err = %v", e.Err())
			}
			if last.Action != snapshot.ActionOOM {
				t.Errorf("last trace entry %v, want oom", last.Action)
			}
			msg := oom.Error()
			const prefix = "CUDA out of memory. Tried to allocate "
			if len(msg) < len(prefix) || msg[:len(prefix)] != prefix {
				t.Errorf("OOM message %q", msg)
			}
			if n := e.Allocator().Stats().NumOOMs; n != 1 {
				t.Errorf("num_ooms = %d", n)
			}
		})
	}
}

// Parameters are checked by name and value.
func TestBuiltinParams(t *testing.T) {
	train, _ := Lookup("train")
	for _, tc := range []struct {
		set  map[string]string
		want string
	}{
		{map[string]string{"new-tokens": "4"}, "--new-tokens does not apply to the train workload"},
		{map[string]string{"layers": "x"}, `invalid --layers "x": want a non-negative integer`},
		{map[string]string{"dtype": "int8"}, `invalid --dtype "int8": want bf16, fp16 or fp32`},
		{map[string]string{"heads": "7"}, "train workload: hidden size 512 is not a multiple of the 7 heads"},
		{map[string]string{"optimizer": "sgd"}, `train workload: unknown optimizer implementation "sgd" (want foreach, for-loop or fused)`},
	} {
		_, err := train.New(tc.set, 1)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v: error %v, want %q", tc.set, err, tc.want)
		}
	}
	if _, err := Lookup("nope"); err == nil {
		t.Error("Lookup(nope): no error")
	}
}

// varlen draws the same lengths for the same seed, other lengths for
// another, all multiples of 8 within [seq/4, seq].
func TestSeqLens(t *testing.T) {
	a, b, c := seqLens(1, 50, 1024), seqLens(1, 50, 1024), seqLens(2, 50, 1024)
	same := true
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("same seed, different lengths")
		}
		if a[i] != c[i] {
			same = false
		}
		if a[i]%8 != 0 || a[i] < 256 || a[i] > 1024 {
			t.Errorf("length %d", a[i])
		}
	}
	if same {
		t.Error("seeds 1 and 2 drew the same lengths")
	}
}
