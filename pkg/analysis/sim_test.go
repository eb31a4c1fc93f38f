package analysis

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

const mib = allocator.MiB

// simRun drives the simulator and returns the snapshot it would dump.
type simRun struct {
	t      *testing.T
	a      *allocator.Allocator
	stacks *snapshot.Stacks
}

func newSimRun(t *testing.T, conf string, capacity int64, base uint64) *simRun {
	t.Helper()
	cfg, err := allocator.ParseConfig(conf, allocator.V2_10)
	if err != nil {
		t.Fatal(err)
	}
	st := snapshot.NewStacks()
	a, err := allocator.New(cfg, allocator.Options{Capacity: capacity, BaseAddress: base, Stacks: st})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.RecordHistory(allocator.HistoryOptions{Enabled: allocator.HistoryAll, Context: allocator.ContextAll}); err != nil {
		t.Fatal(err)
	}
	return &simRun{t: t, a: a, stacks: st}
}

// at is a stack: the user's line in train.py under a torch frame.
func (r *simRun) at(line int64) snapshot.StackID {
	return r.stacks.InternFrames([]snapshot.Frame{
		{Name: "empty", Filename: "/v/site-packages/torch/functional.py", Line: 12},
		{Name: "step", Filename: "/home/me/train.py", Line: line},
		{Name: "<module>", Filename: "/home/me/train.py", Line: 1},
	})
}

func (r *simRun) alloc(size int64, line int64) uint64 {
	r.t.Helper()
	addr, err := r.a.Malloc(size, 0, r.at(line))
	if err != nil {
		r.t.Fatalf("Malloc(%d): %v", size, err)
	}
	return addr
}

func (r *simRun) free(addr uint64) {
	r.t.Helper()
	if err := r.a.Free(addr, snapshot.NoStack); err != nil {
		r.t.Fatal(err)
	}
}

func (r *simRun) oom(size int64, line int64) *allocator.OOMError {
	r.t.Helper()
	_, err := r.a.Malloc(size, 0, r.at(line))
	var oom *allocator.OOMError
	if !errors.As(err, &oom) {
		r.t.Fatalf("Malloc(%d) = %v, want an OOMError", size, err)
	}
	return oom
}

func (r *simRun) replay() *Replayed {
	r.t.Helper()
	rp, err := Replay(r.a.Snapshot(), 0)
	if err != nil {
		r.t.Fatal(err)
	}
	return rp
}

// TestOOMDifferential: the message rebuilt from the trace is the one the
// simulator raised, word for word, for too much live memory (default and
// expandable segments) and for fragmentation; the verdicts and advice
// follow the figures.
func TestOOMDifferential(t *testing.T) {
	t.Run("live memory", func(t *testing.T) {
		r := newSimRun(t, "", 100*mib, 0)
		r.alloc(40*mib, 10)
		r.alloc(40*mib, 11)
		err := r.oom(30*mib, 12)
		rep, e := ExplainOOMs(r.replay(), NewFrames(r.stacks, false))
		if e != nil {
			t.Fatal(e)
		}
		if len(rep.OOMs) != 1 || rep.AtPeak != nil {
			t.Fatalf("report %+v", rep)
		}
		o := rep.OOMs[0]
		if o.Message != err.Error() {
			t.Errorf("message\n got %s\nwant %s", o.Message, err.Error())
		}
		if o.Verdict != TooMuchLiveMemory || o.Shortfall != 10*mib || o.Allocated != 80*mib || o.DeviceTotal != 100*mib {
			t.Errorf("verdict %s shortfall %d allocated %d total %d", o.Verdict, o.Shortfall, o.Allocated, o.DeviceTotal)
		}
		if o.Site.Filename != "/home/me/train.py" || o.Site.Line != 12 {
			t.Errorf("site %+v", o.Site)
		}
		if !slices.Contains(o.Advice, AdviseReduceBatch) || slices.Contains(o.Advice, AdviseExpandableSegments) {
			t.Errorf("advice %v", o.Advice)
		}
	})
	t.Run("fragmentation", func(t *testing.T) {
		// Six 6 MiB tensors fill two 20 MiB segments; freeing every other
		// one leaves 28 MiB cached in holes of 6-8 MiB while 10 MiB of
		// the 50 MiB device is free: a 16 MiB request fails although 38
		// MiB are free.
		r := newSimRun(t, "", 50*mib, 0)
		var addrs []uint64
		for i := range 6 {
			addrs = append(addrs, r.alloc(6*mib, int64(20+i)))
		}
		for _, i := range []int{0, 2, 3, 5} {
			r.free(addrs[i])
		}
		err := r.oom(16*mib, 30)
		rep, e := ExplainOOMs(r.replay(), NewFrames(r.stacks, false))
		if e != nil {
			t.Fatal(e)
		}
		o := rep.OOMs[0]
		if o.Message != err.Error() {
			t.Errorf("message\n got %s\nwant %s", o.Message, err.Error())
		}
		if o.Verdict != Fragmentation || o.FreeBytes != 28*mib || o.DeviceFree != 10*mib || o.LargestInPool != 8*mib {
			t.Errorf("verdict %s free %d device free %d largest %d", o.Verdict, o.FreeBytes, o.DeviceFree, o.LargestInPool)
		}
		if !slices.Contains(o.Advice, AdviseExpandableSegments) || !slices.Contains(o.Advice, AdviseEmptyCacheUseless) {
			t.Errorf("advice %v", o.Advice)
		}
		if len(o.Holders) != 2 || o.Holders[0].Bytes != 6*mib {
			t.Errorf("holders %+v", o.Holders)
		}
	})
	t.Run("request too large", func(t *testing.T) {
		r := newSimRun(t, "", 100*mib, 0)
		r.alloc(10*mib, 10)
		err := r.oom(200*mib, 11)
		rep, e := ExplainOOMs(r.replay(), NewFrames(r.stacks, false))
		if e != nil {
			t.Fatal(e)
		}
		if o := rep.OOMs[0]; o.Message != err.Error() || o.Verdict != RequestTooLarge || o.Shortfall != 100*mib {
			t.Errorf("verdict %s shortfall %d message %q", o.Verdict, o.Shortfall, o.Message)
		}
	})
	t.Run("expandable", func(t *testing.T) {
		r := newSimRun(t, "expandable_segments:True", 64*mib, 0)
		r.alloc(30*mib, 10)
		r.alloc(30*mib, 11)
		err := r.oom(30*mib, 12)
		rep, e := ExplainOOMs(r.replay(), NewFrames(r.stacks, false))
		if e != nil {
			t.Fatal(e)
		}
		o := rep.OOMs[0]
		if o.Message != err.Error() || !o.ExpandableSegments || slices.Contains(o.Advice, AdviseExpandableSegments) {
			t.Errorf("message %q (want %q), expandable %v, advice %v", o.Message, err.Error(), o.ExpandableSegments, o.Advice)
		}
	})
}

// TestNoOOMShowsThePeak: without an oom entry the state at the peak of
// reserved memory is described.
func TestNoOOMShowsThePeak(t *testing.T) {
	r := newSimRun(t, "", 0, 0)
	a := r.alloc(30*mib, 10)
	b := r.alloc(2*mib, 11)
	r.free(a)
	r.a.EmptyCache(snapshot.NoStack)
	rep, err := ExplainOOMs(r.replay(), NewFrames(r.stacks, false))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.OOMs) != 0 || rep.AtPeak == nil || rep.AtPeak.Reserved != 50*mib || rep.AtPeak.Allocated != 32*mib {
		t.Fatalf("report %+v", rep)
	}
	_ = b
}

// TestListTrace: names are shared by an allocation's events and reused
// once freed; blocks are located in their segment; filters select.
func TestListTrace(t *testing.T) {
	r := newSimRun(t, "", 0, 0)
	a := r.alloc(1*mib, 10)    // a: small segment, offset 0
	b := r.alloc(512*1024, 11) // b: same segment, offset 1 MiB
	r.free(a)
	c := r.alloc(4*mib, 12) // a again: a large segment
	r.free(b)
	r.free(c)
	// Recorded with context="alloc": frees carry no frames.
	snap := r.a.Snapshot()
	entries := snap.Traces[0].Entries()
	for i, e := range entries {
		if e.Action == snapshot.ActionFreeRequested || e.Action == snapshot.ActionFreeCompleted {
			entries[i].Stack = snapshot.NoStack
		}
	}
	snap.Traces[0] = snapshot.TraceOf(entries...)
	rp, err := Replay(snap, 0)
	if err != nil {
		t.Fatal(err)
	}
	fr := NewFrames(r.stacks, false)
	tl, err := ListTrace(rp, fr, TraceQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range tl.Events {
		got = append(got, ev.Action+":"+ev.Name)
	}
	want := "segment_alloc: alloc:a alloc:b free_requested:a free_completed:a segment_alloc: alloc:a free_requested:b free_completed:b free_requested:a free_completed:a"
	if strings.Join(got, " ") != want {
		t.Errorf("events\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	small := tl.Events[1].Segment
	if ev := tl.Events[2]; !ev.Located || ev.Segment != small || ev.Offset != 1*mib || ev.Addr != b {
		t.Errorf("b located at %#x+%#x", ev.Segment, ev.Offset)
	}
	if ev := tl.Events[6]; ev.Segment == small || ev.Offset != 0 || ev.Allocated != 4*mib+512*1024 {
		t.Errorf("c: %+v", ev)
	}
	if ev := tl.Events[8]; ev.Site.Line != 11 || !ev.SiteOfAlloc {
		t.Errorf("the free of b (no frames of its own) names %+v (of its allocation: %v)", ev.Site, ev.SiteOfAlloc)
	}
	if tl.PeakAllocated.Allocated != 4*mib+512*1024 || tl.Final.Allocated != 0 {
		t.Errorf("peak %+v final %+v", tl.PeakAllocated, tl.Final)
	}

	addr := b + 100
	one := TraceBound{Kind: BoundIndex, Index: 1}
	five := TraceBound{Kind: BoundIndex, Index: 5}
	for _, c := range []struct {
		q    TraceQuery
		want []int
	}{
		{TraceQuery{Addr: &addr}, []int{0, 2, 7, 8}}, // its segment's creation too
		{TraceQuery{Actions: []snapshot.Action{snapshot.ActionSegmentAlloc}}, []int{0, 5}},
		{TraceQuery{MinSize: 2 * mib}, []int{0, 5, 6, 9, 10}},
		{TraceQuery{From: &one, To: &five}, []int{1, 2, 3, 4, 5}},
		{TraceQuery{From: &TraceBound{Kind: BoundRelTime, US: 3}, To: &TraceBound{Kind: BoundTime, US: tl.Events[4].TimeUS}}, []int{3, 4}},
	} {
		tl, err := ListTrace(rp, fr, c.q)
		if err != nil {
			t.Fatal(err)
		}
		var idx []int
		for _, ev := range tl.Events {
			idx = append(idx, ev.Index)
		}
		if !slices.Equal(idx, c.want) {
			t.Errorf("query %+v: entries %v, want %v", c.q, idx, c.want)
		}
	}
}

func TestTraceBoundsAndNames(t *testing.T) {
	for in, want := range map[string]TraceBound{
		"1200":          {Kind: BoundIndex, Index: 1200},
		"+2.5s":         {Kind: BoundRelTime, US: 2500000},
		"0.25s":         {Kind: BoundRelTime, US: 250000},
		"1773270053.8s": {Kind: BoundTime, US: 1773270053800000},
		" +0.000001s ":  {Kind: BoundRelTime, US: 1},
	} {
		got, err := ParseTraceBound(in)
		if err != nil || got != want {
			t.Errorf("ParseTraceBound(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "abc", "1.5", "+xs", "-2s"} {
		if _, err := ParseTraceBound(in); err == nil {
			t.Errorf("ParseTraceBound(%q) accepted", in)
		}
	}
	if _, err := ParseActions("alloc, free_completed"); err != nil {
		t.Error(err)
	}
	if _, err := ParseActions("alloc,malloc"); err == nil || !strings.Contains(err.Error(), "malloc") {
		t.Errorf("ParseActions accepted malloc: %v", err)
	}
	for k, want := range map[int]string{0: "a", 25: "z", 26: "aa", 27: "ab", 51: "az", 52: "ba", 701: "zz", 702: "aaa"} {
		if got := AllocName(k); got != want {
			t.Errorf("AllocName(%d) = %q, want %q", k, got, want)
		}
	}
}

// TestSegmentsMap: the map's totals are the allocator's figures; sorting
// and filters work.
func TestSegmentsMap(t *testing.T) {
	r := newSimRun(t, "", 0, 0)
	big := r.alloc(30*mib, 10)
	r.alloc(4*mib, 11)
	x := r.alloc(4*mib, 12)
	r.alloc(100, 13)
	r.free(x)
	r.free(big)
	rp := r.replay()
	fr := NewFrames(r.stacks, false)
	m, err := Segments(rp, fr, AtFinal, SegmentFilter{}, SortBySize)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Final || len(m.Segments) != 3 || m.Total.Size != 30*mib+20*mib+2*mib || m.Total.Allocated != 4*mib+512 {
		t.Fatalf("map %+v", m)
	}
	if m.Segments[0].Size != 30*mib || m.Segments[0].Fragmentation() != 1 {
		t.Errorf("largest first: %+v", m.Segments[0])
	}
	if s := m.Segments[2]; s.Pool != "small" || s.Rounding != 512-100 || s.Live != 1 {
		t.Errorf("small segment %+v", s)
	}
	m, _ = Segments(rp, fr, AtFinal, SegmentFilter{Pool: "large", MinSize: 25 * mib}, SortByAddress)
	if len(m.Segments) != 1 || m.Omitted != 2 {
		t.Errorf("filtered: %d segments, %d omitted", len(m.Segments), m.Omitted)
	}
	// At the peak of reserved memory all three segments existed and the
	// 30 MiB tensor was live.
	m, _ = Segments(rp, fr, AtPeak, SegmentFilter{}, SortByFree)
	if m.Final || m.Moment.Allocated != 38*mib+512 {
		t.Errorf("at peak: %+v", m.Moment)
	}
	if _, err := Segments(rp, fr, 99, SegmentFilter{}, SortBySize); err == nil {
		t.Error("an entry past the trace is accepted")
	}
}

// TestDiffMatchesByContent: two runs of the same program at other
// addresses, with other stack tables, show no change; one more tensor in
// the second shows as exactly that.
func TestDiffMatchesByContent(t *testing.T) {
	run := func(base uint64, extra bool) *DiffSide {
		r := newSimRun(t, "", 0, base)
		if base != 0 {
			r.stacks.InternFrames([]snapshot.Frame{{Name: "unrelated", Filename: "/x.py", Line: 1}})
		}
		a := r.alloc(8*mib, 10)
		r.alloc(30*mib, 11)
		if extra {
			r.alloc(6*mib, 12)
		}
		r.free(a)
		rp := r.replay()
		p, err := FindPeak(rp)
		if err != nil {
			t.Fatal(err)
		}
		return &DiffSide{Replayed: rp, Frames: NewFrames(r.stacks, false), Peak: p}
	}
	x, y, z := run(0, false), run(0x7e0000000000, false), run(0x7e0000000000, true)
	if d := DiffDevices(0, x, y); !d.Same() {
		t.Errorf("same program, other addresses: %+v", d)
	}
	d := DiffDevices(0, x, z)
	if d.Same() || len(d.Stacks) != 1 || d.Stacks[0].Delta() != 6*mib || d.Stacks[0].Site.Line != 12 {
		t.Fatalf("one more tensor: %+v", d.Stacks)
	}
	if s := d.Stacks[0].Sizes; len(s) != 1 || s[0] != (SizeDelta{Size: 6 * mib, Before: 0, After: 1}) {
		t.Errorf("sizes %+v", s)
	}
	for _, f := range d.Figures {
		if f.Key == "allocated_bytes.all.peak" && f.Delta != 6*mib {
			t.Errorf("peak delta %d", f.Delta)
		}
	}
	if len(d.Segments) != 0 {
		t.Errorf("segments %+v (the 6 MiB fits the 20 MiB segment of the 8 MiB one)", d.Segments)
	}
}
