package workload

// The simulated model code: a LLaMA-style transformer in eager PyTorch
// (model.py), driven by a training script (train.py) or a generation loop
// (generate.py). Each function below allocates and frees what the
// corresponding PyTorch code allocates and frees, in the same order, under
// the Python frames that code would have, so that the recorded snapshot
// reads like one taken from the real program.

// Source files named in the stack frames.
const (
	srcTrain      = "train.py"
	srcGenerate   = "generate.py"
	srcModel      = "model.py"
	srcMixed      = "mixed_precision.py"
	srcModule     = "torch/nn/modules/module.py"
	srcLinear     = "torch/nn/modules/linear.py"
	srcSparse     = "torch/nn/modules/sparse.py"
	srcDropout    = "torch/nn/modules/dropout.py"
	srcFunctional = "torch/nn/functional.py"
	srcOptimizer  = "torch/optim/optimizer.py"
	srcAdamW      = "torch/optim/adamw.py"
	srcClipGrad   = "torch/nn/utils/clip_grad.py"
	srcCheckpoint = "torch/utils/checkpoint.py"
	srcAutograd   = "torch/autograd/__init__.py"
	srcTensor     = "torch/_tensor.py"
	srcCUDAMemory = "torch/cuda/memory.py"
)

// cublasWorkspace is the workspace PyTorch gives cuBLAS through the
// caching allocator at the first matmul on a stream (CUBLAS_WORKSPACE_CONFIG
// ":4096:2:16:8": 2 × 4 MiB + 8 × 16 KiB). It is never freed.
const cublasWorkspace = 2*4096*1024 + 8*16*1024

// net is a transformer on the simulated device: its shape, its weights and
// the bookkeeping of one forward pass.
type net struct {
	e       *Env
	m       Transformer // normalized
	dt      DType
	p       int64 // dt.Size
	dropout bool
	params  []Weight
	weights []Tensor
	blasWS  Tensor
}

func newNet(e *Env, m Transformer, dt DType, dropout bool) *net {
	m = m.normalized()
	return &net{e: e, m: m, dt: dt, p: dt.Size, dropout: dropout, params: m.Weights()}
}

// layerParam is the index in params of parameter k of layer i.
func layerParam(i int64, k int) int { return 1 + int(i)*paramsPerLayer + k }

// load is model.to("cuda"): every parameter is copied to the device in
// registration order.
func (n *net) load() {
	e := n.e
	defer e.Call(srcModule, "to", 1355)()
	defer e.Call(srcModule, "_apply", 942)()
	defer e.Call(srcModule, "convert", 1341)()
	n.weights = make([]Tensor, len(n.params))
	for i, p := range n.params {
		n.weights[i] = e.Alloc(p.Numel() * n.p)
		e.Elapse(p.Numel() * n.p / hostToDeviceBytesPerUS)
	}
}

// module enters an nn.Module's forward (through __call__, as Python
// frames show it) and returns the function that leaves it.
func (n *net) module(file string, line int64) func() {
	e := n.e
	a := e.Call(srcModule, "_wrapped_call_impl", 1773)
	b := e.Call(srcModule, "_call_impl", 1784)
	c := e.Call(file, "forward", line)
	return func() { c(); b(); a() }
}

// kernel advances the clock by a kernel's duration (TimeModelBuiltin):
// at least a launch, else its FLOPs at the dtype's dense rate or its bytes
// at the memory bandwidth, whichever is longer.
func (n *net) kernel(flops, bytes int64) {
	rate := halfFLOPsPerUS
	if n.p == 4 {
		rate = fp32FLOPsPerUS
	}
	us := max(kernelLaunchUS, flops/rate, bytes/memoryBytesPerUS)
	n.e.Elapse(us)
}

// alloc allocates a tensor of the model dtype with the given element count.
func (n *net) alloc(elems int64) Tensor { return n.e.Alloc(elems * n.p) }

// linear is nn.Linear on tokens rows: the output, tokens × out.
func (n *net) linear(tokens, in, out int64) Tensor {
	defer n.module(srcLinear, 125)()
	n.ensureWorkspace()
	t := n.alloc(tokens * out)
	n.kernel(2*tokens*in*out, 0)
	return t
}

// ensureWorkspace allocates cuBLAS's workspace at the first matmul.
func (n *net) ensureWorkspace() {
	if n.blasWS.Nil() {
		n.blasWS = n.e.Alloc(cublasWorkspace)
	}
}

// dropoutMask is nn.Dropout in training: a bool mask (kept for backward)
// and the output.
func (n *net) dropoutMask(elems int64) (mask, out Tensor) {
	defer n.module(srcDropout, 70)()
	defer n.e.Call(srcFunctional, "dropout", 1425)()
	mask = n.e.Alloc(elems)
	out = n.alloc(elems)
	n.kernel(0, elems*(2*n.p+1))
	return mask, out
}

// rmsNorm is the RMSNorm module (torch.rms_norm): the output and the fp32
// reciprocal RMS per token, kept for backward.
func (n *net) rmsNorm(tokens int64) (out, rstd Tensor) {
	defer n.module(srcModel, 31)()
	defer n.e.Call(srcFunctional, "rms_norm", 2929)()
	out = n.alloc(tokens * n.m.Hidden)
	rstd = n.e.Alloc(tokens * 4)
	n.kernel(0, 2*tokens*n.m.Hidden*n.p)
	return out, rstd
}

// rmsNormInference is the RMSNorm module without autograd: only the
// output.
func (n *net) rmsNormInference(tokens int64) Tensor {
	defer n.module(srcModel, 31)()
	defer n.e.Call(srcFunctional, "rms_norm", 2929)()
	return n.alloc(tokens * n.m.Hidden)
}

// layerActs are what a block's forward keeps for its backward.
type layerActs struct {
	x                  Tensor // the block's input (kept by the first norm)
	n1, r1             Tensor // input_layernorm output and rstd
	q, k, v            Tensor // rotated q and k, and v
	sm                 Tensor // fp32 softmax output
	dmask              Tensor // attention dropout mask
	probs              Tensor // attention probabilities (after dropout)
	ctx                Tensor // attention output, heads merged
	omask              Tensor // dropout mask after o_proj
	h1                 Tensor // residual sum after attention
	n2, r2             Tensor // post_attention_layernorm output and rstd
	gate, up, act, prd Tensor // MLP: gate, up, silu(gate), silu(gate)*up
	mmask              Tensor // dropout mask after the MLP
}

// all lists the saved tensors (the input last).
func (a *layerActs) all() []Tensor {
	return []Tensor{a.n1, a.r1, a.q, a.k, a.v, a.sm, a.dmask, a.probs, a.ctx, a.omask, a.h1,
		a.n2, a.r2, a.gate, a.up, a.act, a.prd, a.mmask, a.x}
}

// block is one decoder layer's forward in training mode on input x; it
// returns the saved activations and the output. Temporaries are freed as
// soon as PyTorch frees them: the raw attention scores, the masked
// scores, the bf16 probabilities before dropout, the merged heads before
// the copy, the projections before their residual add.
func (n *net) block(b Batch, x Tensor) (acts layerActs, out Tensor) {
	e := n.e
	m := n.m
	t, h, kv, f := b.Tokens(), m.Hidden, m.KVDim(), m.MLP
	scores := b.Batch * m.Heads * b.Seq * b.Seq
	acts.x = x
	defer n.module(srcModel, 117)()

	e.Line(118) // h = self.input_layernorm(x)
	acts.n1, acts.r1 = n.rmsNorm(t)

	e.Line(119) // h = self.self_attn(h, cos, sin, mask)
	var o Tensor
	func() {
		defer n.module(srcModel, 66)()
		e.Line(67)
		q := n.linear(t, h, h)
		e.Line(68)
		k := n.linear(t, h, kv)
		e.Line(69)
		acts.v = n.linear(t, h, kv)
		e.Line(71) // q, k = apply_rotary_pos_emb(q, k, cos, sin)
		func() {
			defer e.Call(srcModel, "apply_rotary_pos_emb", 49)()
			acts.q = n.alloc(t * h)
			e.Line(50)
			acts.k = n.alloc(t * kv)
			n.kernel(0, 3*t*(h+kv)*n.p)
		}()
		e.Free(q, k)
		e.Line(73) // scores = q @ k.transpose(2, 3) * self.scale
		raw := n.alloc(scores)
		n.kernel(2*scores*m.HeadDim(), 0)
		e.Line(74) // scores = scores + mask
		masked := n.alloc(scores)
		e.Free(raw)
		e.Line(75) // probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
		func() {
			defer e.Call(srcFunctional, "softmax", 2140)()
			acts.sm = e.Alloc(scores * 4)
			n.kernel(0, scores*(n.p+4))
		}()
		e.Free(masked)
		probs := n.alloc(scores)
		e.Line(76) // probs = self.attn_dropout(probs)
		if n.dropout {
			acts.dmask, acts.probs = n.dropoutMask(scores)
			e.Free(probs)
		} else {
			acts.probs = probs
		}
		e.Line(77) // out = probs @ v
		ctx := n.alloc(t * h)
		n.kernel(2*scores*m.HeadDim(), 0)
		e.Line(78) // out = out.transpose(1, 2).reshape(b, s, h)
		acts.ctx = n.alloc(t * h)
		e.Free(ctx)
		e.Line(79) // return self.o_proj(out)
		o = n.linear(t, h, h)
	}()
	e.Line(120) // x = x + self.resid_dropout(h)
	if n.dropout {
		var d Tensor
		acts.omask, d = n.dropoutMask(t * h)
		e.Free(o)
		o = d
	}
	acts.h1 = n.alloc(t * h)
	e.Free(o)

	e.Line(121) // h = self.post_attention_layernorm(x)
	acts.n2, acts.r2 = n.rmsNorm(t)

	e.Line(122) // h = self.mlp(h)
	var down Tensor
	func() {
		// return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
		defer n.module(srcModel, 97)()
		e.Line(98)
		acts.gate = n.linear(t, h, f)
		func() {
			defer e.Call(srcFunctional, "silu", 2375)()
			acts.act = n.alloc(t * f)
		}()
		acts.up = n.linear(t, h, f)
		acts.prd = n.alloc(t * f)
		down = n.linear(t, f, h)
	}()
	e.Line(123) // return x + self.resid_dropout(h)
	if n.dropout {
		var d Tensor
		acts.mmask, d = n.dropoutMask(t * h)
		e.Free(down)
		down = d
	}
	out = n.alloc(t * h)
	e.Free(down)
	return acts, out
}

// blockBackward is the autograd engine running one block's backward: g is
// the gradient of its output; it returns the gradient of its input. Each
// step allocates the gradients its backward function produces and frees
// what it consumed, saved tensors included; weight gradients go to grads.
func (n *net) blockBackward(b Batch, layer int64, acts *layerActs, g Tensor, grads *gradients) Tensor {
	e := n.e
	m := n.m
	t, h, kv, f := b.Tokens(), m.Hidden, m.KVDim(), m.MLP
	scores := b.Batch * m.Heads * b.Seq * b.Seq
	mm := func(rows, inner, cols int64) { n.kernel(2*rows*inner*cols, 0) }

	// MLP branch: dropout, down_proj, silu(gate)*up, silu, up/gate_proj.
	gm := g
	if n.dropout {
		gm = n.alloc(t * h)
		e.Free(acts.mmask)
	}
	gPrd := n.alloc(t * f)
	mm(t, h, f)
	grads.accumulate(layerParam(layer, pDown))
	if gm != g {
		e.Free(gm)
	}
	e.Free(acts.prd)
	gAct := n.alloc(t * f)
	gUp := n.alloc(t * f)
	e.Free(gPrd, acts.act)
	gGate := n.alloc(t * f)
	e.Free(gAct, acts.gate)
	gN2 := n.alloc(t * h)
	mm(t, f, h)
	grads.accumulate(layerParam(layer, pUp))
	e.Free(gUp, acts.up)
	gN2b := n.alloc(t * h)
	mm(t, f, h)
	grads.accumulate(layerParam(layer, pGate))
	e.Free(gGate, gN2b, acts.n2) // gN2b is added into gN2 in place
	gH1 := n.alloc(t * h)
	grads.accumulate(layerParam(layer, pNorm2))
	e.Free(gN2, acts.r2, acts.h1, g) // the residual's gradient is added into gH1

	// Attention branch: dropout, o_proj, probs @ v, dropout, softmax,
	// scaling, q @ k^T, rotary, q/k/v_proj.
	ga := gH1
	if n.dropout {
		ga = n.alloc(t * h)
		e.Free(acts.omask)
	}
	gCtx := n.alloc(t * h)
	mm(t, h, h)
	grads.accumulate(layerParam(layer, pO))
	if ga != gH1 {
		e.Free(ga)
	}
	e.Free(acts.ctx)
	gProbs := n.alloc(scores)
	gV := n.alloc(t * kv)
	mm(scores, m.HeadDim(), 2)
	e.Free(gCtx, acts.probs, acts.v)
	if n.dropout {
		gp := n.alloc(scores)
		e.Free(gProbs, acts.dmask)
		gProbs = gp
	}
	g32 := e.Alloc(scores * 4) // the .to(bf16) after softmax, backward
	e.Free(gProbs)
	gs32 := e.Alloc(scores * 4) // softmax backward
	e.Free(g32, acts.sm)
	gs := n.alloc(scores) // softmax's dtype=float32 cast, backward
	e.Free(gs32)
	gRaw := n.alloc(scores) // the scaling
	e.Free(gs)
	gQ := n.alloc(t * h)
	gK := n.alloc(t * kv)
	mm(scores, m.HeadDim(), 2)
	e.Free(gRaw, acts.q, acts.k)
	gQ2 := n.alloc(t * h) // rotary
	gK2 := n.alloc(t * kv)
	e.Free(gQ, gK)
	gN1 := n.alloc(t * h)
	grads.accumulate(layerParam(layer, pQ))
	e.Free(gQ2)
	gN1b := n.alloc(t * h)
	grads.accumulate(layerParam(layer, pK))
	e.Free(gK2, gN1b)
	gN1c := n.alloc(t * h)
	grads.accumulate(layerParam(layer, pV))
	e.Free(gV, gN1c, acts.n1)
	mm(t, h, h+2*kv)
	gX := n.alloc(t * h)
	grads.accumulate(layerParam(layer, pNorm1))
	e.Free(gN1, acts.r1, acts.x, gH1)
	return gX
}

// gradients are the parameters' .grad tensors.
type gradients struct {
	n     *net
	grads []Tensor
}

// accumulate is AccumulateGrad for parameter i: the first gradient of a
// step becomes .grad (an allocation of the parameter's size); later ones
// are added into it in place.
func (g *gradients) accumulate(i int) {
	if g.grads[i].Nil() {
		g.grads[i] = g.n.alloc(g.n.params[i].Numel())
	}
}

// zero is optimizer.zero_grad(set_to_none=True): every .grad is dropped.
func (g *gradients) zero() {
	for i := range g.grads {
		g.n.e.Free(g.grads[i])
		g.grads[i] = Tensor{}
	}
}

// forwardState is what a training forward pass keeps until backward.
type forwardState struct {
	b        Batch
	cos, sin Tensor
	layers   []layerActs
	ckpt     []Tensor // with checkpointing: each block's saved input
	last     Tensor   // the last block's output (kept by the final norm)
	nf, rf   Tensor   // final norm output and rstd
	logp     Tensor   // fp32 log-softmax of the logits
	loss     Tensor
}

// forward is model(input_ids, labels=labels) in training mode: embedding,
// rotary tables and causal mask, the blocks (under activation
// checkpointing only each block's input is kept), the final norm, the LM
// head and the cross-entropy loss.
func (n *net) forward(b Batch, checkpointing bool) *forwardState {
	e := n.e
	m := n.m
	t, h := b.Tokens(), m.Hidden
	fs := &forwardState{b: b}
	defer n.module(srcModel, 171)()
	e.Line(172) // hidden = self.model(input_ids)
	var x Tensor
	func() {
		defer n.module(srcModel, 146)()
		e.Line(147) // x = self.embed_tokens(input_ids)
		func() {
			defer n.module(srcSparse, 190)()
			defer e.Call(srcFunctional, "embedding", 2551)()
			x = n.alloc(t * h)
			n.kernel(0, 2*t*h*n.p)
		}()
		e.Line(148) // cos, sin = self.rotary_emb(x, position_ids)
		func() {
			defer n.module(srcModel, 40)()
			e.Line(42)
			freqs := e.Alloc(b.Tokens() * m.HeadDim() / 2 * 4)
			e.Line(43)
			emb := e.Alloc(b.Tokens() * m.HeadDim() * 4)
			e.Free(freqs)
			e.Line(44)
			fs.cos = n.alloc(b.Tokens() * m.HeadDim())
			fs.sin = n.alloc(b.Tokens() * m.HeadDim())
			e.Free(emb)
		}()
		e.Line(149) // mask = causal_mask(b, s, dtype)
		mask := n.alloc(b.Batch * b.Seq * b.Seq)
		for i := range m.Layers {
			if e.Stopped() {
				return
			}
			e.Progress("forward, layer %d/%d", i+1, m.Layers)
			if checkpointing {
				e.Line(152) // x = checkpoint(layer, x, cos, sin, mask, use_reentrant=False)
				func() {
					defer e.Call(srcCheckpoint, "checkpoint", 495)()
					defer e.Call(srcCheckpoint, "_checkpoint_without_reentrant_generator", 1529)()
					acts, out := n.block(b, x)
					saved := acts.all()
					e.Free(saved[:len(saved)-1]...) // all but the input
					fs.ckpt = append(fs.ckpt, x)
					x = out
				}()
			} else {
				e.Line(154) // x = layer(x, cos, sin, mask)
				acts, out := n.block(b, x)
				fs.layers = append(fs.layers, acts)
				x = out
			}
		}
		e.Free(mask) // the causal mask dies with the model's forward
		fs.last = x
		e.Line(156) // return self.norm(x)
		fs.nf, fs.rf = n.rmsNorm(t)
	}()
	if e.Stopped() {
		return fs
	}
	e.Line(173) // logits = self.lm_head(hidden)
	logits := n.linear(t, h, m.Vocab)
	e.Line(175) // loss = F.cross_entropy(logits.float().view(-1, V), labels.view(-1))
	l32 := e.Alloc(t * m.Vocab * 4)
	e.Free(logits)
	func() {
		defer e.Call(srcFunctional, "cross_entropy", 3494)()
		fs.logp = e.Alloc(t * m.Vocab * 4)
		n.kernel(0, 2*t*m.Vocab*4)
		e.Free(l32)
		fs.loss = e.Alloc(4)
		tw := e.Alloc(4) // nll_loss's total_weight
		e.Free(tw)
	}()
	return fs
}

// backward is loss.backward(), called from the current line: the gradient
// of the loss (made on the calling thread), then the autograd engine (no Python frames) through
// the loss, the LM head, the final norm, the blocks in reverse (each
// recomputed first under checkpointing) and the embedding.
func (n *net) backward(fs *forwardState, grads *gradients) {
	e := n.e
	m := n.m
	b := fs.b
	t, h := b.Tokens(), m.Hidden
	var gLoss Tensor
	func() {
		defer e.Call(srcTensor, "backward", 648)()
		defer e.Call(srcAutograd, "backward", 347)()
		defer e.Call(srcAutograd, "_make_grads", 220)()
		gLoss = e.Alloc(4) // torch.ones_like(loss)
	}()
	e.Thread(func() {
		gLogp := e.Alloc(t * m.Vocab * 4) // nll_loss backward
		e.Free(gLoss)
		g32 := e.Alloc(t * m.Vocab * 4) // log_softmax backward
		e.Free(gLogp, fs.logp)
		gLogits := n.alloc(t * m.Vocab) // .float() backward
		e.Free(g32)
		gNf := n.alloc(t * h) // lm_head backward
		n.kernel(4*t*h*m.Vocab, 0)
		grads.accumulate(len(n.params) - 1)
		e.Free(gLogits, fs.nf)
		g := n.alloc(t * h) // final norm backward
		grads.accumulate(len(n.params) - 2)
		e.Free(gNf, fs.rf)
		for i := m.Layers - 1; i >= 0; i-- {
			if e.Stopped() {
				return
			}
			e.Progress("backward, layer %d/%d", i+1, m.Layers)
			var acts layerActs
			if fs.ckpt != nil {
				// Non-reentrant checkpointing reruns the block's Python
				// forward from the unpack hook to get the saved tensors.
				func() {
					defer e.Call(srcCheckpoint, "unpack_hook", 1132)()
					defer e.Call(srcCheckpoint, "recompute_fn", 1120)()
					var out Tensor
					acts, out = n.block(b, fs.ckpt[i])
					e.Free(out)
				}()
			} else {
				acts = fs.layers[i]
			}
			if i == m.Layers-1 {
				e.Free(fs.last) // kept by the final norm until now
			}
			g = n.blockBackward(b, i, &acts, g, grads)
		}
		e.Free(fs.cos, fs.sin)
		// embedding backward: a dense gradient, after sorting the indices.
		idx := e.Alloc(3 * t * 8)
		grads.accumulate(0)
		e.Free(idx, g)
	})
}

// inputs is what one batch puts on the device: input_ids and labels.
type inputs struct{ ids, labels Tensor }

// toDevice is `batch = {k: v.to("cuda") for k, v in batch.items()}` at
// the given line of the current function.
func (n *net) toDevice(b Batch, line int64) inputs {
	n.e.Line(line)
	return inputs{ids: n.e.Alloc(b.Tokens() * 8), labels: n.e.Alloc(b.Tokens() * 8)}
}
