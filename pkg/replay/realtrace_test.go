package replay

import (
	"path/filepath"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// realTrace is what the replay must find in one published snapshot.
type realTrace struct {
	entries, segmentEvents, placements int
	coverage                           string
	markers                            int // "snapshot" entries
	ooms                               int
	// reconciled: blocks the trace leaves live and the snapshot has free
	// (a cut-down file whose trace stops before its final state).
	reconciled int
}

// realTraces lists every published snapshot with a trace (device 0) and
// what its trace holds. The counts come from the files; the test requires
// the simulator to reproduce all of it.
var realTraces = map[string]realTrace{
	"Da1sypetals__tomi__snapshots_snapshot.pickle":                                                        {713, 1, 240, CoveragePartial, 0, 0, 0},
	"HugePandaCoder__octree-nca-groupeq__mem_snapshots_cuda_single_step.pickle":                           {5, 1, 2, CoveragePartial, 0, 0, 0},
	"JasperSolt__EoR_NN__snapshot.pickle":                                                                 {5803, 7, 1935, CoveragePartial, 9, 0, 0},
	"LfieLike__SketchKV2__my_snapshot.pickle":                                                             {1, 0, 0, CoveragePartial, 0, 0, 0},
	"MAGMA27__assignment2-systems__memory_snapshot.pickle":                                                {5163, 0, 1721, CoveragePartial, 0, 0, 0},
	"Maphsge4__select_n__snapshot.pickle_at_1f2f548":                                                      {4496, 13, 1497, CoveragePartial, 0, 0, 0},
	"Nesta-gitU__discrete_diffusion__memory_snapshot.json":                                                {1299, 132, 576, CoverageComplete, 0, 1, 0},
	"Yiyi-philosophy__LLM-inference__1.3b_snapshot.pickle":                                                {1, 0, 0, CoveragePartial, 0, 0, 0},
	"ZidongLiu__DeComFL__memory.pickle":                                                                   {23105, 61, 7946, CoverageComplete, 0, 0, 0},
	"bcrafton__assignment2-systems__memory_snapshot.pickle":                                               {6486, 0, 2162, CoveragePartial, 0, 0, 0},
	"cranberrii__ftcourse__memory_snapshot.pickle":                                                        {10307, 152, 3505, CoveragePartial, 0, 0, 0},
	"drisspg__transformer_nuggets__test_data_mini_snapshot.pickle":                                        {50, 14, 28, CoverageComplete, 0, 0, 24},
	"jogregoire__How-Diffusion-Models-Work__my_snapshot.pickle":                                           {1, 0, 0, CoveragePartial, 0, 0, 0},
	"mryab__efficient-dl-systems__week06_dl_arithmetic_seminar_cross_entropy_compiled_ce_snapshot.pickle": {21, 5, 8, CoverageComplete, 0, 0, 0},
	"shreyansh26__MLSys-Experiments__model_memory_usage_profile_grad.pkl":                                 {33, 7, 12, CoverageComplete, 0, 0, 0},
	"sidsoc12__spring2024-assignment2-systems__cs336_systems_mem_snapshot_ctx128_fp32_train.pickle":       {27358, 678, 8768, CoveragePartial, 0, 0, 0},
	"silmont2000__assignment2-systems__mem_snapshot.pickle":                                               {97, 9, 36, CoverageComplete, 0, 0, 0},
}

// TestRealTraces replays every published snapshot in follow mode
// (allocator model §16) and requires PyTorch's decisions exactly: every
// segment_alloc / segment_free at the recorded address and size and in
// the recorded order, every alloc at the recorded address, every recorded
// oom, the active bytes of every "snapshot" marker, and at the end the
// snapshot's segments, blocks, states and (where knowable) requested
// sizes. Traces that start mid-run get their starting state rebuilt; the
// one cut-down fixture (drisspg's mini_snapshot: its trace stops before
// its final state, 24 blocks live at the end of the trace are free in the
// snapshot) must match once those blocks are freed. Snapshots without a
// trace must replay to their own state.
func TestRealTraces(t *testing.T) {
	seen := 0
	for _, fn := range realdata.Files(t) {
		name := filepath.Base(fn)
		t.Run(name, func(t *testing.T) {
			snap, err := snapshot.Load(fn)
			if err != nil {
				t.Fatal(err)
			}
			want, hasTrace := realTraces[name]
			devices := 0
			for d := range snap.Devices() {
				if snap.Trace(d).Len() == 0 && len(snap.DeviceSegments(d)) == 0 {
					continue
				}
				devices++
				r, err := New(snap, Options{Device: d, CheckEvery: 100})
				if err != nil {
					t.Fatal(err)
				}
				res, err := r.Run()
				if err != nil {
					t.Fatal(err)
				}
				f, ag := res.Fidelity, res.Agreement
				if f.Divergences != 0 || f.Unapplied != 0 || f.ForcedOperations != 0 {
					t.Errorf("device %d: fidelity %+v", d, *f)
				}
				if snap.Trace(d).Len() == 0 {
					if res.History.Coverage != CoverageNone || !ag.Exact() {
						t.Errorf("device %d without a trace: coverage %s, agreement %+v", d, res.History.Coverage, *ag)
					}
					continue
				}
				if !hasTrace || d != 0 {
					t.Fatalf("device %d has a trace the test does not know", d)
				}
				seen++
				got := realTrace{
					entries: res.History.Entries, segmentEvents: f.SegmentEvents.Reproduced, placements: f.Placements.Reproduced,
					coverage: res.History.Coverage, markers: f.SnapshotMarkers.Reproduced, ooms: res.OOMs.Simulated, reconciled: ag.Reconciled,
				}
				if got != want || f.SegmentEvents.Recorded != want.segmentEvents || f.Placements.Recorded != want.placements ||
					f.SnapshotMarkers.Recorded != want.markers || res.OOMs.Recorded != want.ooms {
					t.Errorf("replay %+v (fidelity %+v), want %+v", got, *f, want)
				}
				if ag.Remaining != 0 || (want.reconciled == 0) != ag.Exact() {
					t.Errorf("agreement %+v", *ag)
				}
				if err := r.Allocator().CheckInvariants(); err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: %d entries, segment events %d/%d, placements %d/%d, %d pre-existing segments",
					res.History.Coverage, res.History.Entries, f.SegmentEvents.Reproduced, f.SegmentEvents.Recorded,
					f.Placements.Reproduced, f.Placements.Recorded, res.History.PreexistingSegments)
			}
			if devices == 0 {
				t.Fatal("no device with segments or a trace")
			}
		})
	}
	if seen != len(realTraces) {
		t.Errorf("replayed %d traces, the table lists %d", seen, len(realTraces))
	}
}

// TestRealWhatIf replays two real traces (one from empty, one mid-run)
// under other settings and on a smaller device. The state must stay valid
// after every entry; the same tensors are allocated (requested bytes and
// live allocations peak as recorded) while what the cache reserves
// changes the way the settings say; and a device with half the memory the
// run allocated runs out of memory.
func TestRealWhatIf(t *testing.T) {
	for _, name := range []string{"ZidongLiu__DeComFL", "sidsoc12__spring2024"} {
		t.Run(name, func(t *testing.T) {
			snap, err := snapshot.Load(realdata.File(t, name))
			if err != nil {
				t.Fatal(err)
			}
			fr, err := New(snap, Options{})
			if err != nil {
				t.Fatal(err)
			}
			rec, _ := fr.Run()
			v := GuessVersion(snap)
			run := func(o Options) *Result {
				t.Helper()
				o.Mode, o.CheckEvery = WhatIf, 7
				r, err := New(snap, o)
				if err != nil {
					t.Fatal(err)
				}
				res, err := r.Run()
				if err != nil {
					t.Fatal(err)
				}
				if err := r.Allocator().CheckInvariants(); err != nil {
					t.Fatal(err)
				}
				return res
			}
			for _, conf := range []string{"max_split_size_mb:128", "expandable_segments:True"} {
				cfg, err := allocator.ParseConfig(conf, v)
				if err != nil {
					t.Fatal(err)
				}
				res := run(Options{Config: &cfg})
				for _, k := range []string{"requested_bytes.all.peak", "allocation.all.peak", "requested_bytes.all.current", "allocation.all.current"} {
					if res.Stat(k) != rec.Stat(k) {
						t.Errorf("%s: %s = %d, recorded %d", conf, k, res.Stat(k), rec.Stat(k))
					}
				}
				if res.OOMs.Simulated != 0 || !(res.Stat("reserved_bytes.all.peak") >= res.Stat("allocated_bytes.all.peak") &&
					res.Stat("allocated_bytes.all.peak") >= res.Stat("requested_bytes.all.peak")) {
					t.Errorf("%s: implausible peaks: reserved %d, allocated %d, requested %d, ooms %d", conf,
						res.Stat("reserved_bytes.all.peak"), res.Stat("allocated_bytes.all.peak"), res.Stat("requested_bytes.all.peak"), res.OOMs.Simulated)
				}
				switch conf {
				case "expandable_segments:True":
					// No cudaMalloc'd segments, and less reserved than
					// the fragmented original.
					if res.Stat("segment.all.peak") != 0 || res.Stat("inactive_split_bytes.all.peak") != 0 ||
						res.Stat("reserved_bytes.all.peak") > rec.Stat("reserved_bytes.all.peak") {
						t.Errorf("%s: segments %d, inactive split %d, reserved peak %d (recorded %d)", conf, res.Stat("segment.all.peak"),
							res.Stat("inactive_split_bytes.all.peak"), res.Stat("reserved_bytes.all.peak"), rec.Stat("reserved_bytes.all.peak"))
					}
				case "max_split_size_mb:128":
					if res.Stat("max_split_size") != 128<<20 {
						t.Errorf("max_split_size %d", res.Stat("max_split_size"))
					}
				}
				t.Logf("%s: reserved peak %d (recorded %d), %d cudaMalloc/map calls (recorded %d)", conf,
					res.Stat("reserved_bytes.all.peak"), rec.Stat("reserved_bytes.all.peak"), res.SegmentsCreated, rec.SegmentsCreated)
			}
			capacity := rec.Stat("allocated_bytes.all.peak") / 2
			res := run(Options{Capacity: capacity})
			if res.OOMs.Simulated == 0 || res.Stat("num_ooms") != int64(res.OOMs.Simulated) || res.Stat("reserved_bytes.all.peak") > capacity {
				t.Errorf("device of %d bytes: ooms %+v, num_ooms %d, reserved peak %d", capacity, res.OOMs, res.Stat("num_ooms"), res.Stat("reserved_bytes.all.peak"))
			}
			t.Logf("device of %d bytes: %d simulated OOMs", capacity, res.OOMs.Simulated)
		})
	}
}
