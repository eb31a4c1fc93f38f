package live

import (
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/internal/testsnap"
	"github.com/memstat/memstat/pkg/snapshot"
)

func TestFixtureMoments(t *testing.T) {
	fx := testsnap.Build(t)
	peak, err := At(fx.Snapshot, 0, Moment{Kind: Peak})
	if err != nil {
		t.Fatal(err)
	}
	if peak.Index != fx.PeakIndex || peak.Allocated != testsnap.PeakAllocated {
		t.Errorf("peak: %d bytes after entry %d, want %d after %d", peak.Allocated, peak.Index, testsnap.PeakAllocated, fx.PeakIndex)
	}
	groups := peak.ByStack()
	want := []StackGroup{
		{fx.SpikeStack, 1, testsnap.Spike},
		{fx.ActivationStack, 5, testsnap.Activations},
		{fx.WeightStack, testsnap.WeightCount, testsnap.Weights},
	}
	if len(groups) != len(want) {
		t.Fatalf("groups %+v, want %+v", groups, want)
	}
	for i := range want {
		if groups[i] != want[i] {
			t.Errorf("group %d: %+v, want %+v", i, groups[i], want[i])
		}
	}

	end, err := At(fx.Snapshot, 0, Moment{Kind: End})
	if err != nil {
		t.Fatal(err)
	}
	if end.Allocated != testsnap.FinalAllocated || len(end.Blocks) != testsnap.WeightCount+testsnap.BiasCount {
		t.Errorf("end: %d bytes in %d blocks, want %d in %d", end.Allocated, len(end.Blocks), testsnap.FinalAllocated, testsnap.WeightCount+testsnap.BiasCount)
	}
	// Right after the first weight is allocated.
	ev, err := At(fx.Snapshot, 0, Moment{Kind: Event, Index: 1})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Allocated != 20*testsnap.MiB || len(ev.Blocks) != 1 || ev.Blocks[0].Stack != fx.WeightStack {
		t.Errorf("entry 1: %d bytes in %+v", ev.Allocated, ev.Blocks)
	}
	if _, err := At(fx.Snapshot, 0, Moment{Kind: Event, Index: 1 << 20}); err == nil {
		t.Error("an entry past the trace gave no error")
	}
}

// TestBeforeTraceBlocks: a trace that starts mid-run, after the first
// step's activations were allocated: when they are still live, their stack
// is unknown (the trace shows only where they are freed), while the
// weights, live to the end, keep the stack the final snapshot gives them.
func TestBeforeTraceBlocks(t *testing.T) {
	fx := testsnap.Build(t)
	s := *fx.Snapshot
	full := s.Traces[0].Entries()
	cut := -1
	for i, e := range full {
		if e.Action == snapshot.ActionFreeRequested {
			cut = i
			break
		}
	}
	s.Traces = []*snapshot.Trace{snapshot.TraceOf(full[cut:]...)}
	st, err := At(&s, 0, Moment{Kind: Event, Index: 0})
	if err != nil {
		t.Fatal(err)
	}
	byStack := map[snapshot.StackID]int64{}
	for _, g := range st.ByStack() {
		byStack[g.Stack] = g.Bytes
	}
	if byStack[fx.FreeStack] != 0 {
		t.Errorf("%d bytes charged to the free's stack", byStack[fx.FreeStack])
	}
	if byStack[snapshot.NoStack] != 4*100*testsnap.MiB || byStack[fx.WeightStack] != testsnap.Weights {
		t.Errorf("by stack %v: want the 4 live activations without a stack and the weights with theirs", byStack)
	}
}

func TestParseMoment(t *testing.T) {
	for in, want := range map[string]Moment{"peak": {Kind: Peak}, "end": {Kind: End}, "42": {Kind: Event, Index: 42}} {
		if got, err := ParseMoment(in); err != nil || got != want {
			t.Errorf("ParseMoment(%q) = %+v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"-1", "top", "1.5"} {
		if _, err := ParseMoment(bad); err == nil {
			t.Errorf("ParseMoment(%q) succeeded", bad)
		}
	}
}

// TestRealBlocksAddUp: on every real snapshot, the allocated blocks at the
// peak and at the end add up to the replay's allocated bytes, and the end
// is the file's own active_allocated blocks.
func TestRealBlocksAddUp(t *testing.T) {
	for _, f := range realdata.Files(t) {
		s, err := snapshot.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		for d := range s.Devices() {
			if s.Trace(d).Len() == 0 && len(s.DeviceSegments(d)) == 0 {
				continue
			}
			for _, m := range []Moment{{Kind: Peak}, {Kind: End}} {
				st, err := At(s, d, m)
				if err != nil {
					t.Fatalf("%s device %d %s: %v", f, d, m, err)
				}
				var sum int64
				for _, b := range st.Blocks {
					sum += b.Size
				}
				if sum != st.Allocated {
					t.Errorf("%s device %d %s: blocks add up to %d, allocated is %d", f, d, m, sum, st.Allocated)
				}
				if m.Kind != End {
					continue
				}
				var inFile int64
				for _, seg := range s.DeviceSegments(d) {
					for _, b := range seg.Blocks {
						if b.State == snapshot.ActiveAllocated {
							inFile += b.Size
						}
					}
				}
				if inFile != sum {
					t.Errorf("%s device %d: end has %d allocated bytes, the file %d", f, d, sum, inFile)
				}
			}
		}
	}
}
