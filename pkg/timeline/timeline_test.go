package timeline

import (
	"testing"
	"time"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/internal/testsnap"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/snapshot"
)

func TestFixture(t *testing.T) {
	fx := testsnap.Build(t)
	tl, err := Build(fx.Snapshot, Options{Pools: true})
	if err != nil {
		t.Fatal(err)
	}
	n := fx.Snapshot.Traces[0].Len()
	if tl.Entries != n || tl.From != 0 || tl.To != n-1 || !tl.TimeBased {
		t.Fatalf("window %d..%d of %d, time-based %v", tl.From, tl.To, tl.Entries, tl.TimeBased)
	}
	if tl.Peak.Bytes != testsnap.PeakAllocated || tl.Peak.Index != fx.PeakIndex {
		t.Errorf("peak %d at %d, want %d at %d", tl.Peak.Bytes, tl.Peak.Index, testsnap.PeakAllocated, fx.PeakIndex)
	}
	if want := float64(fx.PeakIndex) * testsnap.EntryStepUS / 1e6; !near(tl.Peak.X, want) {
		t.Errorf("peak at x=%v s, want %v", tl.Peak.X, want)
	}
	if len(tl.OOMs) != 1 || tl.OOMs[0].Index != fx.OOMIndex || tl.OOMs[0].Requested != testsnap.OOMRequest {
		t.Errorf("OOMs %+v, want one at %d requesting %d", tl.OOMs, fx.OOMIndex, testsnap.OOMRequest)
	}
	if len(tl.Phases) != testsnap.Steps {
		t.Fatalf("phases %+v, want %d", tl.Phases, testsnap.Steps)
	}
	for i, p := range tl.Phases {
		if p.Name != "step" || p.End <= p.Start || i > 0 && p.Start < tl.Phases[i-1].End {
			t.Errorf("phase %d: %+v", i, p)
		}
	}
	// The spike happens inside the second step.
	if p := tl.Phases[1]; tl.Peak.X < p.Start || tl.Peak.X > p.End {
		t.Errorf("peak at %v outside the second step %+v", tl.Peak.X, p)
	}
	// Undecimated: one point per entry, and the last one is the final state.
	alloc := tl.Find("allocated")
	if len(alloc.Points) != n {
		t.Fatalf("%d points, want %d", len(alloc.Points), n)
	}
	if last := alloc.Points[n-1]; last.Bytes != testsnap.FinalAllocated {
		t.Errorf("final allocated %d, want %d", last.Bytes, testsnap.FinalAllocated)
	}
	large, small := tl.Find("allocated_large"), tl.Find("allocated_small")
	if large == nil || small == nil {
		t.Fatal("no per-pool series")
	}
	if got := small.Points[n-1].Bytes; got != testsnap.Bias {
		t.Errorf("small pool allocated %d at the end, want %d", got, testsnap.Bias)
	}
	for i := range alloc.Points {
		if alloc.Points[i].Bytes != large.Points[i].Bytes+small.Points[i].Bytes {
			t.Fatalf("point %d: allocated %d != large %d + small %d", i, alloc.Points[i].Bytes, large.Points[i].Bytes, small.Points[i].Bytes)
		}
	}
	res, act := tl.Find("reserved"), tl.Find("active")
	for i := range alloc.Points {
		if a, r, ac := alloc.Points[i].Bytes, res.Points[i].Bytes, act.Points[i].Bytes; a > ac || ac > r {
			t.Fatalf("point %d: allocated %d, active %d, reserved %d out of order", i, a, ac, r)
		}
	}
}

func TestWindow(t *testing.T) {
	fx := testsnap.Build(t)
	// Entries by index...
	tl, err := Build(fx.Snapshot, Options{From: Bound{Set: true, Index: 5}, To: Bound{Set: true, Index: 9}})
	if err != nil {
		t.Fatal(err)
	}
	if tl.From != 5 || tl.To != 9 || len(tl.Find("allocated").Points) != 5 {
		t.Errorf("window %d..%d with %d points", tl.From, tl.To, len(tl.Find("allocated").Points))
	}
	// ...and by time: entry i is at i ms.
	from, _ := ParseBound("3ms")
	to, _ := ParseBound("7ms")
	tl, err = Build(fx.Snapshot, Options{From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	if tl.From != 3 || tl.To != 7 {
		t.Errorf("3ms..7ms gave entries %d..%d, want 3..7", tl.From, tl.To)
	}
	if _, err := Build(fx.Snapshot, Options{From: Bound{Set: true, Index: 10}, To: Bound{Set: true, Index: 2}}); err == nil {
		t.Error("an empty window gave no error")
	}
}

func TestParseBound(t *testing.T) {
	for in, want := range map[string]Bound{
		"":      {},
		"1200":  {Set: true, Index: 1200},
		"1.5s":  {Set: true, ByTime: true, Since: 1500 * time.Millisecond},
		"250ms": {Set: true, ByTime: true, Since: 250 * time.Millisecond},
	} {
		got, err := ParseBound(in)
		if err != nil || got != want {
			t.Errorf("ParseBound(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"-3", "soon", "-1s", "1.5"} {
		if _, err := ParseBound(bad); err == nil {
			t.Errorf("ParseBound(%q) succeeded", bad)
		}
	}
}

func TestNoTimeAxis(t *testing.T) {
	fx := testsnap.Build(t)
	s := *fx.Snapshot
	tr := s.Traces[0].Entries()
	for i := range tr {
		tr[i].TimeUS = 0
	}
	s.Traces = []*snapshot.Trace{snapshot.TraceOf(tr...)}
	tl, err := Build(&s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tl.TimeBased || tl.Peak.X != float64(fx.PeakIndex) {
		t.Errorf("time-based %v, peak at x=%v; want the index %d", tl.TimeBased, tl.Peak.X, fx.PeakIndex)
	}
	if len(tl.Phases) != 0 || len(tl.Notes) != 1 {
		t.Errorf("phases %v, notes %v: want none and a note", tl.Phases, tl.Notes)
	}
	if _, err := Build(&s, Options{From: Bound{Set: true, ByTime: true, Since: time.Second}}); err == nil {
		t.Error("a time bound on a trace without time_us gave no error")
	}
}

// TestRealDecimation: on real training traces, a decimated timeline keeps
// the extremes of the full one, stays within its point budget, and its peak
// is the replay's.
func TestRealDecimation(t *testing.T) {
	for _, name := range []string{"sidsoc12", "bcrafton", "ZidongLiu", "Nesta"} {
		t.Run(name, func(t *testing.T) {
			s, err := snapshot.Load(realdata.File(t, name))
			if err != nil {
				t.Fatal(err)
			}
			full, err := Build(s, Options{MaxPoints: 1 << 30})
			if err != nil {
				t.Fatal(err)
			}
			small, err := Build(s, Options{MaxPoints: 300})
			if err != nil {
				t.Fatal(err)
			}
			r, err := replay.New(s, replay.Options{})
			if err != nil {
				t.Fatal(err)
			}
			res, err := r.Run()
			if err != nil {
				t.Fatal(err)
			}
			if res.PeakAllocated.Index >= 0 && (full.Peak.Bytes != res.PeakAllocated.Bytes || full.Peak.Index != res.PeakAllocated.Index) {
				t.Errorf("timeline peak %d at %d, replay's %d at %d", full.Peak.Bytes, full.Peak.Index, res.PeakAllocated.Bytes, res.PeakAllocated.Index)
			}
			if small.Peak != full.Peak {
				t.Errorf("decimation moved the peak: %+v vs %+v", small.Peak, full.Peak)
			}
			for _, key := range []string{"allocated", "reserved", "active"} {
				f, d := full.Find(key).Points, small.Find(key).Points
				if len(f) != s.Traces[0].Len() {
					t.Errorf("%s: %d points undecimated, want %d", key, len(f), s.Traces[0].Len())
				}
				if len(d) > 300 || len(d) < 100 {
					t.Errorf("%s: %d points decimated to at most 300", key, len(d))
				}
				if lo, hi := extremes(f); [2]int64{lo, hi} != func() [2]int64 { a, b := extremes(d); return [2]int64{a, b} }() {
					t.Errorf("%s: decimation lost an extreme", key)
				}
				if d[0] != f[0] || d[len(d)-1] != f[len(f)-1] {
					t.Errorf("%s: decimation lost the first or last point", key)
				}
				for i := 1; i < len(d); i++ {
					if d[i].Index <= d[i-1].Index || d[i].X < d[i-1].X {
						t.Fatalf("%s: points %d and %d out of order: %+v %+v", key, i-1, i, d[i-1], d[i])
					}
				}
			}
		})
	}
}

func extremes(ps []Point) (int64, int64) {
	lo, hi := ps[0].Bytes, ps[0].Bytes
	for _, p := range ps {
		lo, hi = min(lo, p.Bytes), max(hi, p.Bytes)
	}
	return lo, hi
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
