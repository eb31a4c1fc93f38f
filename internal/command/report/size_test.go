package report

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// bigSnapshot records a run made to swell a report: thousands of distinct
// deep stacks with long frame names, thousands of annotated ranges, and
// the same trace on eight devices.
func bigSnapshot(t *testing.T) *snapshot.Snapshot {
	t.Helper()
	stacks := snapshot.NewStacks()
	now := int64(1_700_000_000_000_000)
	a, err := allocator.New(allocator.DefaultConfig(allocator.V2_5), allocator.Options{
		Capacity: 80 << 30, Clock: func() int64 { now += 10; return now }, Stacks: stacks,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.RecordHistory(allocator.HistoryOptions{Enabled: allocator.HistoryAll, Context: allocator.ContextAll}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("very_long_template_argument_", 40)
	ids := make([]snapshot.StackID, 800)
	for i := range ids {
		var frames []snapshot.Frame
		for k := range 60 {
			frames = append(frames, snapshot.Frame{Name: fmt.Sprintf("f%d_%d_%s", i, k, long), Filename: fmt.Sprintf("pkg%d/mod%d.py", i%50, k), Line: int64(k + 1)})
		}
		ids[i] = stacks.InternFrames(frames)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var live []uint64
	var anns []snapshot.Annotation
	for step := range 600 {
		anns = append(anns, snapshot.Annotation{TimeUS: now + 1, Name: fmt.Sprintf("phase %d %s", step, long[:100]), Stage: "START"})
		for range 5 {
			p, err := a.Malloc(int64(rng.IntN(64<<20)+512), 0, ids[rng.IntN(len(ids))])
			if err != nil {
				t.Fatal(err)
			}
			live = append(live, p)
		}
		for len(live) > 200 {
			k := rng.IntN(len(live))
			if err := a.Free(live[k], ids[0]); err != nil {
				t.Fatal(err)
			}
			live = slices.Delete(live, k, k+1)
		}
		anns = append(anns, snapshot.Annotation{TimeUS: now, Name: fmt.Sprintf("phase %d %s", step, long[:100]), Stage: "END"})
	}
	s := a.Snapshot()
	segs := s.Segments
	for d := 1; d < 8; d++ {
		s.Traces = append(s.Traces, s.Traces[0]) // immutable: shared
		for _, seg := range segs {
			seg.Device = d
			s.Segments = append(s.Segments, seg)
		}
	}
	for d := range 8 {
		for _, an := range anns {
			an.Device = d
			s.Annotations = append(s.Annotations, an)
		}
	}
	s.Features.Annotations = true
	return s
}

// TestReportSizeBound: a report of a snapshot made to swell it stays
// under 10 MB, interactive timeline included.
func TestReportSizeBound(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the large report")
	}
	in := filepath.Join(t.TempDir(), "big.pickle")
	if err := snapshot.WriteFile(in, bigSnapshot(t)); err != nil {
		t.Fatal(err)
	}
	out, page := writeReport(t, in)
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report of 8 devices x %d entries: %.1f MB", strings.Count(page, "x"), float64(st.Size())/1e6)
	if st.Size() >= 10<<20 {
		t.Errorf("the report is %d bytes, over 10 MB", st.Size())
	}
	if i, j := strings.Index(page, `<section id="interactive">`), strings.Index(page, `<main id=`); i >= 0 && j > i {
		t.Logf("interactive timeline %.1f MB, the rest %.1f MB", float64(j-i)/1e6, float64(len(page)-(j-i))/1e6)
	}
	if !strings.Contains(page, `id="memstat-data"`) {
		t.Error("no interactive timeline")
	}
	checkSelfContained(t, page)
}
