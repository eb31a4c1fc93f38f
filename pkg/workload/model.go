package workload

import (
	"errors"
	"fmt"
)

// Transformer is the shape of a decoder-only transformer in the LLaMA
// layout: token embedding, Layers blocks of (RMSNorm, attention with
// rotary positions and q/k/v/o projections, RMSNorm, SwiGLU MLP with
// gate/up/down projections), a final RMSNorm and an untied LM head. No
// biases. LLaMA-7B is Layers 32, Hidden 4096, Heads 32, MLP 11008,
// Vocab 32000: 6,738,415,616 parameters.
type Transformer struct {
	Layers int64
	Hidden int64
	Heads  int64
	// KVHeads is the number of key/value heads (grouped-query attention);
	// 0 means Heads.
	KVHeads int64
	// MLP is the SwiGLU intermediate size; 0 means LLaMA's rule,
	// 8/3·Hidden rounded up to a multiple of 256 (11008 for 4096).
	MLP   int64
	Vocab int64
}

// DefaultMLP is LLaMA's intermediate size for a hidden size: 2/3 of 4·h,
// rounded up to a multiple of 256.
func DefaultMLP(hidden int64) int64 {
	f := (8*hidden + 2) / 3
	return (f + 255) / 256 * 256
}

// normalized fills the defaults.
func (m Transformer) normalized() Transformer {
	if m.KVHeads == 0 {
		m.KVHeads = m.Heads
	}
	if m.MLP == 0 {
		m.MLP = DefaultMLP(m.Hidden)
	}
	return m
}

// Validate checks that the shape describes a model.
func (m Transformer) Validate() error {
	m = m.normalized()
	switch {
	case m.Layers < 1 || m.Hidden < 1 || m.Heads < 1 || m.Vocab < 1 || m.MLP < 1:
		return errors.New("layers, hidden, heads, mlp and vocab must be positive")
	case m.Hidden%m.Heads != 0:
		return fmt.Errorf("hidden size %d is not a multiple of the %d heads", m.Hidden, m.Heads)
	case m.KVHeads < 1 || m.Heads%m.KVHeads != 0:
		return fmt.Errorf("%d heads cannot be shared by %d key/value heads", m.Heads, m.KVHeads)
	}
	return nil
}

// HeadDim is the size of one attention head.
func (m Transformer) HeadDim() int64 { return m.Hidden / m.Heads }

// KVDim is the width of the key and value projections.
func (m Transformer) KVDim() int64 { return m.normalized().KVHeads * m.HeadDim() }

// Weight is one parameter tensor, named as in Hugging Face's LlamaForCausalLM.
type Weight struct {
	Name  string
	Shape []int64
}

// Numel is the weight's element count.
func (p Weight) Numel() int64 { return numel(p.Shape...) }

// Weights lists the parameter tensors in registration order, the order in
// which model.to("cuda") allocates them.
func (m Transformer) Weights() []Weight {
	m = m.normalized()
	h, kv, f := m.Hidden, m.KVDim(), m.MLP
	ps := []Weight{{"model.embed_tokens.weight", []int64{m.Vocab, h}}}
	for i := range m.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		ps = append(ps,
			Weight{p + "self_attn.q_proj.weight", []int64{h, h}},
			Weight{p + "self_attn.k_proj.weight", []int64{kv, h}},
			Weight{p + "self_attn.v_proj.weight", []int64{kv, h}},
			Weight{p + "self_attn.o_proj.weight", []int64{h, h}},
			Weight{p + "mlp.gate_proj.weight", []int64{f, h}},
			Weight{p + "mlp.up_proj.weight", []int64{f, h}},
			Weight{p + "mlp.down_proj.weight", []int64{h, f}},
			Weight{p + "input_layernorm.weight", []int64{h}},
			Weight{p + "post_attention_layernorm.weight", []int64{h}},
		)
	}
	return append(ps,
		Weight{"model.norm.weight", []int64{h}},
		Weight{"lm_head.weight", []int64{m.Vocab, h}})
}

// NumParams is the parameter count:
// 2·V·h + L·(2·h² + 2·h·kv + 3·h·f + 2·h) + h.
func (m Transformer) NumParams() int64 {
	m = m.normalized()
	h := m.Hidden
	perLayer := 2*h*h + 2*h*m.KVDim() + 3*h*m.MLP + 2*h
	return 2*m.Vocab*h + m.Layers*perLayer + h
}

// paramsPerLayer are the parameters of one block (layer i's entries of
// Params, in order).
const paramsPerLayer = 9

// Layer-parameter indexes within a block's paramsPerLayer entries.
const (
	pQ = iota
	pK
	pV
	pO
	pGate
	pUp
	pDown
	pNorm1
	pNorm2
)

// Batch is the input of a forward pass: Batch sequences of Seq tokens.
type Batch struct {
	Batch, Seq int64
}

// Tokens is Batch·Seq.
func (b Batch) Tokens() int64 { return b.Batch * b.Seq }

// Memory is where a training run's memory goes, by the formulas the
// workload follows (bytes).
type Memory struct {
	Params    int64 // parameter count
	Weights   int64 // parameters in the model dtype
	Gradients int64 // .grad of every parameter, model dtype
	Master    int64 // fp32 master weights (mixed precision only)
	Optimizer int64 // AdamW exp_avg and exp_avg_sq, fp32 under mixed precision
	// Persistent is what lives across steps: weights, gradients (until
	// zero_grad), master weights and optimizer state.
	Persistent int64
	// LayerActivations is what one block keeps for backward: its input and
	// the saved intermediates (attention scores, softmax, dropout masks,
	// MLP intermediates).
	LayerActivations int64
	// LayerInput is the part of LayerActivations that activation
	// checkpointing keeps: the block's input.
	LayerInput int64
	// Head is the peak of the final norm, LM head and loss in forward:
	// logits in the model dtype, their fp32 copy and the fp32 log-softmax.
	Head int64
}

// TrainingMemory applies the formulas for a training step of the shape:
// weights and gradients in dtype; under mixed precision (a 16-bit dtype)
// fp32 master weights and fp32 AdamW state, so 2+2+4+4+4 = 16 bytes per
// parameter, as with fp32 training (4+4+4+4).
func TrainingMemory(m Transformer, b Batch, dt DType, dropout bool) Memory {
	m = m.normalized()
	n := m.NumParams()
	mem := Memory{Params: n, Weights: n * dt.Size, Gradients: n * dt.Size}
	state := dt.Size
	if mixedPrecision(dt) {
		mem.Master = 4 * n
		state = 4
	}
	mem.Optimizer = 2 * state * n
	mem.Persistent = mem.Weights + mem.Gradients + mem.Master + mem.Optimizer
	mem.LayerActivations = layerActivations(m, b, dt, dropout)
	mem.LayerInput = b.Tokens() * m.Hidden * dt.Size
	mem.Head = b.Tokens() * m.Vocab * (dt.Size + 4 + 4)
	return mem
}

// layerActivations is what one block's forward leaves for backward:
// its input, the normalized inputs of attention and MLP, q, k (rotated)
// and v, the fp32 softmax, the attention probabilities, the attention
// output before o_proj, the residual sum, gate, up, silu(gate) and their
// product, each RMSNorm's fp32 rstd, and with dropout the attention-
// probability mask and two hidden-state masks.
func layerActivations(m Transformer, b Batch, dt DType, dropout bool) int64 {
	t, h, kv, f, p := b.Tokens(), m.Hidden, m.KVDim(), m.MLP, dt.Size
	scores := b.Batch * m.Heads * b.Seq * b.Seq
	n := 6*t*h*p + 2*t*kv*p + 2*t*4 + scores*(4+p) + 4*t*f*p
	if dropout {
		n += scores + 2*t*h
	}
	return n
}

// mixedPrecision: 16-bit model weights are trained against fp32 master
// weights.
func mixedPrecision(dt DType) bool { return dt.Size == 2 }
