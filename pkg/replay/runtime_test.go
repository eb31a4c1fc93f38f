package replay

import (
	"strings"
	"testing"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// recordDependentSplit records, under the default settings of v and with
// no runtime switch, a run with one large-pool cache hit whose split
// decision depends on expandable_segments: 3 MiB takes a new 20 MiB
// segment and leaves 17 MiB free; 16.5 MiB then fits the 17 MiB block
// with 0.5 MiB left over, which should_split hands out whole while the
// setting is off and splits while it is on. It returns the snapshot as
// read back from its file and the simulator's own memory_stats().
func recordDependentSplit(t *testing.T, v allocator.Version) (*snapshot.Snapshot, []allocator.KeyValue) {
	t.Helper()
	cfg, err := allocator.ParseConfig("", v)
	if err != nil {
		t.Fatal(err)
	}
	a, err := allocator.New(cfg, allocator.Options{Capacity: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.RecordHistory(allocator.HistoryOptions{Enabled: allocator.HistoryAll, Context: allocator.ContextAll}); err != nil {
		t.Fatal(err)
	}
	x, err := a.Malloc(3<<20, 0, snapshot.NoStack)
	if err != nil {
		t.Fatal(err)
	}
	y, err := a.Malloc(33<<19, 0, snapshot.NoStack)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(y, snapshot.NoStack); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Malloc(5<<20, 0, snapshot.NoStack); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(x, snapshot.NoStack); err != nil {
		t.Fatal(err)
	}
	return writeRead(t, a.Snapshot()), a.MemoryStats()
}

// TestRuntimeSettingsOption: a recording without a runtime switch whose
// figures depend on one being absent carries the assumption without
// --runtime-settings, every exact figure then equal to the simulator's;
// with it, the split-dependent figures are bounds that hold the truth,
// with the option's reason, and the rest stay exact.
func TestRuntimeSettingsOption(t *testing.T) {
	for _, v := range []allocator.Version{allocator.V2_1, allocator.V2_5, allocator.Latest} {
		snap, truth := recordDependentSplit(t, v)

		plain := runResult(t, snap, Options{})
		if len(plain.Assumptions) != 1 || !strings.Contains(plain.Assumptions[0], "--runtime-settings") {
			t.Errorf("%s, no option: assumptions %q, want the one about expandable_segments", v, plain.Assumptions)
		}
		for _, p := range compareRoundTrip(truth, plain) {
			t.Errorf("%s, no option: %s", v, p)
		}
		if _, ok := plain.Bounds["allocated_bytes.all.allocated"]; ok {
			t.Errorf("%s, no option: allocated_bytes.all.allocated is a bound", v)
		}

		opt := runResult(t, snap, Options{RuntimeSettings: true})
		if len(opt.Assumptions) != 0 {
			t.Errorf("%s, --runtime-settings: assumptions %q, want none (the figures are bounds)", v, opt.Assumptions)
		}
		for _, p := range compareRoundTrip(truth, opt) {
			t.Errorf("%s, --runtime-settings: %s", v, p)
		}
		for _, k := range []string{"allocated_bytes.all.allocated", "allocated_bytes.all.peak", "active_bytes.large_pool.freed"} {
			b, ok := opt.Bounds[k]
			switch {
			case !ok:
				t.Errorf("%s, --runtime-settings: %s is not a bound", v, k)
			case b.Reason != reasonRuntimeOption:
				t.Errorf("%s, --runtime-settings: %s's reason is %q", v, k, b.Reason)
			case b.Exact() || b.Max == nil:
				t.Errorf("%s, --runtime-settings: %s is %s, want a range", v, k, b)
			}
		}
		// 16.5 MiB split (on) or taken whole with the 17 MiB block (off).
		if b := opt.Bounds["allocated_bytes.all.allocated"]; b.Min > (3<<20)+(33<<19)+(5<<20) || b.Max == nil || *b.Max < (3<<20)+(17<<20)+(5<<20) {
			t.Errorf("%s, --runtime-settings: allocated_bytes.all.allocated %s does not hold both settings' totals", v, b)
		}
		if got := opt.MemoryStatsMap()["requested_bytes.all.allocated"]; got != plain.MemoryStatsMap()["requested_bytes.all.allocated"] {
			t.Errorf("%s: requested_bytes.all.allocated %d with the option, %d without: it does not depend on splits", v, got, plain.MemoryStatsMap()["requested_bytes.all.allocated"])
		}
	}
}

// TestNoAssumptionWithoutDependentSplit: a recording whose cache hits'
// split decisions do not depend on expandable_segments carries no
// assumption, and 2.0 (no such setting) none either.
func TestNoAssumptionWithoutDependentSplit(t *testing.T) {
	for _, v := range []allocator.Version{allocator.V2_0, allocator.Latest} {
		cfg, _ := allocator.ParseConfig("", v)
		a, err := allocator.New(cfg, allocator.Options{Capacity: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		a.RecordHistory(allocator.HistoryOptions{Enabled: allocator.HistoryAll, Context: allocator.ContextAll})
		// 4 MiB leaves 16 MiB: split under either setting; then an exact fit.
		x, _ := a.Malloc(4<<20, 0, snapshot.NoStack)
		y, _ := a.Malloc(8<<20, 0, snapshot.NoStack)
		a.Free(y, snapshot.NoStack)
		a.Malloc(16<<20, 0, snapshot.NoStack)
		a.Free(x, snapshot.NoStack)
		if res := runResult(t, writeRead(t, a.Snapshot()), Options{}); len(res.Assumptions) != 0 {
			t.Errorf("%s: assumptions %q, want none", v, res.Assumptions)
		}
	}
	// 2.0 has no expandable_segments, but _set_allocator_settings can
	// change max_split_size_mb and roundup_power2_divisions: with the
	// option the block-size figures are bounds holding the plain ones.
	snap, _ := recordDependentSplit(t, allocator.V2_0)
	plain := runResult(t, snap, Options{}).MemoryStatsMap()
	res := runResult(t, snap, Options{RuntimeSettings: true})
	if len(res.Assumptions) != 0 {
		t.Errorf("2.0: assumptions %q: nothing to switch before 2.1", res.Assumptions)
	}
	for _, k := range []string{"allocated_bytes.all.peak", "active_bytes.large_pool.freed", "inactive_split.large_pool.freed", "max_split_size"} {
		b, ok := res.Bounds[k]
		if !ok || b.Reason != reasonRuntimeOption || !b.Contains(plain[k]) {
			t.Errorf("2.0, --runtime-settings: %s: bound %v (%v, %q), want one with the option's reason holding %d", k, b, ok, b.Reason, plain[k])
		}
	}
}
