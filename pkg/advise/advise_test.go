package advise

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/snapshot"
	"github.com/memstat/memstat/pkg/workload"
)

// varlen records the fragmentation workload: training on variable-length
// batches (each step pads to a random length), with activation
// checkpointing, on an 80 GiB device. The file is written and read back
// as a user's would be.
func varlen(t testing.TB) (*snapshot.Snapshot, string) {
	t.Helper()
	b, err := workload.Lookup("varlen")
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.New(map[string]string{"checkpointing": "true", "steps": "12", "seq": "2048"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	env, err := workload.NewEnv(workload.Options{Config: allocator.DefaultConfig(allocator.Latest), DeviceMemory: 80 << 30})
	if err != nil {
		t.Fatal(err)
	}
	w.Run(env)
	if env.OOM() != nil || env.Err() != nil {
		t.Fatalf("recording failed: %v %v", env.OOM(), env.Err())
	}
	path := filepath.Join(t.TempDir(), "varlen.pickle")
	if err := snapshot.WriteFile(path, env.Snapshot()); err != nil {
		t.Fatal(err)
	}
	s, err := snapshot.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return s, path
}

// replayWith replays a setting independently of Advise: the oracle for the
// figures it prints.
func replayWith(t *testing.T, s *snapshot.Snapshot, conf string, capacity int64) *replay.Result {
	t.Helper()
	v := replay.GuessVersion(s)
	cfg, err := allocator.ParseConfig(conf, v)
	if err != nil {
		t.Fatal(err)
	}
	r, err := replay.New(s, replay.Options{Config: &cfg, Version: v, Capacity: capacity, Mode: replay.WhatIf})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestFragmentationWorkloadGetsExpandableSegments: on variable-length
// batches the cached segments are the wrong sizes for the next step's
// activations; expandable segments let freed space be reused. Advise must
// find a setting that lowers peak reserved memory, and replaying that
// setting must give the figures it printed.
func TestFragmentationWorkloadGetsExpandableSegments(t *testing.T) {
	s, _ := varlen(t)
	a, err := Advise(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Best == nil {
		t.Fatalf("no setting lowers peak reserved: %+v", a.Ranked)
	}
	b := a.Best
	if !strings.Contains(b.Conf, "expandable_segments:True") {
		t.Errorf("best %s, want expandable segments", b.Conf)
	}
	// A real saving, not noise: at least a tenth of peak reserved.
	if b.PeakReserved > a.Baseline.PeakReserved*9/10 || b.OOMs != 0 || a.Baseline.OOMs != 0 {
		t.Errorf("best peak reserved %d vs %d, OOMs %d vs %d", b.PeakReserved, a.Baseline.PeakReserved, b.OOMs, a.Baseline.OOMs)
	}
	// The same requests: peak requested memory is equal.
	if b.PeakRequested != a.Baseline.PeakRequested {
		t.Errorf("peak requested %d vs %d", b.PeakRequested, a.Baseline.PeakRequested)
	}
	// Every figure of every setting is what a replay of it gives.
	for _, r := range append([]Result{a.Baseline}, a.Ranked...) {
		res := replayWith(t, s, r.Conf, 0)
		if res.PeakReserved.Bytes != r.PeakReserved || res.PeakAllocated.Bytes != r.PeakAllocated ||
			res.OOMs.Simulated != r.OOMs || res.SegmentsCreated != r.SegmentsCreated || res.AtPeak.Fragmentation != r.Fragmentation {
			t.Errorf("%s: advise says reserved %d allocated %d OOMs %d segments %d frag %v; replay gives %d %d %d %d %v", r.Label(),
				r.PeakReserved, r.PeakAllocated, r.OOMs, r.SegmentsCreated, r.Fragmentation,
				res.PeakReserved.Bytes, res.PeakAllocated.Bytes, res.OOMs.Simulated, res.SegmentsCreated, res.AtPeak.Fragmentation)
		}
	}
	// The baseline is the recorded run: what-if with the recorded
	// settings reproduces it exactly on a trace from empty.
	if a.Coverage != replay.CoverageComplete {
		t.Errorf("coverage %s", a.Coverage)
	}
	verdict := a.Verdict()
	if !strings.HasPrefix(verdict, "use expandable_segments:True: peak reserved ") || a.Why() == nil {
		t.Errorf("verdict %q, why %q", verdict, a.Why())
	}
}

// TestSmallerGPU: on a 7 GiB device the recorded settings run out of
// memory; a setting that fits is found, and the replay agrees.
func TestSmallerGPU(t *testing.T) {
	s, _ := varlen(t)
	const gpu = 7 << 30
	a, err := Advise(s, Options{DeviceMemory: gpu})
	if err != nil {
		t.Fatal(err)
	}
	if a.DeviceMemory != gpu || a.DeviceMemoryBy != "option" {
		t.Errorf("device memory %d by %q", a.DeviceMemory, a.DeviceMemoryBy)
	}
	if a.Baseline.OOMs == 0 || a.Baseline.FirstOOM < 0 || a.Best == nil || a.Best.OOMs != 0 {
		t.Fatalf("baseline OOMs %d at %d, best %+v", a.Baseline.OOMs, a.Baseline.FirstOOM, a.Best)
	}
	res := replayWith(t, s, a.Best.Conf, gpu)
	if res.OOMs.Simulated != 0 || res.PeakReserved.Bytes != a.Best.PeakReserved || res.PeakReserved.Bytes > gpu {
		t.Errorf("replay of %s: %d OOMs, peak reserved %d", a.Best.Conf, res.OOMs.Simulated, res.PeakReserved.Bytes)
	}
	// The first OOM is where the replay's num_ooms first rises.
	base := replayWith(t, s, a.RecordedConf, gpu)
	if base.OOMs.Simulated != a.Baseline.OOMs {
		t.Errorf("baseline OOMs %d, replay %d", a.Baseline.OOMs, base.OOMs.Simulated)
	}
	ans := a.MemoryAnswer()
	if !strings.HasPrefix(ans, "fits in 7.0 GiB with ") || !strings.Contains(ans, "does not fit with the recorded settings: OOM at event ") {
		t.Errorf("answer %q", ans)
	}
}

// TestParallelEqualsSerial: the candidates share nothing, so any number of
// jobs gives the same advice.
func TestParallelEqualsSerial(t *testing.T) {
	s, _ := varlen(t)
	one, err := Advise(s, Options{Jobs: 1})
	if err != nil {
		t.Fatal(err)
	}
	many, err := Advise(s, Options{Jobs: 8})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(one, many) {
		t.Errorf("advice differs between 1 and 8 jobs")
	}
}

// TestRecordedOOM: Nesta's run ran out of memory with 21.9 GiB; the
// tensors alone needed more, so no setting avoids it, and advise says so.
func TestRecordedOOM(t *testing.T) {
	s, err := snapshot.Load(realdata.File(t, "Nesta-gitU"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := Advise(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a.RecordedOOMs != 1 || a.RecordedOOMAt != 1117 || a.Baseline.OOMs != 1 || a.Baseline.FirstOOM != 1117 {
		t.Errorf("recorded OOMs %d at %d, replayed %d at %d", a.RecordedOOMs, a.RecordedOOMAt, a.Baseline.OOMs, a.Baseline.FirstOOM)
	}
	if a.Best != nil {
		t.Errorf("best %s", a.Best.Conf)
	}
	for _, r := range a.Ranked {
		if r.OOMs == 0 {
			t.Errorf("%s avoids the OOM", r.Label())
		}
	}
	// At the OOM the live tensors and the request exceed the device.
	if need := a.Baseline.AllocatedAtFirstOOM + a.Baseline.FirstOOMSize; need <= a.DeviceMemory {
		t.Errorf("allocated %d + request %d within %d", a.Baseline.AllocatedAtFirstOOM, a.Baseline.FirstOOMSize, a.DeviceMemory)
	}
	ans := a.MemoryAnswer()
	for _, want := range []string{"the recorded run ran out of memory at event 1117 with 21.9 GiB", "OOM at event 1117", "No setting tried avoids it", "more than the 21.9 GiB"} {
		if !strings.Contains(ans, want) {
			t.Errorf("answer lacks %q: %s", want, ans)
		}
	}
	// PyTorch 2.2 cannot set the memory fraction that
	// garbage_collection_threshold needs from the environment.
	if len(a.Skipped) != 1 || !strings.HasPrefix(a.Skipped[0], "garbage_collection_threshold") {
		t.Errorf("skipped %q", a.Skipped)
	}

	// On a 24 GiB card it fits as recorded.
	a, err = Advise(s, Options{DeviceMemory: 24 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if a.Baseline.OOMs != 0 || !strings.HasPrefix(a.MemoryAnswer(), "fits in 24.0 GiB with the recorded settings") {
		t.Errorf("24 GiB: %d OOMs, %q", a.Baseline.OOMs, a.MemoryAnswer())
	}
}

// TestStartingStateThatDoesNotFit: sidsoc12's trace starts mid-run with
// tens of GiB of live tensors; on an 8 GiB GPU they do not fit before the
// first entry, which must count as running out of memory.
func TestStartingStateThatDoesNotFit(t *testing.T) {
	s, err := snapshot.Load(realdata.File(t, "sidsoc12"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := Advise(s, Options{DeviceMemory: 8 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if a.Coverage != replay.CoveragePartial || !a.Baseline.StartFailed || a.Best != nil || a.Demand <= 8<<30 {
		t.Errorf("coverage %s, start failed %v, best %+v, demand %d", a.Coverage, a.Baseline.StartFailed, a.Best, a.Demand)
	}
	for _, r := range a.Ranked {
		if r.failures() == 0 {
			t.Errorf("%s fits in 8 GiB", r.Label())
		}
	}
	ans := a.MemoryAnswer()
	if !strings.HasPrefix(ans, "does not fit in 8.0 GiB with any of the") || !strings.Contains(ans, "tensors alone ask for 51.3 GiB") {
		t.Errorf("answer %q", ans)
	}
	// With room for everything, nothing fails at the start.
	a, err = Advise(s, Options{DeviceMemory: 80 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if a.Baseline.StartFailed || a.Baseline.OOMs != 0 {
		t.Errorf("80 GiB: start failed %v, %d OOMs", a.Baseline.StartFailed, a.Baseline.OOMs)
	}
}

func TestEveryRealTrace(t *testing.T) {
	for _, fn := range realdata.Files(t) {
		s, err := snapshot.Load(fn)
		if err != nil {
			t.Fatal(err)
		}
		for d := range s.Devices() {
			if s.Trace(d).Len() == 0 {
				if _, err := Advise(s, Options{Device: d}); err != ErrNoTrace {
					t.Errorf("%s device %d without a trace: %v", filepath.Base(fn), d, err)
				}
				continue
			}
			a, err := Advise(s, Options{Device: d})
			if err != nil {
				t.Errorf("%s device %d: %v", filepath.Base(fn), d, err)
				continue
			}
			// The recorded run held its starting state on the recorded
			// device memory.
			if a.Baseline.StartFailed || a.Demand <= 0 {
				t.Errorf("%s: baseline start failed %v, demand %d", filepath.Base(fn), a.Baseline.StartFailed, a.Demand)
			}
			if a.Ranked[0].Rank != 1 || a.Baseline.Rank < 1 || len(a.Ranked) < 2 {
				t.Errorf("%s: ranking %+v", filepath.Base(fn), a.Ranked)
			}
			// The best beats the baseline where it matters, and nothing
			// ranked above the baseline is worse.
			if a.Best != nil && (!Helps(a.Best, &a.Baseline) || !Helps(a.Best, &a.Recorded)) {
				t.Errorf("%s: best %s does not beat the baseline", filepath.Base(fn), a.Best.Conf)
			}
			if sm := a.Simpler; sm != nil && (a.Best == nil || len(sm.Changes) >= len(a.Best.Changes) || sm.failAt() != a.Best.failAt() ||
				sm.PeakReserved > a.Best.PeakReserved+a.Best.PeakReserved/100 || !Helps(sm, &a.Baseline)) {
				t.Errorf("%s: simpler %+v for best %+v", filepath.Base(fn), sm, a.Best)
			}
			for _, r := range a.Ranked[:a.Baseline.Rank-1] {
				if Helps(&a.Baseline, &r) {
					t.Errorf("%s: %s ranked above the better baseline", filepath.Base(fn), r.Label())
				}
			}
		}
	}
}

func TestRanking(t *testing.T) {
	rs := []Result{
		{Setting: Setting{Conf: "d", Changes: []string{"d"}}, OOMs: 0, PeakReserved: 10, Fragmentation: 0.2},
		{Setting: Setting{Conf: "a", Changes: []string{"a"}}, OOMs: 1, PeakReserved: 1},
		{Setting: Setting{Conf: "c,e", Changes: []string{"c", "e"}}, OOMs: 0, PeakReserved: 10, Fragmentation: 0.1},
		{Setting: Setting{Conf: "b,f", Changes: []string{"b", "f"}}, OOMs: 0, PeakReserved: 10, Fragmentation: 0.2},
		{Setting: Setting{Conf: ""}, OOMs: 0, PeakReserved: 10, Fragmentation: 0.2},
		{Setting: Setting{Conf: "g", Changes: []string{"g"}}, OOMs: 0, PeakReserved: 9, Fragmentation: 0.9},
	}
	rankResults(rs)
	var got []string
	for _, r := range rs {
		got = append(got, r.Conf)
	}
	// Fewer OOMs, then less reserved, then less fragmentation, then fewer
	// changes.
	if want := []string{"g", "c,e", "", "d", "b,f", "a"}; !reflect.DeepEqual(got, want) {
		t.Errorf("order %q, want %q", got, want)
	}
	// Helps: the first OOM removed or later, or a saving of at least 1%
	// and 64 MiB when neither fails; OOM counts after the first one and
	// peaks of runs that die at the same entry do not count.
	gib := int64(allocator.GiB)
	oomAt := func(at, n int, reserved int64) Result {
		return Result{OOMs: n, FirstOOM: at, PeakReserved: reserved}
	}
	fits := func(reserved int64) Result { return Result{FirstOOM: -1, PeakReserved: reserved} }
	for _, c := range []struct {
		name    string
		r, base Result
		want    bool
	}{
		{"removes the OOM", fits(20 * gib), oomAt(5, 1, 10*gib), true},
		{"moves it later", oomAt(9, 3, 10*gib), oomAt(5, 1, 10*gib), true},
		{"moves it earlier", oomAt(4, 1, 1*gib), oomAt(5, 1, 10*gib), false},
		{"same first OOM, fewer after it", oomAt(5, 6, 10*gib), oomAt(5, 12, 10*gib), false},
		{"same first OOM, less reserved", oomAt(5, 1, 5*gib), oomAt(5, 1, 10*gib), false},
		{"starting state fits", fits(10 * gib), Result{StartFailed: true, PeakReserved: 10 * gib}, true},
		{"adds an OOM", oomAt(5, 1, 1*gib), fits(10 * gib), false},
		{"saves 1% and 64 MiB", fits(10*gib - 103*allocator.MiB), fits(10 * gib), true},
		{"saves under 1%", fits(10*gib - 100*allocator.MiB), fits(10 * gib), false},
		{"saves 1%, under 64 MiB", fits(1*gib - 60*allocator.MiB), fits(1 * gib), false},
		{"saves nothing", fits(10 * gib), fits(10 * gib), false},
	} {
		if got := Helps(&c.r, &c.base); got != c.want {
			t.Errorf("%s: Helps = %v", c.name, got)
		}
	}
}

func TestMaxSplitValuesFollowTheSizes(t *testing.T) {
	mib := int64(allocator.MiB)
	var trace []snapshot.TraceEntry
	// Bytes: 100 × 2 MiB (200 MiB), 10 × 64 MiB (640), 2 × 500 MiB (1000).
	for i := range 112 {
		size := 2 * mib
		switch {
		case i >= 110:
			size = 500 * mib
		case i >= 100:
			size = 64 * mib
		}
		trace = append(trace, snapshot.TraceEntry{Action: snapshot.ActionAlloc, Size: size})
	}
	trace = append(trace, snapshot.TraceEntry{Action: snapshot.ActionAlloc, Size: 512})
	s := sizesOf(snapshot.TraceOf(trace...), allocator.DefaultConfig(allocator.Latest))
	if s.Requests != 113 || s.LargeRequests != 112 || s.Largest != 500*mib || s.LargeBytes != 1840*mib {
		t.Errorf("sizes %+v", s)
	}
	// A quarter of 1840 MiB is 460: reached within the 64 MiB requests;
	// half and more within the 500 MiB ones.
	if s.Q25 != 64*mib || s.Q50 != 500*mib || s.Q90 != 500*mib {
		t.Errorf("quantiles %d %d %d", s.Q25/mib, s.Q50/mib, s.Q90/mib)
	}
	if got := maxSplitValues(s); !reflect.DeepEqual(got, []int64{64, 500}) {
		t.Errorf("max_split_size_mb values %v", got)
	}
	if got := s.shareAtLeast(64 * mib); got != 1640.0/1840 {
		t.Errorf("share %v", got)
	}
	// Nothing above 21 MiB: no value.
	small := sizesOf(snapshot.TraceOf(trace[:100]...), allocator.DefaultConfig(allocator.Latest))
	if got := maxSplitValues(small); len(got) != 0 {
		t.Errorf("small requests: %v", got)
	}
}

func TestMakeSetting(t *testing.T) {
	rec, err := allocator.ParseConfig("max_split_size_mb:512", allocator.V2_5)
	if err != nil {
		t.Fatal(err)
	}
	s, err := makeSetting(rec, []knob{{Expandable, "expandable_segments:True"}, {Roundup, "roundup_power2_divisions:4"}})
	if err != nil {
		t.Fatal(err)
	}
	// The recorded option is kept; the changes are only the new knobs.
	if s.Conf != "max_split_size_mb:512,roundup_power2_divisions:4,expandable_segments:True" ||
		!reflect.DeepEqual(s.Changes, []string{"expandable_segments:True", "roundup_power2_divisions:4"}) {
		t.Errorf("setting %q changes %q", s.Conf, s.Changes)
	}
	if !s.cfg.ExpandableSegments || s.cfg.MaxSplitSize != 512*allocator.MiB || s.cfg.RoundupPower2Divisions[0] != 4 {
		t.Errorf("config %+v", s.cfg)
	}
	// PyTorch 2.0 has no expandable segments.
	if _, err := makeSetting(allocator.DefaultConfig(allocator.V2_0), []knob{{Expandable, "expandable_segments:True"}}); err == nil {
		t.Errorf("expandable segments accepted for 2.0")
	}
}

func TestEnvLine(t *testing.T) {
	for conf, want := range map[string]string{
		"":                                   "unset PYTORCH_CUDA_ALLOC_CONF (the defaults)",
		"expandable_segments:True":           "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
		"max_split_size_mb:128,gc:0.6":       "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128,gc:0.6",
		"roundup_power2_divisions:[1:1,>:8]": "PYTORCH_CUDA_ALLOC_CONF='roundup_power2_divisions:[1:1,>:8]'",
	} {
		if got := EnvLine(conf); got != want {
			t.Errorf("EnvLine(%q) = %q, want %q", conf, got, want)
		}
	}
}

// BenchmarkAdviseOOMSnapshot times advise on Nesta's snapshot (1299
// entries, an OOM), loading excluded.
func BenchmarkAdviseOOMSnapshot(b *testing.B) {
	s, err := snapshot.Load(realdata.File(b, "Nesta-gitU"))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Advise(s, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAdviseLargestTrace times advise on the longest published trace
// (sidsoc12, 27358 entries).
func BenchmarkAdviseLargestTrace(b *testing.B) {
	s, err := snapshot.Load(realdata.File(b, "sidsoc12"))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Advise(s, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
