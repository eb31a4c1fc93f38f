package workload

import (
	"errors"
	"fmt"
)

// OptimizerImpl is the implementation torch.optim.AdamW runs, which decides
// its temporary memory.
type OptimizerImpl string

const (
	// Foreach (PyTorch's default on CUDA) updates all parameters with
	// _foreach kernels; the denominator sqrt(exp_avg_sq) is one temporary
	// per parameter, all alive at once.
	Foreach OptimizerImpl = "foreach"
	// ForLoop (foreach=False) updates one parameter at a time, with two
	// small temporaries each.
	ForLoop OptimizerImpl = "for-loop"
	// Fused (fused=True) runs one kernel per parameter group: no
	// temporaries, but the step counters live on the device.
	Fused OptimizerImpl = "fused"
)

// ParseOptimizerImpl reads an OptimizerImpl.
func ParseOptimizerImpl(s string) (OptimizerImpl, error) {
	switch o := OptimizerImpl(s); o {
	case Foreach, ForLoop, Fused:
		return o, nil
	}
	return "", fmt.Errorf("unknown optimizer implementation %q (want foreach, for-loop or fused)", s)
}

// Train is a training run of a transformer with AdamW: the model is
// loaded, then each step moves a batch to the device, runs forward and
// backward, clips the gradient norm, steps the optimizer and drops the
// gradients (zero_grad(set_to_none=True)). A 16-bit dtype trains with
// fp32 master weights and fp32 optimizer state.
type Train struct {
	Model         Transformer
	Batch         Batch
	DType         DType
	Steps         int
	Checkpointing bool
	Dropout       bool
	ClipGrad      bool
	Optimizer     OptimizerImpl
	// SeqLens, if set, gives each step's sequence length (padded to the
	// longest sequence of its batch) instead of Batch.Seq.
	SeqLens func(step int) int64
}

// Validate checks the run's parameters.
func (w *Train) Validate() error {
	if err := w.Model.Validate(); err != nil {
		return err
	}
	if w.Batch.Batch < 1 || w.Batch.Seq < 1 || w.Steps < 1 {
		return errors.New("batch, sequence length and steps must be positive")
	}
	if w.DType.Size == 0 {
		return errors.New("no dtype")
	}
	if w.Optimizer == "" {
		w.Optimizer = Foreach
	}
	_, err := ParseOptimizerImpl(string(w.Optimizer))
	return err
}

// Memory is what the formulas say the run needs (at the full sequence
// length).
func (w *Train) Memory() Memory { return TrainingMemory(w.Model, w.Batch, w.DType, w.Dropout) }

// Run runs the training script on the device.
func (w *Train) Run(e *Env) {
	if err := w.Validate(); err != nil {
		e.Fail(err)
		return
	}
	tr := w.setup(e)
	var prevLoss Tensor
	for step := range w.Steps {
		if e.Stopped() {
			return
		}
		b := w.Batch
		if w.SeqLens != nil {
			b.Seq = w.SeqLens(step)
		}
		e.Line(97) // loss = train_step(batch)
		loss := tr.step(step, b)
		e.Free(prevLoss) // the previous loss dies when the name is rebound
		prevLoss = loss
	}
}

// trainer is the training script's state: model, gradients, optimizer.
type trainer struct {
	w      *Train
	n      *net
	grads  gradients
	mixed  bool
	master []Tensor // fp32 master weights (mixed precision)
	// AdamW state per parameter: exp_avg, exp_avg_sq, and with the fused
	// implementation the device-side step counter.
	expAvg, expAvgSq, stepCount []Tensor
}

// setup runs the script up to the training loop: the model is built and
// moved to the device, then the optimizer (and, under mixed precision,
// the fp32 master weights) is created. It leaves the stack in main().
func (w *Train) setup(e *Env) *trainer {
	e.Call(srcTrain, "<module>", 112) // never popped: the script ends with the run
	e.Call(srcTrain, "main", 88)      // model = Transformer(cfg).to("cuda", dtype)
	n := newNet(e, w.Model, w.DType, w.Dropout)
	tr := &trainer{w: w, n: n, mixed: mixedPrecision(w.DType)}
	tr.grads = gradients{n: n, grads: make([]Tensor, len(n.params))}
	e.Progress("loading %d parameters", n.m.NumParams())
	n.load()
	e.Line(90) // optimizer = MixedPrecisionAdamW(model.parameters()) / AdamW(...)
	if tr.mixed {
		func() {
			defer e.Call(srcMixed, "__init__", 16)() // self.master = [p.detach().float() for p in params]
			tr.master = make([]Tensor, len(n.params))
			for i, p := range n.params {
				tr.master[i] = e.Alloc(p.Numel() * 4)
			}
		}()
	}
	return tr
}

// step is one train_step(batch); it returns the loss, which the caller
// keeps until the next step.
func (tr *trainer) step(step int, b Batch) Tensor {
	e, n := tr.n.e, tr.n
	defer e.Call(srcTrain, "train_step", 50)()
	e.Progress("step %d, batch %d × %d tokens", step+1, b.Batch, b.Seq)
	in := n.toDevice(b, 51)

	e.Line(53)
	endFwd := e.Annotate("forward")
	e.Line(54) // loss = model(batch["input_ids"], labels=batch["labels"])
	fs := n.forward(b, tr.w.Checkpointing)
	endFwd()

	e.Line(55)
	endBwd := e.Annotate("backward")
	e.Line(56) // loss.backward()
	n.backward(fs, &tr.grads)
	endBwd()

	var norm Tensor
	if tr.w.ClipGrad {
		e.Line(57) // torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
		norm = tr.clipGradNorm()
	}
	e.Line(58) // optimizer.step()
	tr.optimizerStep()
	e.Line(59) // optimizer.zero_grad(set_to_none=True)
	func() {
		end := e.Annotate("Optimizer.zero_grad#AdamW.zero_grad")
		defer end()
		defer e.Call(srcOptimizer, "zero_grad", 1004)()
		tr.grads.zero()
	}()
	e.Line(60) // return loss: the batch and the norm die with the frame
	e.Free(in.ids, in.labels, norm)
	return fs.loss
}

// clipGradNorm is clip_grad_norm_: a norm per gradient (_foreach_norm),
// their stack, the total norm, the clip coefficient; the gradients are
// scaled in place. It returns the total norm.
func (tr *trainer) clipGradNorm() Tensor {
	e, n := tr.n.e, tr.n
	defer e.Call(srcClipGrad, "_no_grad_wrapper", 36)()
	defer e.Call(srcClipGrad, "clip_grad_norm_", 215)()
	var total Tensor
	func() {
		defer e.Call(srcClipGrad, "_get_total_norm", 102)()
		norms := make([]Tensor, 0, len(n.params))
		for range n.params {
			norms = append(norms, n.alloc(1))
		}
		e.Line(106)
		stacked := n.alloc(int64(len(norms)))
		total = n.alloc(1)
		e.Free(norms...)
		e.Free(stacked)
	}()
	func() {
		defer e.Call(srcClipGrad, "_clip_grads_with_norm_", 157)()
		denom := n.alloc(1)
		coef := n.alloc(1)
		e.Free(denom)
		e.Line(158)
		clamped := n.alloc(1)
		e.Free(coef)
		e.Line(162) // torch._foreach_mul_(grads, clip_coef_clamped)
		e.Free(clamped)
	}()
	return total
}

// optimizerStep is optimizer.step(). Under mixed precision the wrapper
// gives every fp32 master weight an fp32 copy of the gradient, steps AdamW
// on the master weights and copies them back into the model (in place).
func (tr *trainer) optimizerStep() {
	e, n := tr.n.e, tr.n
	if !tr.mixed {
		tr.adamw(n.weights, tr.grads.grads, tr.w.DType.Size)
		return
	}
	defer e.Call(srcMixed, "step", 40)()
	e.Line(41) // m.grad = p.grad.float() for every parameter
	g32 := make([]Tensor, len(n.params))
	for i, p := range n.params {
		if !tr.grads.grads[i].Nil() {
			g32[i] = e.Alloc(p.Numel() * 4)
		}
	}
	e.Line(43) // self.optimizer.step()
	tr.adamw(tr.master, g32, 4)
	e.Line(45) // p.data.copy_(m.data) for every parameter: in place
	e.Line(46) // m.grad = None for every master weight
	e.Free(g32...)
}

// adamw is torch.optim.AdamW.step over params with gradients grads and
// state of stateSize bytes per element. The first step creates the state
// in _init_group: exp_avg and exp_avg_sq (zeros_like), and a device step
// counter with the fused implementation.
func (tr *trainer) adamw(params, grads []Tensor, stateSize int64) {
	e, n := tr.n.e, tr.n
	end := e.Annotate("Optimizer.step#AdamW.step")
	defer end()
	defer e.Call(srcOptimizer, "wrapper", 485)()
	defer e.Call(srcOptimizer, "_use_grad", 79)()
	defer e.Call(srcAdamW, "step", 209)()
	if tr.expAvg == nil {
		tr.expAvg = make([]Tensor, len(params))
		tr.expAvgSq = make([]Tensor, len(params))
		tr.stepCount = make([]Tensor, len(params))
		func() {
			defer e.Call(srcAdamW, "_init_group", 155)()
			for i, p := range n.params {
				if grads[i].Nil() {
					continue
				}
				if tr.w.Optimizer == Fused {
					e.Line(160) // state["step"] = torch.zeros((), device=p.device)
					tr.stepCount[i] = e.Alloc(4)
				}
				e.Line(166) // state["exp_avg"] = torch.zeros_like(p)
				tr.expAvg[i] = e.Alloc(p.Numel() * stateSize)
				e.Line(170) // state["exp_avg_sq"] = torch.zeros_like(p)
				tr.expAvgSq[i] = e.Alloc(p.Numel() * stateSize)
			}
		}()
	}
	e.Line(230) // adamw(params_with_grad, grads, exp_avgs, exp_avg_sqs, ...)
	defer e.Call(srcAdamW, "adamw", 775)()
	var total int64
	for _, p := range n.params {
		total += p.Numel() * stateSize
	}
	switch tr.w.Optimizer {
	case Foreach:
		defer e.Call(srcAdamW, "_multi_tensor_adamw", 611)()
		sqrt := make([]Tensor, 0, len(params))
		for i, p := range n.params {
			if !grads[i].Nil() {
				sqrt = append(sqrt, e.Alloc(p.Numel()*stateSize)) // torch._foreach_sqrt(exp_avg_sqs)
			}
		}
		n.kernel(0, 6*total)
		e.Line(630) // del exp_avg_sq_sqrt
		e.Free(sqrt...)
	case ForLoop:
		defer e.Call(srcAdamW, "_single_tensor_adamw", 420)()
		for i, p := range n.params {
			if grads[i].Nil() {
				continue
			}
			sq := e.Alloc(p.Numel() * stateSize) // exp_avg_sq.sqrt()
			denom := e.Alloc(p.Numel() * stateSize)
			e.Free(sq)
			n.kernel(0, 6*p.Numel()*stateSize)
			e.Free(denom)
		}
	case Fused:
		defer e.Call(srcAdamW, "_fused_adamw", 720)()
		n.kernel(0, 5*total)
	}
}
