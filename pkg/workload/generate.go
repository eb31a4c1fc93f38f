package workload

import (
	"errors"
	"fmt"
)

// KVCache is how generation keeps past keys and values.
type KVCache string

const (
	// DynamicCache grows each layer's keys and values by one token per
	// decode step with torch.cat: a new, slightly larger tensor every step
	// and the old one freed, which fragments the cache.
	DynamicCache KVCache = "dynamic"
	// StaticCache preallocates every layer's keys and values for the
	// longest sequence and writes new tokens in place.
	StaticCache KVCache = "static"
)

// ParseKVCache reads a KVCache.
func ParseKVCache(s string) (KVCache, error) {
	switch c := KVCache(s); c {
	case DynamicCache, StaticCache:
		return c, nil
	}
	return "", fmt.Errorf("unknown kv cache %q (want dynamic or static)", s)
}

// Generate is inference with a KV cache: the model is loaded, the prompts
// (Batch × Prompt tokens) are run through it at once (prefill), then
// NewTokens tokens are sampled one at a time (decode), each step reading
// and extending the cache.
type Generate struct {
	Model     Transformer
	Batch     int64
	Prompt    int64
	NewTokens int64
	DType     DType
	Cache     KVCache
	// CUDAGraphs captures the decode step as CUDA graphs after the
	// prefill, one per batch size (1, 2, 4, ... up to Batch, largest
	// first, as vLLM captures its batch sizes), each into a private pool
	// of its own; decode then replays the graph of Batch, allocating only
	// outside it. Graphs need a static cache: it implies StaticCache.
	CUDAGraphs bool
}

// Validate checks the run's parameters.
func (w *Generate) Validate() error {
	if err := w.Model.Validate(); err != nil {
		return err
	}
	if w.Batch < 1 || w.Prompt < 1 || w.NewTokens < 0 {
		return errors.New("batch and prompt length must be positive, new tokens not negative")
	}
	if w.DType.Size == 0 {
		return errors.New("no dtype")
	}
	if w.Cache == "" || w.CUDAGraphs {
		w.Cache = DynamicCache
		if w.CUDAGraphs {
			w.Cache = StaticCache
		}
	}
	_, err := ParseKVCache(string(w.Cache))
	return err
}

// CacheBytes is the KV cache at its longest: keys and values of every
// layer for Prompt+NewTokens tokens.
func (w *Generate) CacheBytes() int64 {
	return 2 * w.Model.Layers * w.Batch * (w.Prompt + w.NewTokens) * w.Model.KVDim() * w.DType.Size
}

// generator is the generation script's state.
type generator struct {
	w    *Generate
	n    *net
	b    int64    // sequences in the batch being run (a captured size)
	k, v []Tensor // per layer
	max  int64    // static cache length
}

// Run runs the generation script on the device.
func (w *Generate) Run(e *Env) {
	if err := w.Validate(); err != nil {
		e.Fail(err)
		return
	}
	e.Call(srcGenerate, "<module>", 80)
	e.Call(srcGenerate, "main", 62) // model = Transformer(cfg).to("cuda", dtype).eval()
	n := newNet(e, w.Model, w.DType, false)
	e.Progress("loading %d parameters", n.m.NumParams())
	n.load()
	e.Line(64) // input_ids = tokenizer(prompts, return_tensors="pt").input_ids.to("cuda")
	ids := e.Alloc(w.Batch * w.Prompt * 8)
	e.Line(66) // out = generate(model, input_ids, max_new_tokens)
	g := &generator{w: w, n: n, b: w.Batch, k: make([]Tensor, w.Model.Layers), v: make([]Tensor, w.Model.Layers)}
	defer e.Call(srcGenerate, "generate", 40)()
	if w.Cache == StaticCache {
		e.Line(41) // cache = StaticCache(config, batch, max_cache_len)
		g.max = w.Prompt + w.NewTokens
		func() {
			defer e.Call(srcGenerate, "__init__", 22)()
			for i := range g.k {
				g.k[i] = n.alloc(w.Batch * g.max * n.m.KVDim())
				g.v[i] = n.alloc(w.Batch * g.max * n.m.KVDim())
			}
		}()
	}
	e.Line(43)
	end := e.Annotate("prefill")
	e.Line(44) // logits = model(input_ids, cache)
	e.Progress("prefill of %d tokens", w.Prompt)
	logits := g.forward(w.Prompt, w.Prompt)
	end()
	e.Line(45) // next = sample(logits)
	next := g.sample(logits)
	var graphs map[int64]Tensor
	if w.CUDAGraphs {
		graphs = g.capture()
	}
	e.Line(46)
	end = e.Annotate("decode")
	defer end()
	for i := range w.NewTokens {
		if e.Stopped() {
			return
		}
		e.Progress("decode step %d/%d", i+1, w.NewTokens)
		e.Line(48) // input_ids = torch.cat([input_ids, next], dim=-1)
		longer := e.Alloc(w.Batch * (w.Prompt + i + 1) * 8)
		e.Free(ids)
		ids = longer
		if graphs != nil {
			// graph.replay(): no allocation; the logits are the graph's
			// static output, which lives on in its pool.
			e.Line(49)
			e.Free(next)
			e.Line(50)
			next = g.sampleFrom(graphs[w.Batch], false)
			continue
		}
		e.Line(49) // logits = model(next, cache)
		logits := g.forward(1, w.Prompt+i+1)
		e.Free(next)
		e.Line(50) // next = sample(logits)
		next = g.sample(logits)
	}
}

// forward is the model under torch.inference_mode() on q new tokens per
// sequence, with length tokens in the cache after them; it returns the
// fp32 logits of the last position. Nothing is kept for backward:
// intermediates die as soon as their last use does.
func (g *generator) forward(q, length int64) Tensor {
	e, n, m := g.n.e, g.n, g.n.m
	b := g.b
	t, h := b*q, m.Hidden
	defer n.module(srcModel, 171)()
	e.Line(172)
	var x Tensor
	func() {
		defer n.module(srcModel, 146)()
		e.Line(147) // x = self.embed_tokens(input_ids)
		func() {
			defer n.module(srcSparse, 190)()
			defer e.Call(srcFunctional, "embedding", 2551)()
			x = n.alloc(t * h)
		}()
		e.Line(148) // cos, sin = self.rotary_emb(x, position_ids)
		cos, sin := n.alloc(t*m.HeadDim()), n.alloc(t*m.HeadDim())
		e.Line(149) // mask = causal_mask(b, q, length, dtype)
		keys := length
		if g.w.Cache == StaticCache {
			keys = g.max // a static cache is attended in full, masked
		}
		mask := n.alloc(b * q * keys)
		for i := range m.Layers {
			if e.Stopped() {
				return
			}
			e.Line(154) // x = layer(x, cos, sin, mask, cache)
			x = g.block(i, q, keys, x)
		}
		e.Free(mask, cos, sin)
		e.Line(156) // return self.norm(x)
		nf := n.rmsNormInference(t)
		e.Free(x)
		x = nf
	}()
	e.Line(173) // logits = self.lm_head(hidden[:, -1:, :]).float()
	logits := n.linear(b, h, m.Vocab)
	e.Free(x)
	l32 := e.Alloc(b * m.Vocab * 4)
	e.Free(logits)
	return l32
}

// block is one decoder layer at inference on x (q tokens per sequence,
// keys cached positions attended): the cache is extended, x is consumed
// and the output returned.
func (g *generator) block(layer, q, keys int64, x Tensor) Tensor {
	e, n, m := g.n.e, g.n, g.n.m
	b := g.b
	t, h, kv, f := b*q, m.Hidden, m.KVDim(), m.MLP
	scores := b * m.Heads * q * keys
	defer n.module(srcModel, 117)()
	e.Line(118)
	n1 := n.rmsNormInference(t)
	e.Line(119)
	var o Tensor
	func() {
		defer n.module(srcModel, 66)()
		e.Line(67)
		qp := n.linear(t, h, h)
		e.Line(68)
		kp := n.linear(t, h, kv)
		e.Line(69)
		vp := n.linear(t, h, kv)
		e.Line(71)
		qr, kr := n.alloc(t*h), n.alloc(t*kv)
		e.Free(qp, kp)
		e.Line(72) // k, v = cache.update(k, v, layer)
		func() {
			defer e.Call(srcGenerate, "update", 31)()
			if g.w.Cache == StaticCache {
				// k_out.index_copy_(2, cache_position, k): in place
				e.Free(kr, vp)
				return
			}
			if g.k[layer].Nil() {
				g.k[layer], g.v[layer] = kr, vp // the first tokens become the cache
				return
			}
			e.Line(33) // self.keys[layer] = torch.cat([self.keys[layer], k], dim=-2)
			nk := n.alloc(b * keys * kv)
			e.Free(g.k[layer], kr)
			g.k[layer] = nk
			e.Line(34)
			nv := n.alloc(b * keys * kv)
			e.Free(g.v[layer], vp)
			g.v[layer] = nv
		}()
		e.Line(73)
		raw := n.alloc(scores)
		e.Free(qr)
		e.Line(74)
		masked := n.alloc(scores)
		e.Free(raw)
		e.Line(75)
		sm := e.Alloc(scores * 4)
		e.Free(masked)
		probs := n.alloc(scores)
		e.Free(sm)
		e.Line(77)
		ctx := n.alloc(t * h)
		e.Free(probs)
		e.Line(78)
		ctx2 := n.alloc(t * h)
		e.Free(ctx)
		e.Line(79)
		o = n.linear(t, h, h)
		e.Free(ctx2)
	}()
	e.Free(n1)
	e.Line(120)
	h1 := n.alloc(t * h)
	e.Free(o, x)
	e.Line(121)
	n2 := n.rmsNormInference(t)
	e.Line(122)
	var down Tensor
	func() {
		defer n.module(srcModel, 97)()
		e.Line(98)
		gate := n.linear(t, h, f)
		var act Tensor
		func() {
			defer e.Call(srcFunctional, "silu", 2375)()
			act = n.alloc(t * f)
		}()
		e.Free(gate)
		up := n.linear(t, h, f)
		prd := n.alloc(t * f)
		e.Free(act, up)
		down = n.linear(t, f, h)
		e.Free(prd)
	}()
	e.Free(n2)
	e.Line(123)
	out := n.alloc(t * h)
	e.Free(down, h1)
	return out
}

// sample is `torch.multinomial(torch.softmax(logits / temperature, -1), 1)`:
// the next token of each sequence; the logits die.
func (g *generator) sample(logits Tensor) Tensor { return g.sampleFrom(logits, true) }

// sampleFrom is sample; a graph's static logits (drop false) stay.
func (g *generator) sampleFrom(logits Tensor, drop bool) Tensor {
	e := g.n.e
	b, v := g.b, g.n.m.Vocab
	defer e.Call(srcGenerate, "sample", 12)()
	scaled := e.Alloc(b * v * 4)
	if drop {
		e.Free(logits)
	}
	probs := e.Alloc(b * v * 4)
	e.Free(scaled)
	e.Line(13)
	next := e.Alloc(b * 8)
	e.Free(probs)
	return next
}

// capture records the decode step as CUDA graphs, one per batch size from
// Batch down by halves to 1, each into a private pool of its own
// (torch.cuda.graph(g) with no pool argument), and returns each graph's
// static output logits. The graphs stay alive (their pools keep their
// memory) for the rest of the run.
func (g *generator) capture() map[int64]Tensor {
	e, w := g.n.e, g.w
	defer e.Call(srcGenerate, "capture_graphs", 54)()
	end := e.Annotate("cuda graph capture")
	defer end()
	out := map[int64]Tensor{}
	for _, bs := range w.GraphBatchSizes() {
		if e.Stopped() {
			break
		}
		e.Progress("capturing the decode graph of batch %d", bs)
		e.Line(56) // with torch.cuda.graph(graphs[bs]): logits[bs] = model(static_ids[:bs], cache)
		g.b = bs
		p := e.NewGraphPool()
		e.Capture(p, func() { out[bs] = g.forward(1, g.max) })
	}
	g.b = w.Batch
	return out
}

// GraphBatchSizes are the batch sizes CUDAGraphs captures, in capture
// order: Batch, then the powers of two below it down to 1.
func (w *Generate) GraphBatchSizes() []int64 {
	out := []int64{w.Batch}
	p := int64(1)
	for p*2 < w.Batch {
		p *= 2
	}
	for ; p >= 1 && p < w.Batch; p /= 2 {
		out = append(out, p)
	}
	return out
}
