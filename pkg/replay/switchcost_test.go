package replay

import (
	"path/filepath"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// settingDependentSplits counts, in a follow replay, the allocations
// whose split decision depends on expandable_segments: a large-pool block
// taken from the cache whose remainder is 512 B or more but at most
// 1 MiB (or whose request is at least max_split_size), which should_split
// (CUDACachingAllocator.cpp, 2.1 to 2.10) splits while the setting is on
// and hands out whole while it is off. A switch on and off again between
// two new segments leaves no entry (README, "Settings changed at
// runtime"): these are the allocations whose block size, and the figures
// built on it, memstat would have to print as bounds on every recording
// to allow for one.
func settingDependentSplits(t *testing.T, snap *snapshot.Snapshot) (dependent, cacheHits, allocs int) {
	t.Helper()
	trace := snap.Trace(0).Entries()
	o := Options{OnEvent: func(i int, e snapshot.TraceEntry, a *allocator.Allocator) {
		if e.Action != snapshot.ActionAlloc {
			return
		}
		allocs++
		if i > 0 && (trace[i-1].Action == snapshot.ActionSegmentAlloc || trace[i-1].Action == snapshot.ActionSegmentMap) {
			return // new memory: the segment's kind shows the setting
		}
		b, ok := a.BlockAt(e.Addr)
		if !ok || b.Address != e.Addr || b.Pool != snapshot.LargePool {
			return
		}
		cacheHits++
		cfg := a.Config()
		rounded := cfg.RoundSize(e.Size)
		rem := b.Size - rounded
		if rem == 0 {
			// Split: the remainder is the free block after it.
			n, ok := a.BlockAt(b.Address + uint64(b.Size))
			if !ok || n.State != snapshot.Inactive || n.RegionAddress != b.RegionAddress {
				return
			}
			rem = n.Size
		}
		if rem >= allocator.MinBlockSize && (rem <= allocator.SmallSize || uint64(rounded) >= cfg.MaxSplitSize) {
			dependent++
		}
	}}
	r, err := New(snap, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Run(); err != nil {
		t.Fatal(err)
	}
	return dependent, cacheHits, allocs
}

// TestSwitchCostOnRealTraces measures what bounding every recording for
// an unseen expandable_segments switch would cost users who never switch
// it: on the published traces, the allocations whose block size depends
// on the setting (settingDependentSplits).
func TestSwitchCostOnRealTraces(t *testing.T) {
	var dep, hits, allocs, files, affected int
	for _, fn := range realdata.Files(t) {
		name := filepath.Base(fn)
		if _, ok := realTraces[name]; !ok {
			continue
		}
		snap, err := snapshot.Load(fn)
		if err != nil {
			t.Fatal(err)
		}
		if !GuessVersion(snap).HasExpandableSegments() {
			continue // 2.0: nothing to switch
		}
		d, h, n := settingDependentSplits(t, snap)
		// The replay notes its assumption exactly where a figure
		// depends on it.
		r, err := New(snap, Options{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Run()
		if err != nil {
			t.Fatal(err)
		}
		if got := len(res.Assumptions) > 0; got != (d > 0) {
			t.Errorf("%s: %d setting-dependent splits, assumption noted %v", name, d, got)
		}
		// With --runtime-settings the bounds hold the run without a
		// switch (one the program may have made), and every other
		// figure is the same.
		ro, err := New(snap, Options{RuntimeSettings: true})
		if err != nil {
			t.Fatal(err)
		}
		opt, err := ro.Run()
		if err != nil {
			t.Fatal(err)
		}
		exact := res.MemoryStatsMap()
		for k, v := range opt.MemoryStatsMap() {
			if w, ok := exact[k]; ok && w != v {
				t.Errorf("%s: %s is %d with --runtime-settings, %d without", name, k, v, w)
			}
		}
		for k, b := range opt.Bounds {
			if w, ok := exact[k]; ok && !b.Contains(w) {
				t.Errorf("%s: --runtime-settings bound %s of %s does not hold the unswitched run's %d", name, b, k, w)
			}
		}
		t.Logf("%s (%s): %d of %d large-pool cache hits (%d allocations) split differently with expandable_segments switched", name, GuessVersion(snap), d, h, n)
		dep, hits, allocs, files = dep+d, hits+h, allocs+n, files+1
		if d > 0 {
			affected++
		}
	}
	t.Logf("%d traces: %d of %d large-pool cache hits (%d allocations) depend on expandable_segments; %d traces have one", files, dep, hits, allocs, affected)
	// The README quotes these figures (Fidelity, "Settings changed at
	// runtime"): with the 16 published traces of 2.1+ present they must
	// hold.
	if files == 16 && (dep != 646 || hits != 14466 || allocs != 28436 || affected != 8) {
		t.Errorf("%d traces: %d/%d/%d allocations, %d traces with one; the README says 646 of 14466 cache hits (28436 allocations) in 8 traces", files, dep, hits, allocs, affected)
	}
}
