package view

import (
	"path/filepath"
	"reflect"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/internal/testsnap"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/snapshot"
	"github.com/memstat/memstat/pkg/workload"
)

func build(t *testing.T, s *snapshot.Snapshot, device int) *Model {
	t.Helper()
	m, err := Build(s, device, analysis.NewFrames(s.Stacks, false))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkIntervals: the intervals live after every entry add up to the
// replay's allocated_bytes.all.current (every entry when the trace is
// short, a spread of 400 otherwise).
func checkIntervals(t *testing.T, m *Model) {
	t.Helper()
	n := m.Entries()
	step := max(1, n/400)
	bad := 0
	for i := 0; i < n; i += step {
		if got, want := m.AllocatedAt(i), m.Replayed.Allocated[i]; got != want && bad < 5 {
			bad++
			t.Errorf("after entry %d (%s): the intervals add up to %d, allocated is %d", i, m.Replayed.Trace().At(i).Action, got, want)
		}
	}
	// The model's compact figures are the replay's, at every entry.
	for i := range n {
		if a, r := m.AllocatedAfter(i), m.ReservedAfter(i); a != m.Replayed.Allocated[i] || r != m.Replayed.Reserved[i] {
			t.Fatalf("after entry %d: the model keeps %d allocated, %d reserved; the replay has %d, %d", i, a, r, m.Replayed.Allocated[i], m.Replayed.Reserved[i])
		}
	}
}

// checkWindow: at every column the bands and the rest add up to the
// allocated memory at the column's sample, which is the column's highest.
func checkWindow(t *testing.T, m *Model, req Request) *Window {
	t.Helper()
	w, err := m.Window(req)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Bands) > req.Top {
		t.Errorf("%d bands, asked for %d", len(w.Bands), req.Top)
	}
	rp := m.Replayed
	for c := range w.Sample {
		var sum int64
		for i := range w.Bands {
			sum += w.Bands[i].At(c)
		}
		if w.Other[c] < 0 {
			t.Errorf("%v column %d: negative rest %d", req.By, c, w.Other[c])
		}
		if want := rp.Allocated[w.Sample[c]]; sum+w.Other[c] != want || w.Allocated[c] != want {
			t.Fatalf("%v column %d (entry %d): bands %d + rest %d != allocated %d", req.By, c, w.Sample[c], sum, w.Other[c], want)
		}
		hi := w.To
		if c+1 < len(w.First) {
			hi = w.First[c+1] - 1
		}
		for i := w.First[c]; i <= hi; i++ {
			if a := rp.Allocated[i]; a > w.AllocMax[c] || a < w.AllocMin[c] || rp.Reserved[i] > w.ReservedMax[c] {
				t.Fatalf("column %d: entry %d's figures outside the column's bounds", c, i)
			}
		}
	}
	return w
}

func TestFixture(t *testing.T) {
	fx := testsnap.Build(t)
	m := build(t, fx.Snapshot, 0)
	checkIntervals(t, m)
	n := m.Entries()
	for _, by := range []string{"allocation", "stack", "frame", "file", "annotation", "pool"} {
		g, err := ParseGroupBy(by)
		if err != nil {
			t.Fatal(err)
		}
		for _, width := range []int{1, 7, 50, 5000} {
			checkWindow(t, m, Request{To: -1, Width: width, By: g, Top: 3})
		}
		checkWindow(t, m, Request{From: n / 3, To: n / 2, Width: 9, By: g, Top: 100})
	}
	// The peak: the spike is the largest allocation live then, and
	// describing it gives its stack, the user's frames first.
	mk := m.Marks()
	if mk.PeakAllocated.Index != fx.PeakIndex || mk.PeakAllocated.Allocated != testsnap.PeakAllocated {
		t.Errorf("peak %+v, want entry %d at %d", mk.PeakAllocated, fx.PeakIndex, testsnap.PeakAllocated)
	}
	if len(mk.OOMs) != 1 || mk.OOMs[0].Moment.Index != fx.OOMIndex {
		t.Errorf("OOMs %+v, want one at entry %d", mk.OOMs, fx.OOMIndex)
	}
	d := m.Describe(mk.PeakAllocation)
	if d.Size != testsnap.Spike || d.Site != "model.py:50 attention" || len(d.Stack) == 0 || !strings.Contains(d.Stack[0], "model.py:50") || d.Annotation != "step" {
		t.Errorf("the peak allocation: %+v", d)
	}
	// A window one column per entry around the peak shows the spike as a
	// band of its own.
	w := checkWindow(t, m, Request{From: fx.PeakIndex - 2, To: fx.PeakIndex + 2, Width: 100, By: ByAllocation, Top: 2})
	found := false
	for _, b := range w.Bands {
		found = found || b.ID == mk.PeakAllocation
	}
	if !found || len(w.Sample) != 5 {
		t.Errorf("the spike is not a band of the window around the peak: %+v", w.Bands)
	}
	// Annotations: the sweep agrees with Phases.At.
	anns := m.annotations()
	trace := m.Replayed.Trace().Entries()
	for k, e := range m.Entry {
		if e >= 0 && anns[k] != m.Replayed.Phases.At(trace[e].TimeUS) {
			t.Errorf("interval %d: annotation %q, Phases.At says %q", k, anns[k], m.Replayed.Phases.At(trace[e].TimeUS))
		}
	}
	checkPhases(t, m)
	if ph := m.Phases(); len(ph) != testsnap.Steps {
		t.Errorf("phases %+v, want %d steps", ph, testsnap.Steps)
	}
}

// checkPhases: each annotated range covers exactly the entries a search
// of the running maximum of the entries' times finds (the definition),
// and ranges that share a lane never overlap.
func checkPhases(t *testing.T, m *Model) {
	t.Helper()
	trace := m.Replayed.Trace().Entries()
	got := m.Phases()
	if len(trace) == 0 || trace[0].TimeUS == 0 {
		if got != nil {
			t.Fatalf("phases %+v without times", got)
		}
		return
	}
	run := make([]int64, len(trace))
	var hi int64
	for i, e := range trace {
		hi = max(hi, e.TimeUS)
		run[i] = hi
	}
	at := func(us int64) int { return sort.Search(len(run), func(i int) bool { return run[i] >= us }) }
	var want []Phase
	for _, p := range m.Replayed.Phases {
		from, to := 0, len(trace)-1
		if p.StartUS != 0 {
			from = at(p.StartUS)
		}
		if p.EndUS != 0 {
			to = at(p.EndUS+1) - 1
		}
		if to >= from {
			want = append(want, Phase{Name: p.Name, From: from, To: to})
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d phases, want %d", len(got), len(want))
	}
	lastTo := map[int]int{}
	for k := range want {
		g := got[k]
		if g.Name != want[k].Name || g.From != want[k].From || g.To != want[k].To {
			t.Fatalf("phase %d: %+v, want %+v", k, g, want[k])
		}
		if e, ok := lastTo[g.Lane]; ok && e >= g.From {
			t.Fatalf("phase %d (%+v) overlaps the one before it in lane %d (to %d)", k, g, g.Lane, e)
		}
		lastTo[g.Lane] = g.To
	}
}

// checkStates: the state at entry N is the one `segments --at N`
// computes, block for block, for entries stepped forward and back.
func checkStates(t *testing.T, m *Model, at []int) {
	t.Helper()
	cur := m.Replayed.NewStateCursor()
	for _, i := range at {
		st, err := cur.At(i)
		if err != nil {
			t.Fatal(err)
		}
		got := m.StateOf(st)
		want, err := analysis.Segments(m.Replayed, m.Frames, i, analysis.SegmentFilter{}, analysis.SortByAddress)
		if err != nil {
			t.Fatal(err)
		}
		if got.Moment != want.Moment || got.Total.Size != want.Total.Size || got.Total.Allocated != want.Total.Allocated || len(got.Segments) != len(want.Segments) {
			t.Fatalf("entry %d: moment %+v total %d/%d in %d segments; segments --at says %+v %d/%d in %d", i,
				got.Moment, got.Total.Allocated, got.Total.Size, len(got.Segments), want.Moment, want.Total.Allocated, want.Total.Size, len(want.Segments))
		}
		for s := range want.Segments {
			ws, gs := want.Segments[s], got.Segments[s]
			if ws.Address != gs.Address || ws.Size != gs.Size || len(ws.Blocks) != len(gs.Blocks) {
				t.Fatalf("entry %d segment %d differs", i, s)
			}
			for b := range ws.Blocks {
				wb, gb := ws.Blocks[b], gs.Blocks[b]
				if wb.Address != gb.Address || wb.Size != gb.Size || wb.State.String() != gb.State {
					t.Fatalf("entry %d segment %#x block %d: %+v, segments --at has %+v", i, ws.Address, b, gb, wb)
				}
				// An allocated block names the interval live then.
				if gb.State == "active_allocated" && (gb.Allocation < 0 || !m.LiveAt(gb.Allocation, i) || m.Size[gb.Allocation] != gb.Size) {
					t.Fatalf("entry %d block %#x: allocation %d is not live then", i, gb.Address, gb.Allocation)
				}
			}
		}
	}
}

func TestStatesMatchSegments(t *testing.T) {
	fx := testsnap.Build(t)
	m := build(t, fx.Snapshot, 0)
	n := m.Entries()
	checkStates(t, m, []int{fx.PeakIndex, fx.PeakIndex + 1, fx.PeakIndex + 2, 0, n / 2, n - 1, 3})
}

// checkCompact: once the model lets go of the replay's figures (Trim) and
// of the snapshot's trace (Compact), everything the server sends is what
// it was: windows by allocation and by stack, states (through the cursor,
// which decodes the trace again), moments, marks, phases, events and
// every allocation's details.
func checkCompact(t *testing.T, s *snapshot.Snapshot, m *Model, at []int) {
	t.Helper()
	n := m.Entries()
	ask := func(m *Model) []any {
		var out []any
		for _, req := range []Request{{To: -1, Width: 50, Top: 5}, {From: n / 3, To: n - 1, Width: 7, By: analysis.ByStack, Top: 2}, {To: -1, Width: 30, By: analysis.ByAnnotation, Top: 3}} {
			w, err := m.Window(req)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, w)
		}
		cur := m.NewStateCursor()
		for _, i := range at {
			st, err := cur.At(i)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, m.StateOf(st), m.MomentAt(i))
		}
		out = append(out, m.Marks(), m.Phases(), m.Events(0, n), m.Events(n/2, 7))
		for k := 0; k < m.Len(); k += max(1, m.Len()/200) {
			out = append(out, m.Describe(k))
		}
		return out
	}
	before := ask(m)
	// A build without the Replayed's figures (the server's) answers the
	// same from its own.
	lean, err := BuildObserved(s, m.Replayed.Device, m.Frames, analysis.Want{NoFigures: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if lean.Replayed.Allocated != nil {
		t.Fatal("NoFigures kept the Replayed's figures")
	}
	for k, a := range ask(lean) {
		if !reflect.DeepEqual(before[k], a) {
			t.Fatalf("answer %d (%T) differs without the Replayed's figures:\n%.600v\n%.600v", k, a, before[k], a)
		}
	}
	for _, i := range append(at, -1, 0, n-1) {
		if got, want := m.MomentAt(i), m.Replayed.MomentAt(i); got != want {
			t.Fatalf("MomentAt(%d) = %+v, the replay's %+v", i, got, want)
		}
	}
	tr := s.Trace(m.Replayed.Device)
	if err := m.Compact(tr, Bare(s)); err != nil {
		t.Fatal(err)
	}
	if m.Replayed.Allocated != nil || m.Replayed.Trace().Len() != 0 {
		t.Fatal("Compact kept the replay's figures or the trace")
	}
	after := ask(m)
	for k := range before {
		if !reflect.DeepEqual(before[k], after[k]) {
			t.Fatalf("answer %d (%T) changed with Compact:\n%.600v\n%.600v", k, before[k], before[k], after[k])
		}
	}
}

func TestCompact(t *testing.T) {
	fx := testsnap.Build(t)
	m := build(t, fx.Snapshot, 0)
	checkCompact(t, fx.Snapshot, m, []int{-1, fx.PeakIndex, fx.PeakIndex + 1, 2, m.Entries() - 1})
	if err := m.Compact(&snapshot.Trace{}, Bare(fx.Snapshot)); err == nil {
		t.Error("Compact took a trace of another length")
	}
}

func TestRecorded(t *testing.T) {
	path, _ := fixture.Expandable(t)
	s, err := snapshot.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	m := build(t, s, 0)
	checkIntervals(t, m)
	checkPhases(t, m)
	n := m.Entries()
	for _, by := range []string{"allocation", "stack", "annotation", "pool"} {
		g, _ := ParseGroupBy(by)
		checkWindow(t, m, Request{To: -1, Width: 300, By: g, Top: 20})
	}
	checkStates(t, m, []int{n / 4, n / 4, n/4 + 1, n / 2, 1, n - 1})
	checkCompact(t, s, m, []int{n / 4, n / 2, n / 2, n - 1})
}

func TestRealSnapshots(t *testing.T) {
	files := realdata.Files(t)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s, err := snapshot.Load(f)
			if err != nil {
				t.Skipf("unreadable: %v", err)
			}
			for d := range s.Traces {
				if s.Trace(d).Len() == 0 {
					continue
				}
				m := build(t, s, d)
				checkIntervals(t, m)
				checkPhases(t, m)
				for _, by := range []string{"allocation", "stack"} {
					g, _ := ParseGroupBy(by)
					checkWindow(t, m, Request{To: -1, Width: 500, By: g, Top: 50})
				}
				n := m.Entries()
				checkStates(t, m, []int{n / 3, min(n/3+1, n-1), m.Replayed.Result.PeakAllocated.Index})
				checkCompact(t, s, m, []int{m.Replayed.Result.PeakAllocated.Index})
			}
		})
	}
}

func TestParseGroupBy(t *testing.T) {
	for _, s := range []string{"", "allocation", "stack", "frame", "file", "annotation", "pool"} {
		if _, err := ParseGroupBy(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	if _, err := ParseGroupBy("colour"); err == nil || !strings.Contains(err.Error(), "pool") {
		t.Errorf("colour: %v", err)
	}
}

// TestPrivatePools: a recording with CUDA-graph and MemPool pools shows
// their reserved memory, within the reserved total, and the windows still
// add up.
func TestPrivatePools(t *testing.T) {
	_, self, _, _ := goruntime.Caller(0)
	f, err := workload.ReadFile(filepath.Join(filepath.Dir(self), "..", "..", "internal", "command", "testdata", "cuda_graphs.mem"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := workload.NewEnv(workload.Options{Config: allocator.DefaultConfig(allocator.V2_5), DeviceMemory: 80 << 30})
	if err != nil {
		t.Fatal(err)
	}
	f.Run(e)
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	m := build(t, e.Snapshot(), 0)
	checkIntervals(t, m)
	if m.PrivateReserved == nil {
		t.Fatal("no private-pool memory seen")
	}
	var peak int64
	for i, r := range m.PrivateReserved {
		peak = max(peak, r)
		if r > m.Replayed.Reserved[i] {
			t.Fatalf("entry %d: private pools reserve %d of %d reserved", i, r, m.Replayed.Reserved[i])
		}
	}
	w := checkWindow(t, m, Request{To: -1, Width: 40, By: ByPool, Top: 5})
	if got := slices.Max(w.PrivateReserved); got != peak {
		t.Errorf("the window's private-pool line peaks at %d, the trace at %d", got, peak)
	}
	private := false
	for _, b := range w.Bands {
		private = private || strings.Contains(b.Label, "private pool")
	}
	if !private {
		t.Errorf("grouping by pool shows no private pool: %+v", w.Bands)
	}
}

// TestBeforeAt: the blocks allocated before the trace are found by
// address, by binary search in address order and by a map otherwise.
func TestBeforeAt(t *testing.T) {
	for _, addrs := range [][]uint64{{0x100, 0x300, 0x900}, {0x900, 0x100, 0x300}} {
		m := &Model{}
		for _, a := range addrs {
			m.Before = append(m.Before, BeforeBlock{Address: a})
		}
		for k, a := range addrs {
			if got, ok := m.beforeAt(a); !ok || got != k {
				t.Errorf("%#x: beforeAt(%#x) = %d, %v; want %d", addrs, a, got, ok, k)
			}
		}
		if _, ok := m.beforeAt(0x200); ok {
			t.Errorf("%#x: found 0x200", addrs)
		}
		if sorted := slices.IsSorted(addrs); (m.beforeIdx == nil) != sorted {
			t.Errorf("%#x: index made %v, in order %v", addrs, m.beforeIdx != nil, sorted)
		}
	}
}

// TestCompactFiguresShared: built with the replay's compact figures
// (Want.CompactFigures, the report's), the model reads the Replayed's
// figures instead of keeping its own, and has the same intervals and
// figures as a model built beside full arrays.
func TestCompactFiguresShared(t *testing.T) {
	path, _ := fixture.Expandable(t)
	s, err := snapshot.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	full := build(t, s, 0)
	compact, err := BuildObserved(s, 0, analysis.NewFrames(s.Stacks, false), analysis.Want{CompactFigures: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	al, re, ok := compact.Replayed.Figures()
	if !ok {
		t.Fatal("Want.CompactFigures kept no compact figures")
	}
	u, _ := al.Units()
	mu, _ := compact.alloc.Units()
	if len(u) == 0 || len(mu) != len(u) || &u[0] != &mu[0] || re.Len() != compact.resv.Len() {
		t.Error("the model keeps a copy of the replay's compact figures, not the replay's own")
	}
	if compact.Entries() != full.Entries() {
		t.Fatalf("%d entries, want %d", compact.Entries(), full.Entries())
	}
	for i := range full.Entries() {
		if a, r := compact.AllocatedAfter(i), compact.ReservedAfter(i); a != full.Replayed.Allocated[i] || r != full.Replayed.Reserved[i] {
			t.Fatalf("after entry %d: %d allocated, %d reserved; want %d, %d", i, a, r, full.Replayed.Allocated[i], full.Replayed.Reserved[i])
		}
	}
	if !slices.Equal(compact.Start, full.Start) || !slices.Equal(compact.End, full.End) || !slices.Equal(compact.Entry, full.Entry) ||
		!slices.Equal(compact.Size, full.Size) || !slices.Equal(compact.Pool, full.Pool) {
		t.Error("the intervals differ from those built beside full figures")
	}
}

// TestClipIntervals: interval arrays mostly unused (allocs the replay
// could not apply) are copied to their length, with their values; ones
// nearly full are left alone.
func TestClipIntervals(t *testing.T) {
	m := &Model{
		Start: make([]int32, 3, 100), End: make([]int32, 3, 100), Entry: make([]int32, 3, 100),
		Size: make([]int64, 3, 100), Pool: make([]uint16, 3, 100),
	}
	for k := range 3 {
		m.Start[k], m.End[k], m.Entry[k], m.Size[k], m.Pool[k] = int32(k), int32(k+1), int32(k+2), int64(512*(k+1)), uint16(k)
	}
	m.clipIntervals()
	if cap(m.Start) > 8 || cap(m.End) > 8 || cap(m.Entry) > 8 || cap(m.Size) > 8 || cap(m.Pool) > 16 {
		t.Errorf("capacities %d %d %d %d %d after clipping 3 intervals", cap(m.Start), cap(m.End), cap(m.Entry), cap(m.Size), cap(m.Pool))
	}
	for k := range 3 {
		if m.Start[k] != int32(k) || m.End[k] != int32(k+1) || m.Entry[k] != int32(k+2) || m.Size[k] != int64(512*(k+1)) || m.Pool[k] != uint16(k) {
			t.Fatalf("interval %d changed by clipping", k)
		}
	}
	full := &Model{Start: make([]int32, 90, 100)}
	full.End, full.Entry, full.Size, full.Pool = make([]int32, 90, 100), make([]int32, 90, 100), make([]int64, 90, 100), make([]uint16, 90, 100)
	before := &full.Start[0]
	full.clipIntervals()
	if &full.Start[0] != before {
		t.Error("arrays 90% full were copied")
	}
}
