package workload

import "fmt"

// maxBatchTrials bounds FindBatchSize: 2^40 times the starting batch is far
// beyond any device, so reaching it means the shape allocates nothing that
// grows with the batch.
const maxBatchTrials = 40

// FindBatchSize is the batch-size search people run before training (as
// Lightning's batch-size finder does): one training step at the starting
// batch size, then at twice that, and so on, emptying the cache between
// trials, until the device runs out of memory. The run ends at the OOM,
// which the recording keeps.
type FindBatchSize struct {
	Train
}

// Run runs the search on the device.
func (w *FindBatchSize) Run(e *Env) {
	if err := w.Validate(); err != nil {
		e.Fail(err)
		return
	}
	tr := w.setup(e)
	e.Line(102) // batch_size = find_batch_size(model, optimizer, start=...)
	defer e.Call(srcTrain, "find_batch_size", 70)()
	for trial := range maxBatchTrials {
		b := w.Batch
		b.Batch <<= trial
		e.Line(72) // loss = train_step(make_batch(batch_size))
		loss := tr.step(trial, b)
		if e.Stopped() {
			return
		}
		e.Line(73) // del loss; gc.collect(); torch.cuda.empty_cache()
		e.Free(loss)
		func() {
			defer e.Call(srcCUDAMemory, "empty_cache", 222)()
			e.EmptyCache()
		}()
	}
	e.Fail(fmt.Errorf("batch size %d still fits in device memory: this shape does not run out of memory",
		w.Batch.Batch<<(maxBatchTrials-1)))
}
