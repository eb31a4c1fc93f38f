// Package testsnap makes a small snapshot with a known history for the
// tests of the commands that draw and export traces: weights that stay,
// three annotated training steps whose activations come and go, a spike in
// the second step, and an out-of-memory error at the end. Every figure a
// test asserts is written out here by hand, independently of the simulator
// that records the run.
package testsnap

import (
	"errors"
	"testing"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

const (
	MiB = int64(1) << 20
	GiB = int64(1) << 30

	// Capacity is the simulated device's memory.
	Capacity = 4 * GiB
	// Weights: ten 20 MiB blocks, live from the start to the end.
	Weights     = 10 * 20 * MiB
	WeightCount = 10
	// Activations: five 100 MiB blocks per step, freed at its end.
	Activations = 5 * 100 * MiB
	// Spike is one 1 GiB block in the second step.
	Spike = GiB
	// Bias is two small-pool blocks (1000 bytes each, rounded to 1024)
	// live at the end, side by side in one 2 MiB segment.
	Bias        = 2 * 1024
	BiasCount   = 2
	BiasRequest = 1000

	// PeakAllocated is reached after the spike is allocated.
	PeakAllocated = Weights + Activations + Spike
	// FinalAllocated is what stays live after the failed allocation.
	FinalAllocated = Weights + Bias
	// OOMRequest is the allocation that fails (rounded: a multiple of
	// 2 MiB already).
	OOMRequest = 8 * GiB
	// Steps is the number of annotated "step" phases.
	Steps = 3
	// EntryStepUS is the clock's advance per trace entry.
	EntryStepUS = 1000
)

// Fixture is the recorded snapshot and where things happened.
type Fixture struct {
	Snapshot *snapshot.Snapshot
	// PeakIndex is the trace entry after which allocated memory peaked.
	PeakIndex int
	// OOMIndex is the oom entry.
	OOMIndex int
	// Stack ids of the weights, activations, spike and bias allocations,
	// and of the frees.
	WeightStack, ActivationStack, SpikeStack, BiasStack, FreeStack snapshot.StackID
}

// Frames of the stacks, innermost first, as PyTorch stores them.
var (
	WeightFrames = []snapshot.Frame{
		{Name: "empty", Filename: "torch/nn/parameter.py", Line: 40},
		{Name: "__init__", Filename: "model.py", Line: 12},
		{Name: "main", Filename: "train.py", Line: 5},
	}
	ActivationFrames = []snapshot.Frame{
		{Name: "linear", Filename: "torch/nn/functional.py", Line: 100},
		{Name: "forward", Filename: "model.py", Line: 30},
		{Name: "step", Filename: "train.py", Line: 20},
		{Name: "main", Filename: "train.py", Line: 8},
	}
	SpikeFrames = []snapshot.Frame{
		{Name: "matmul", Filename: "torch/functional.py", Line: 200},
		{Name: "attention", Filename: "model.py", Line: 50},
		{Name: "forward", Filename: "model.py", Line: 31},
		{Name: "step", Filename: "train.py", Line: 20},
		{Name: "main", Filename: "train.py", Line: 8},
	}
	FreeFrames = []snapshot.Frame{
		{Name: "backward", Filename: "torch/_tensor.py", Line: 500},
		{Name: "step", Filename: "train.py", Line: 24},
		{Name: "main", Filename: "train.py", Line: 8},
	}
	BiasFrames = []snapshot.Frame{
		{Name: "zeros", Filename: "torch/nn/init.py", Line: 7},
		{Name: "__init__", Filename: "model.py", Line: 13},
		{Name: "main", Filename: "train.py", Line: 5},
	}
)

// Build records the run on PyTorch 2.5's allocator and returns its
// snapshot.
func Build(t testing.TB) *Fixture {
	t.Helper()
	f, err := build()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func build() (*Fixture, error) {
	stacks := snapshot.NewStacks()
	f := &Fixture{
		WeightStack:     stacks.InternFrames(WeightFrames),
		ActivationStack: stacks.InternFrames(ActivationFrames),
		SpikeStack:      stacks.InternFrames(SpikeFrames),
		BiasStack:       stacks.InternFrames(BiasFrames),
		FreeStack:       stacks.InternFrames(FreeFrames),
	}
	const startUS = 1_700_000_000_000_000
	now := int64(startUS)
	clock := func() int64 { now += EntryStepUS; return now }
	a, err := allocator.New(allocator.DefaultConfig(allocator.V2_5), allocator.Options{
		Capacity: Capacity, Clock: clock, Stacks: stacks,
	})
	if err != nil {
		return nil, err
	}
	if err := a.RecordHistory(allocator.HistoryOptions{Enabled: allocator.HistoryAll, Context: allocator.ContextAll}); err != nil {
		return nil, err
	}
	entries := func() int { return len(a.Trace()) }
	var anns []snapshot.Annotation
	for range WeightCount {
		if _, err := a.Malloc(20*MiB, 0, f.WeightStack); err != nil {
			return nil, err
		}
	}
	for step := range Steps {
		anns = append(anns, snapshot.Annotation{TimeUS: now + 1, Name: "step", Stage: "START"})
		var live []uint64
		for range 5 {
			p, err := a.Malloc(100*MiB, 0, f.ActivationStack)
			if err != nil {
				return nil, err
			}
			live = append(live, p)
		}
		if step == 1 {
			p, err := a.Malloc(Spike, 0, f.SpikeStack)
			if err != nil {
				return nil, err
			}
			f.PeakIndex = entries() - 1
			live = append(live, p)
		}
		for _, p := range live {
			if err := a.Free(p, f.FreeStack); err != nil {
				return nil, err
			}
		}
		anns = append(anns, snapshot.Annotation{TimeUS: now, Name: "step", Stage: "END"})
	}
	for range BiasCount {
		if _, err := a.Malloc(BiasRequest, 0, f.BiasStack); err != nil {
			return nil, err
		}
	}
	if _, err := a.Malloc(OOMRequest, 0, f.ActivationStack); err == nil {
		return nil, errors.New("testsnap: the oversized allocation succeeded")
	}
	for i, e := range a.Trace() {
		if e.Action == snapshot.ActionOOM {
			f.OOMIndex = i
		}
	}
	s := a.Snapshot()
	s.Annotations = anns
	s.Features.Annotations = true
	f.Snapshot = s
	return f, nil
}
