package workload

import (
	"errors"
	"fmt"
	"io"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Epoch is where a workload's clock starts (2025-01-01 00:00 UTC, in Unix
// microseconds). Every run starts there, so recordings are reproducible
// byte for byte.
const Epoch int64 = 1735689600000000

// Options set up the simulated process a workload runs in.
type Options struct {
	// Config is the allocator configuration (PYTORCH_CUDA_ALLOC_CONF and
	// the PyTorch version being simulated).
	Config allocator.Config
	// DeviceMemory is the GPU's memory; cudaMalloc fails beyond it.
	DeviceMemory int64
	// MaxEntries bounds the trace ring buffer (_record_memory_history's
	// max_entries); <= 0 keeps every entry.
	MaxEntries int
	// Out receives what the workload prints (print(...) in workload files);
	// nil discards it.
	Out io.Writer
	// Progress, if set, is told what the workload is doing, a few times per
	// step (for a progress line on a terminal).
	Progress func(string)
}

// Env is the simulated Python process a workload runs in: one CUDA device
// driven by PyTorch's caching allocator, with memory history recording on
// from the start (as after
// torch.cuda.memory._record_memory_history(max_entries=...)), a Python call
// stack that names the code doing each allocation, a deterministic clock,
// and the record_function annotations that mark phases.
//
// Like a Python script, a workload stops at the first out-of-memory error:
// every later operation is a no-op, and the state stays as it was at the
// failure (what an except handler calling _dump_snapshot sees, since the
// traceback keeps the tensors alive). OOM reports it.
type Env struct {
	a      *allocator.Allocator
	stacks *snapshot.Stacks
	out    io.Writer
	prog   func(string)

	// now is the clock in Unix microseconds. Every trace entry and
	// annotation takes the current value and advances it by one, so no two
	// events share a timestamp; Elapse models time spent in kernels.
	now int64

	// frames is the Python call stack, outermost first; stack caches its
	// interned id until the stack changes.
	frames   []snapshot.Frame
	stack    snapshot.StackID
	stackOK  bool
	stream   int64
	recorded bool // history recording is on (annotations are kept)
	ann      []snapshot.Annotation

	oom *allocator.OOMError
	err error

	// graphs and mempools number the private pools made so far.
	graphs, mempools int64
}

// NewEnv starts a process on a fresh device with memory history recording
// (enabled="all", context="all", stacks="python").
func NewEnv(o Options) (*Env, error) {
	e := &Env{stacks: snapshot.NewStacks(), out: o.Out, prog: o.Progress, now: Epoch}
	if e.out == nil {
		e.out = io.Discard
	}
	if o.DeviceMemory <= 0 {
		return nil, errors.New("workload: device memory must be positive")
	}
	a, err := allocator.New(o.Config, allocator.Options{
		Capacity: o.DeviceMemory,
		Clock:    e.tick,
		Stacks:   e.stacks,
	})
	if err != nil {
		return nil, err
	}
	e.a = a
	if err := e.RecordHistory(allocator.HistoryOptions{
		Enabled: allocator.HistoryAll, Context: allocator.ContextAll, MaxEntries: o.MaxEntries,
	}); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Env) tick() int64 {
	t := e.now
	e.now++
	return t
}

// Elapse advances the clock by us microseconds: time the device spends in
// kernels between allocator events.
func (e *Env) Elapse(us int64) {
	if us > 0 && !e.Stopped() {
		e.now += us
	}
}

// Allocator is the simulated caching allocator.
func (e *Env) Allocator() *allocator.Allocator { return e.a }

// Out is where the workload prints.
func (e *Env) Out() io.Writer { return e.out }

// Progress reports what the workload is doing, when someone listens.
func (e *Env) Progress(format string, args ...any) {
	if e.prog != nil {
		e.prog(fmt.Sprintf(format, args...))
	}
}

// OOM is the out-of-memory error that stopped the workload, or nil.
func (e *Env) OOM() *allocator.OOMError { return e.oom }

// Err is the error that stopped the workload: an *allocator.OOMError, or a
// failure of the simulation itself.
func (e *Env) Err() error {
	if e.oom != nil {
		return e.oom
	}
	return e.err
}

// Stopped reports whether the workload has stopped (an OOM or an error);
// workloads check it to leave their loops early.
func (e *Env) Stopped() bool { return e.oom != nil || e.err != nil }

// Fail stops the workload with an error.
func (e *Env) Fail(err error) {
	if !e.Stopped() {
		e.err = err
	}
}

// Tensor is a live allocation: a storage's data pointer and size.
type Tensor struct {
	Addr uint64
	Size int64
}

// Nil reports whether the tensor was never allocated (a zero-byte request,
// or the workload had stopped).
func (t Tensor) Nil() bool { return t.Addr == 0 }

// Alloc allocates n bytes on the current stream, as creating a CUDA tensor
// of that many bytes does. The current Python stack is its context.
func (e *Env) Alloc(n int64) Tensor {
	if e.Stopped() || n <= 0 {
		return Tensor{}
	}
	addr, err := e.a.Malloc(n, e.stream, e.Stack())
	if err != nil {
		var oom *allocator.OOMError
		if errors.As(err, &oom) {
			e.oom = oom
		} else {
			e.err = err
		}
		return Tensor{}
	}
	return Tensor{Addr: addr, Size: n}
}

// Free drops the last reference to t (its storage goes back to the cache).
// Freeing a nil tensor does nothing.
func (e *Env) Free(ts ...Tensor) {
	for _, t := range ts {
		if e.Stopped() || t.Nil() {
			continue
		}
		if err := e.a.Free(t.Addr, e.Stack()); err != nil {
			e.err = err
		}
	}
}

// SetStream makes s the current stream (torch.cuda.set_stream) and returns
// the previous one.
func (e *Env) SetStream(s int64) int64 {
	old := e.stream
	e.stream = s
	return old
}

// RecordStream is Tensor.record_stream(s): t is in use on stream s, so its
// memory is reused only after the work queued there so far has finished.
func (e *Env) RecordStream(t Tensor, s int64) {
	if e.Stopped() || t.Nil() {
		return
	}
	if err := e.a.RecordStream(t.Addr, s); err != nil {
		e.err = err
	}
}

// Synchronize is torch.cuda.synchronize(): all queued work has finished,
// so memory waiting on other streams can be reused.
func (e *Env) Synchronize() {
	if !e.Stopped() {
		e.a.CompleteAllStreamEvents()
	}
}

// EmptyCache is torch.cuda.empty_cache().
func (e *Env) EmptyCache() {
	if !e.Stopped() {
		e.a.EmptyCache(e.Stack())
	}
}

// RecordHistory is torch.cuda.memory._record_memory_history.
func (e *Env) RecordHistory(o allocator.HistoryOptions) error {
	if err := e.a.RecordHistory(o); err != nil {
		return err
	}
	e.recorded = o.Enabled != allocator.HistoryOff
	if !e.recorded {
		// Turning recording off drops the history, annotations included.
		e.ann = e.ann[:0]
	}
	return nil
}

// Call pushes a Python frame (a function being entered, at the given line)
// and returns the function that pops it:
//
//	defer e.Call("model.py", "forward", 42)()
func (e *Env) Call(file, name string, line int64) func() {
	e.frames = append(e.frames, snapshot.Frame{Name: name, Filename: file, Line: line})
	e.stackOK = false
	n := len(e.frames)
	return func() {
		e.frames = e.frames[:n-1]
		e.stackOK = false
	}
}

// Line moves the innermost frame to another line of its function.
func (e *Env) Line(line int64) {
	if n := len(e.frames); n > 0 && e.frames[n-1].Line != line {
		e.frames[n-1].Line = line
		e.stackOK = false
	}
}

// Thread runs fn with an empty Python stack, as code on a thread without
// Python frames (the autograd engine's, for backward) runs, and restores
// the stack after.
func (e *Env) Thread(fn func()) {
	saved := e.frames
	e.frames = nil
	e.stackOK = false
	fn()
	e.frames = saved
	e.stackOK = false
}

// Stack returns the interned current Python stack, innermost frame first
// as PyTorch stores it.
func (e *Env) Stack() snapshot.StackID {
	if !e.stackOK {
		rev := make([]snapshot.Frame, len(e.frames))
		for i, f := range e.frames {
			rev[len(rev)-1-i] = f
		}
		e.stack = e.stacks.InternFrames(rev)
		e.stackOK = true
	}
	return e.stack
}

// Annotate opens a record_function range: a START annotation now, and the
// returned function adds the END. Annotations are kept only while history
// is recorded, as PyTorch keeps them. A range open when the workload stops
// still gets its END, as the with-block's exit runs while the exception
// unwinds.
func (e *Env) Annotate(name string) func() {
	if e.Stopped() || !e.recorded {
		return func() {}
	}
	e.annotate(name, "START")
	return func() {
		if e.recorded {
			e.annotate(name, "END")
		}
	}
}

func (e *Env) annotate(name, stage string) {
	e.ann = append(e.ann, snapshot.Annotation{
		Device: e.a.Device().Index(), TimeUS: e.tick(), Name: name, Stage: stage,
	})
}

// Snapshot is torch.cuda.memory._snapshot() at this point, with the
// external annotations where the simulated version has them.
func (e *Env) Snapshot() *snapshot.Snapshot {
	s := e.a.Snapshot()
	if s.Features.Annotations {
		s.Annotations = append([]snapshot.Annotation(nil), e.ann...)
	}
	return s
}

// Pool is a private memory pool the workload made: a CUDA graph's pool
// (torch.cuda.graph, graph_pool_handle) or a torch.cuda.MemPool.
type Pool struct {
	ID   snapshot.PoolID
	Kind allocator.PoolKind
}

// NewGraphPool returns a pool id for a new CUDA graph capture: (n, 0), as
// CUDAGraph::capture_begin makes one when given no pool.
func (e *Env) NewGraphPool() Pool {
	e.graphs++
	return Pool{ID: snapshot.PoolID{e.graphs, 0}, Kind: allocator.PoolKindGraph}
}

// NewMemPool is torch.cuda.MemPool(): a new pool (0, n) with use_count 1.
func (e *Env) NewMemPool() Pool {
	e.mempools++
	p := Pool{ID: snapshot.PoolID{0, e.mempools}, Kind: allocator.PoolKindMemPool}
	if !e.Stopped() {
		if err := e.a.CreatePool(p.ID, p.Kind); err != nil {
			e.err = err
		}
	}
	return p
}

// Capture runs fn as the capture of a CUDA graph into pool p
// (torch.cuda.graph(g, pool=p)): allocations on the current stream go to
// the pool. The graph keeps its use of the pool until ReleasePool.
func (e *Env) Capture(p Pool, fn func()) {
	e.intoPool(p, allocator.StreamFilter{Stream: e.stream}, fn)
}

// UseMemPool runs fn inside torch.cuda.use_mem_pool(p): every allocation
// of the thread goes to the pool; the use taken on entry is given back on
// exit.
func (e *Env) UseMemPool(p Pool, fn func()) {
	e.intoPool(p, allocator.StreamFilter{AllStreams: true}, fn)
	e.ReleasePool(p)
}

func (e *Env) intoPool(p Pool, f allocator.StreamFilter, fn func()) {
	if e.Stopped() {
		return
	}
	if err := e.a.BeginAllocateToPool(p.ID, p.Kind, f); err != nil {
		e.err = err
		return
	}
	fn()
	if err := e.a.EndAllocateToPool(p.ID); err != nil && !e.Stopped() {
		e.err = err
	}
}

// ReleasePool gives back one use of p: a graph's reset() or destruction,
// a MemPool's destruction. At no use left empty_cache() may return the
// pool's free segments.
func (e *Env) ReleasePool(p Pool) {
	if e.Stopped() {
		return
	}
	if err := e.a.ReleasePool(p.ID); err != nil {
		e.err = err
	}
}
