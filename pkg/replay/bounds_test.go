package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

func TestTraceBounds(t *testing.T) {
	e := func(a snapshot.Action) snapshot.TraceEntry { return snapshot.TraceEntry{Action: a} }
	const (
		alloc   = snapshot.ActionAlloc
		oom     = snapshot.ActionOOM
		segFree = snapshot.ActionSegmentFree
		segNew  = snapshot.ActionSegmentAlloc
		freeReq = snapshot.ActionFreeRequested
		freeCmp = snapshot.ActionFreeCompleted
	)
	trace := []snapshot.TraceEntry{
		// A new segment after releases: a retry, or empty_cache()/GC then
		// a cudaMalloc.
		e(segFree), e(segNew), e(alloc),
		// An oom: one retry and one synchronization, certainly.
		e(segFree), e(oom),
		// Releases the next call does not follow with a new segment:
		// empty_cache().
		e(freeReq), e(freeCmp), e(segFree), e(segFree), e(alloc),
		// A plain cudaMalloc: no retry.
		e(segNew), e(alloc),
		// Releases at the end of the trace: empty_cache().
		e(freeReq), e(segFree),
	}
	b := traceBounds(tallyTrace(snapshot.TraceOf(trace...), allocator.DefaultConfig(allocator.V2_9), false), allocator.V2_9, "")
	retries, syncs := b["num_alloc_retries"], b["num_sync_all_streams"]
	if retries.Min != 1 || retries.Max == nil || *retries.Max != 2 {
		t.Errorf("num_alloc_retries %s, want 1-2", retries)
	}
	if syncs.Min != 3 || syncs.Max != nil {
		t.Errorf("num_sync_all_streams %s, want >= 3", syncs)
	}
	if _, ok := traceBounds(tallyTrace(snapshot.TraceOf(trace...), allocator.DefaultConfig(allocator.V2_2), false), allocator.V2_2, "")["num_sync_all_streams"]; ok {
		t.Error("2.2 has no num_sync_all_streams, yet it has a bound")
	}
	// Without ambiguity the retries are exact and stay in memory_stats
	// with the recording's value.
	exact := traceBounds(tallyTrace(snapshot.TraceOf(e(segNew), e(alloc), e(oom)), allocator.DefaultConfig(allocator.V2_9), false), allocator.V2_9, "")
	stats := applyBounds([]allocator.KeyValue{{Key: "num_alloc_retries", Value: 7}, {Key: "num_sync_all_streams", Value: 1}}, exact)
	if len(stats) != 1 || stats[0] != (allocator.KeyValue{Key: "num_alloc_retries", Value: 1}) {
		t.Errorf("exact bound: stats %v", stats)
	}
	if _, ok := exact["num_alloc_retries"]; ok {
		t.Error("an exact bound stays a bound")
	}
	// Where the recording allows a private pool, an oom may have come
	// during a capture (no retry, no synchronize): it counts only at the
	// upper end, and the reason says why.
	capt := traceBounds(tallyTrace(snapshot.TraceOf(e(segNew), e(alloc), e(oom)), allocator.DefaultConfig(allocator.V2_8), false), allocator.V2_8, reasonCaptureOOM)
	if r := capt["num_alloc_retries"]; r.Min != 0 || r.Max == nil || *r.Max != 1 || !strings.Contains(r.Reason, "capture") {
		t.Errorf("an oom that may have come during a capture: num_alloc_retries %s (%s), want 0-1", r, r.Reason)
	}
	if s := capt["num_sync_all_streams"]; s.Min != 0 || !strings.Contains(s.Reason, "capture") {
		t.Errorf("an oom that may have come during a capture: num_sync_all_streams %s, want >= 0", s)
	}
}

func TestBoundString(t *testing.T) {
	five := int64(5)
	for _, c := range []struct {
		b    Bound
		want string
		json string
	}{
		{Bound{Min: 3}, ">= 3", `{"min":3,"max":null}`},
		{Bound{Min: 3, Max: &five}, "3-5", `{"min":3,"max":5}`},
		{Bound{Min: 5, Max: &five}, "5", `{"min":5,"max":5}`},
		// No lower end (a counter with an unknown start that a runtime
		// setting change may have driven negative): never the int64
		// minimum printed as if it were a figure.
		{Bound{Min: NoLowerEnd}, "unknown", `{"min":null,"max":null}`},
		{Bound{Min: NoLowerEnd, Max: &five}, "<= 5", `{"min":null,"max":5}`},
		{Bound{Min: NoLowerEnd, Max: &five, Bytes: true}, "<= 5", `{"min":null,"max":5}`},
	} {
		if got := c.b.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.b, got, c.want)
		}
		if got := c.b.Format(func(v int64) string { return strconv.FormatInt(v, 10) }); got != c.want {
			t.Errorf("%+v: Format %q, want %q", c.b, got, c.want)
		}
		if got, err := json.Marshal(c.b); err != nil || string(got) != c.json {
			t.Errorf("%+v: JSON %s (%v), want %s", c.b, got, err, c.json)
		}
	}
}

// Round trips that drifted before their fix (issue 12), each named by the
// harness's setting, release and seed.
func TestRoundTripRegressions(t *testing.T) {
	for _, c := range []struct {
		setting string
		v       allocator.Version
		seed    uint64
		why     string
		// unshown: the recording shows no switch (the replay bounds
		// the figures because it is told of runtime settings).
		unshown bool
	}{
		{"3 streams+max_split_size_mb:64", allocator.V2_7, 5, "a forced call's free_completed entries (the fallback's synchronization) were skipped, so the segment_free after them failed", false},
		{"expandable_segments", allocator.V2_1, 4, "totalGlobalMem was inferred from a gap rounded to 20 MiB, making the large pool's reservations too short", false},
		{"expandable_segments", allocator.V2_3, 6, "the small reservation's end was not bounded by the large pool's later reservation above it", false},
		{"expandable_segments", allocator.V2_10, 70, "an out-of-memory allocation's new reservation, never mapped, sat where the recording later mapped another reservation", false},
		{"expandable_segments", allocator.V2_3, 21, "an out-of-memory allocation's new reservation, never mapped, kept the simulator's guessed base, and later allocations used it instead of the recording's reservation", false},
		{"expandable_segments", allocator.V2_1, 297, "a guessed reservation base below the others made find_expandable_block try it first", false},
		{"expandable_segments", allocator.V2_2, 160, "after the fallback released the reservation the call had mapped in, the new reservation took that earlier map's address", false},
		{"expandable_segments", allocator.V2_4, 18, "totalGlobalMem bounded by the first reservation of each (stream, pool) only: the small pool's reservation swallowed the large pool's next one", false},
		{"expandable_segments", allocator.V2_9, 290, "as 2.4 seed 18", false},
		{"expandable_segments", allocator.V2_6, 31, "a released small reservation made anew inside the old one's (too large) bound", false},
		{"3 streams+expandable", allocator.V2_4, 15, "a reservation too large by the loose totalGlobalMem bound", false},
		{"3 streams+expandable", allocator.V2_1, 74, "a reservation too large by the loose totalGlobalMem bound", false},
		{"3 streams+expandable", allocator.V2_3, 121, "num_alloc_retries: a retry served by the frees its synchronization completed (no release, no new segment) was outside the bound", false},
		{"3 streams+expandable", allocator.V2_6, 227, "as 2.3 seed 121", false},
		{"runtime settings", allocator.V2_3, 1, "expandable_segments switched at runtime: the replay mapped where the recording cudaMalloc'd (issue 12)", false},
		{"runtime settings", allocator.V2_2, 6, "only the final segments show the switch: a live block split with a remainder under 1 MiB while expandable_segments was on", false},
		{"runtime settings", allocator.V2_6, 13, "a cudaMalloc'd segment where the replay still held an empty reservation the real allocator had released", false},
		{"runtime settings", allocator.V2_3, 16, "a predicted call that failed on a taken address left the state unforced", false},
		{"runtime settings", allocator.V2_2, 39, "a recorded allocation inside a block the replay handed out whole (split under expandable_segments switched on and off between two new segments): seen only at the end, so the block was not cut back mid-trace", false},
		{"runtime settings", allocator.V2_2, 92, "as 2.2 seed 39", false},
		{"runtime settings", allocator.V2_1, 145, "as 2.2 seed 39", false},
		{"runtime settings", allocator.V2_5, 84, "as 2.2 seed 39", false},
		{"runtime settings", allocator.V2_1, 73, "expandable_segments switched on and off between two new segments, no evidence in the recording: the block-size figures were printed as exact and wrong; --runtime-settings bounds them", true},
		{"runtime settings", allocator.V2_1, 169, "as 2.1 seed 73", true},
		{"runtime settings", allocator.V2_2, 38, "as 2.1 seed 73", true},
		{"runtime settings", allocator.V2_2, 166, "as 2.1 seed 73", true},
		{"runtime settings", allocator.V2_3, 56, "as 2.1 seed 73", true},
		{"runtime settings", allocator.V2_3, 78, "as 2.1 seed 73", true},
		{"runtime settings", allocator.V2_3, 96, "as 2.1 seed 73", true},
		{"runtime settings", allocator.V2_4, 80, "as 2.1 seed 73", true},
		{"runtime settings", allocator.V2_4, 130, "as 2.1 seed 73", true},
		{"runtime settings", allocator.V2_4, 135, "as 2.1 seed 73", true},
		{"runtime settings", allocator.V2_6, 43, "as 2.1 seed 73", true},
		{"runtime settings", allocator.V2_6, 100, "as 2.1 seed 73", true},
		{"runtime settings", allocator.V2_6, 140, "as 2.1 seed 73, and a cache hit placed elsewhere (the switched split's remainder merged with a freed neighbour), forced", true},
		{"runtime settings", allocator.V2_6, 175, "as 2.1 seed 73", true},
		{"runtime settings", allocator.V2_7, 145, "as 2.1 seed 73", true},
		{"runtime settings", allocator.V2_7, 200, "as 2.1 seed 73", true},
		{"runtime settings", allocator.V2_8, 74, "as 2.1 seed 73", true},
		{"runtime settings", allocator.V2_8, 84, "as 2.1 seed 73", true},
		{"runtime settings", allocator.V2_8, 131, "as 2.1 seed 73", true},
		{"runtime settings", allocator.V2_10, 20, "as 2.1 seed 73", true},
		{"runtime settings", allocator.V2_10, 131, "as 2.1 seed 73", true},
		{"runtime settings", allocator.V2_10, 190, "as 2.1 seed 73", true},
		{"runtime max_split/roundup", allocator.V2_3, 1, "max_split_size_mb and roundup_power2_divisions changed at runtime: block sizes and oversize counts printed exact from the final settings, the max_split_size figure the final setting's (issue 12)", false},
		{"runtime max_split/roundup", allocator.V2_4, 3, "a forced allocation rounded under the final settings did not fit the segment the program's rounding made: entries went unapplied", false},
		{"runtime max_split/roundup", allocator.V2_2, 7, "before 2.4 a divisions entry of 1 leaves requests unrounded: a recorded allocation inside a block the replay had rounded up could not be cut back to an odd size", false},
		{"runtime max_split/roundup", allocator.V2_0, 6, "the stale requested sizes of free blocks were compared after the replay chose other block boundaries", false},
		{"runtime all settings", allocator.V2_2, 589, "before 2.4 a request rounded to 512 bytes took an odd-sized free block whole (less than 512 bytes over): the block above its largest rounding, outside the small pool's peak bound", false},
		{"runtime max_split/roundup", allocator.V2_1, 22, "an unrounded request took a free block of odd size whole (a remainder under 512 bytes is not split): the small pool's peak above the 512-byte rounding", false},
		{"graphs+MemPool+expandable", allocator.V2_1, 5, "should_split of a private pool's cudaMalloc'd block followed the pool, not the global expandable_segments flag: allocated and active totals differed", false},
		{"graphs+MemPool+expandable", allocator.V2_1, 8, "as 2.1 seed 5", false},
		{"graphs+MemPool+expandable", allocator.V2_2, 5, "a segment_alloc of a pool released before the snapshot was put in the default pools, which map", false},
		{"graphs+MemPool+expandable", allocator.V2_3, 4, "as 2.2 seed 5", false},
		{"graphs+MemPool+expandable", allocator.V2_4, 2, "a new reservation of a pool released before the snapshot was mapped in the default pools, which then served other calls from it", false},
		{"graphs+MemPool+expandable", allocator.V2_5, 11, "as 2.4 seed 2", false},
		{"graphs+MemPool+expandable", allocator.V2_1, 2, "after a forced call of a trace naming no pool, the stale requested size of a free block was compared", false},
		{"graphs+MemPool+expandable", allocator.V2_2, 33, "as 2.1 seed 2", false},
		{"graphs+MemPool+expandable", allocator.V2_4, 13, "a map no final segment covers was keyed as the default pools' inside a pool's reservation: the reservation walk took it for a new reservation 20 MiB below the pool's, totalGlobalMem came out 18 MB, and most entries went unapplied", false},
		{"graphs+MemPool+expandable", allocator.V2_4, 37, "as 2.4 seed 13", false},
		{"graphs+MemPool+expandable", allocator.V2_5, 32, "as 2.4 seed 13", false},
		{"graphs+MemPool+expandable", allocator.V2_6, 6, "as 2.4 seed 13", false},
		{"graphs+MemPool+expandable", allocator.V2_5, 78, "a segment of a pool the final snapshot names was held by a pool the replay made up (unnamedPool): per-pool figures from the replay's pools, not the final segments", false},
		{"graphs+MemPool+expandable", allocator.V2_8, 26, "as 2.5 seed 78", false},
		{"graphs+MemPool+expandable", allocator.V2_6, 61, "as 2.5 seed 78, in the private pools' current reserved and allocated bytes", false},
		{"graphs+MemPool", allocator.V2_3, 93, "a segment the trace creates and frees that the default pools and a graph's pool both reproduce went to the default pools: per-pool figures from the replay's pools", false},
		{"graphs+MemPool", allocator.V2_1, 97, "every pool released before the snapshot (the file shows none): an oom during a capture, which has no retry, counted at the lower end of num_alloc_retries and num_sync_all_streams", false},
		{"graphs+MemPool", allocator.V2_5, 116, "as 2.1 seed 97", false},
		{"graphs+MemPool", allocator.V2_7, 33, "as 2.1 seed 97", false},
		{"graphs+MemPool", allocator.V2_7, 61, "as 2.1 seed 97", false},
		{"graphs+MemPool", allocator.V2_7, 132, "as 2.1 seed 97", false},
		{"graphs+MemPool", allocator.V2_8, 5, "as 2.1 seed 97", false},
		{"graphs+MemPool+expandable", allocator.V2_4, 125, "as graphs+MemPool 2.1 seed 97", false},
		{"graphs+MemPool+expandable", allocator.V2_4, 138, "as graphs+MemPool 2.1 seed 97", false},
		{"graphs+MemPool+expandable", allocator.V2_6, 49, "as graphs+MemPool 2.1 seed 97", false},
		{"graphs+MemPool+expandable", allocator.V2_7, 33, "as graphs+MemPool 2.1 seed 97", false},
		{"graphs+MemPool+expandable", allocator.V2_7, 110, "as graphs+MemPool 2.1 seed 97", false},
		{"graphs+MemPool+expandable", allocator.V2_8, 5, "as graphs+MemPool 2.1 seed 97", false},
		{"graphs+MemPool+expandable", allocator.V2_8, 90, "as graphs+MemPool 2.1 seed 97", false},
		{"graphs+MemPool+expandable", allocator.V2_8, 109, "as graphs+MemPool 2.1 seed 97", false},
		{"graphs+MemPool", allocator.V2_6, 199, "every pool released before the snapshot: the private pools' peaks were printed as 0, exact", false},
		{"graphs+MemPool", allocator.V2_7, 95, "as 2.6 seed 199", false},
		{"graphs+MemPool+expandable", allocator.V2_7, 95, "as graphs+MemPool 2.6 seed 199", false},
		{"graphs+MemPool+expandable", allocator.V2_6, 199, "every pool released before the snapshot: after a forced call, the stale requested size of a free block was compared", false},
		{"graphs+MemPool+expandable", allocator.V2_1, 97, "every pool released before the snapshot, before 2.4: the pools' cudaMalloc'd segments beside the default pools' maps read as expandable_segments switched at runtime", false},
		{"graphs+MemPool+expandable", allocator.V2_2, 80, "as 2.1 seed 97, and as graphs+MemPool 2.1 seed 97", false},
		{"graphs+MemPool+expandable", allocator.V2_3, 163, "as 2.1 seed 97", false},
		{"graphs+MemPool+expandable", allocator.V2_3, 166, "as 2.1 seed 97", false},
	} {
		for _, s := range rtSettings {
			if s.name != c.setting {
				continue
			}
			o := roundTrip(s, c.v, c.seed, 250)
			if o.skipped != "" || len(o.problems) > 0 {
				t.Errorf("%s, %s, seed %d (%s): %v %s", c.setting, c.v, c.seed, c.why, o.problems, o.skipped)
			}
			if s.runtime && !s.resize && !c.unshown && !o.detected {
				t.Errorf("%s, %s, seed %d: the runtime switch was not detected", c.setting, c.v, c.seed)
			}
			if !s.runtime && o.detected {
				t.Errorf("%s, %s, seed %d: the replay found a runtime switch in a recording without one", c.setting, c.v, c.seed)
			}
			if s.resize {
				// Without --runtime-settings the recorded settings'
				// roundings and splits are taken for the program's.
				rtNoOption = true
				o := roundTrip(s, c.v, c.seed, 250)
				rtNoOption = false
				if len(o.problems) == 0 {
					t.Errorf("%s, %s, seed %d without --runtime-settings: passed; want wrong figures", c.setting, c.v, c.seed)
				}
			}
			if c.unshown {
				// Without --runtime-settings the figures are wrong, and
				// the replay says what it assumed.
				rtNoOption = true
				o := roundTrip(s, c.v, c.seed, 250)
				rtNoOption = false
				if len(o.problems) == 0 || !o.assumed {
					t.Errorf("%s, %s, seed %d without --runtime-settings: %d problems, assumption noted %v; want wrong figures and the note", c.setting, c.v, c.seed, len(o.problems), o.assumed)
				}
			}
		}
	}
}

// TestPoolBounds: the private pools' peaks are bounds only where the
// trace leaves some segments' pool open (2.9+: from the measured peak up
// by those bytes), or names no pool at all (before 2.9: from the pools'
// figure at the end to the device's peak), and print as sizes.
func TestPoolBounds(t *testing.T) {
	p := PoolFigures{Final: make([]allocator.PoolUsage, 2),
		Reserved: allocator.Stat{Current: 100 << 20, Peak: 308 << 20}, Allocated: allocator.Stat{Current: 50 << 20, Peak: 200 << 20}}
	if b := poolBounds(&p, true, "", 976<<20, 900<<20); b != nil {
		t.Errorf("2.9+, no open segment: bounds %v", b)
	}
	p.AmbiguousBytes = 136 << 20
	b := poolBounds(&p, true, "", 976<<20, 900<<20)
	r, a := b[PrivatePoolReserved], b[PrivatePoolAllocated]
	if !r.Contains(404<<20) || r.Contains(445<<20) || r.Contains(300<<20) || !a.Contains(336<<20) || a.Contains(337<<20) {
		t.Errorf("2.9+ bounds %+v %+v", r, a)
	}
	size := func(v int64) string { return fmt.Sprintf("%d MiB", v>>20) }
	if got := r.Format(size); got != "308 MiB-444 MiB" {
		t.Errorf("Format %q", got)
	}
	if got := (Bound{Min: 3}).Format(size); got != ">= 3" {
		t.Errorf("a count's Format %q", got)
	}
	p.AmbiguousBytes = 0
	b = poolBounds(&p, false, "", 976<<20, 900<<20)
	if r := b[PrivatePoolReserved]; r.Format(size) != "100 MiB-976 MiB" {
		t.Errorf("before 2.9: %s", r.Format(size))
	}
	if a := b[PrivatePoolAllocated]; a.Format(size) != "50 MiB-900 MiB" {
		t.Errorf("before 2.9: %s", a.Format(size))
	}
	// No pool in the snapshot: exact (none) unless the recording allows
	// one released before the snapshot (before 2.9, the default pools do
	// not reproduce it); then anything up to the device's peak.
	none := PoolFigures{Final: make([]allocator.PoolUsage, 1)}
	if b := poolBounds(&none, false, "", 976<<20, 900<<20); b != nil {
		t.Errorf("no pool possible: bounds %v", b)
	}
	if b := poolBounds(&none, true, reasonPoolsVanished, 976<<20, 900<<20); b != nil {
		t.Errorf("2.9+, no pool: bounds %v", b)
	}
	b = poolBounds(&none, false, reasonPoolsVanished, 976<<20, 900<<20)
	if r, a := b[PrivatePoolReserved], b[PrivatePoolAllocated]; r.Format(size) != "0 MiB-976 MiB" || a.Format(size) != "0 MiB-900 MiB" || r.Reason != reasonPoolsVanished {
		t.Errorf("vanished pools: %s, %s (%s)", r.Format(size), a.Format(size), r.Reason)
	}
}

// TestSettingsNotRecorded: a 2.2 file does not carry its allocator
// settings. Replayed without them, the figures that depend on
// max_split_size_mb are bounds that hold the recording's values whatever
// the setting was, and expandable segments are found in the recording.
func TestSettingsNotRecorded(t *testing.T) {
	for _, conf := range []string{"", "max_split_size_mb:64", "expandable_segments:True"} {
		cfg, err := allocator.ParseConfig(conf, allocator.V2_2)
		if err != nil {
			t.Fatal(err)
		}
		a, err := allocator.New(cfg, allocator.Options{Capacity: rtCapacity})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.RecordHistory(allocator.HistoryOptions{Enabled: allocator.HistoryAll, Context: allocator.ContextAll}); err != nil {
			t.Fatal(err)
		}
		// Oversize blocks under max_split_size_mb:64, live at the end.
		for _, n := range []int64{100 << 20, 80 << 20, 3 << 20, 1000} {
			if _, err := a.Malloc(n, 0, snapshot.NoStack); err != nil {
				t.Fatal(err)
			}
		}
		truth := a.MemoryStats()
		snap := writeRead(t, a.Snapshot())
		if snap.Settings != nil {
			t.Fatalf("%q: a 2.2 file carries allocator_settings", conf)
		}
		r, err := New(snap, Options{Version: allocator.V2_2})
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Run()
		if err != nil {
			t.Fatal(err)
		}
		if want := conf == "expandable_segments:True"; r.Config().ExpandableSegments != want {
			t.Errorf("%q: replayed with expandable_segments %v", conf, !want)
		}
		got := res.MemoryStatsMap()
		for _, kv := range truth {
			b, bounded := res.Bounds[kv.Key]
			switch {
			case kv.Key == "max_split_size" || strings.HasPrefix(kv.Key, "oversize_"):
				// A bound pinned to one value is printed as that value:
				// none oversize when the large pool had none.
				large := strings.Replace(strings.Replace(kv.Key, "oversize_allocations", "allocation.large_pool", 1), "oversize_segments", "segment.large_pool", 1)
				pinned := kv.Key != "max_split_size" && got[large] == 0
				if !bounded && !(pinned && got[kv.Key] == kv.Value) {
					t.Errorf("%q: %s printed as exact (%d) although the file does not record max_split_size_mb", conf, kv.Key, got[kv.Key])
				} else if bounded && (!b.Contains(kv.Value) || b.Reason != reasonSettings) {
					t.Errorf("%q: %s: bound %s (%q), truth %d", conf, kv.Key, b, b.Reason, kv.Value)
				}
			case bounded:
				if !b.Contains(kv.Value) {
					t.Errorf("%q: %s: bound %s, truth %d", conf, kv.Key, b, kv.Value)
				}
			case conf != "max_split_size_mb:64" && got[kv.Key] != kv.Value:
				// (Under max_split_size_mb the blocks are cut
				// otherwise; the replay does not infer that yet.)
				t.Errorf("%q: %s: replay %d, truth %d", conf, kv.Key, got[kv.Key], kv.Value)
			}
		}
		// Told the settings, the figures are exact again.
		r, err = New(snap, Options{Version: allocator.V2_2, Config: &cfg})
		if err != nil {
			t.Fatal(err)
		}
		if res, err = r.Run(); err != nil {
			t.Fatal(err)
		}
		if _, ok := res.Bounds["max_split_size"]; ok {
			t.Errorf("%q: max_split_size bounded although the settings were named", conf)
		}
	}
}

// writeRead writes s as a pickle and reads it back, as a real file.
func writeRead(t *testing.T, s *snapshot.Snapshot) *snapshot.Snapshot {
	t.Helper()
	var buf bytes.Buffer
	if err := snapshot.Write(&buf, s); err != nil {
		t.Fatal(err)
	}
	out, err := snapshot.Read(&buf, int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestUnappliedEntriesMakeBounds: a recording with entries the replay
// cannot apply (an alloc dropped from the trace, so its frees name an
// address nothing holds) prints no figure built on the state in between
// as exact. Every peak and total is a bound that holds the recorder's own
// value; the current figures are the final segments'.
func TestUnappliedEntriesMakeBounds(t *testing.T) {
	s, rec := recordWorkload(t, roundTripCases[0], 1, 400, 0)
	tr := s.Traces[0].Entries()
	dropped := -1
	for i, e := range tr {
		if e.Action == snapshot.ActionAlloc && i > len(tr)/4 {
			dropped = i
			break
		}
	}
	tr[dropped].Action = snapshot.ActionUserDefined
	s.Traces[0] = snapshot.TraceOf(tr...)
	r, err := New(s, Options{Version: allocator.Latest})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run()
	if err != nil {
		t.Fatal(err)
	}
	if res.Fidelity.Unapplied == 0 {
		t.Fatalf("no entry left unapplied after dropping the alloc at entry %d: %+v", dropped, *res.Fidelity)
	}
	if problems := unappliedPass(res, compareRoundTrip(rec.MemoryStats(), res)); len(problems) > 0 {
		t.Errorf("figures against the recorder's:\n  %s", strings.Join(problems, "\n  "))
	}
	// By hand: the trace starts from an empty allocator, so the allocations
	// are at least its alloc entries, and the peak at least what is
	// allocated at the end.
	var allocs, live int64
	for _, e := range tr {
		if e.Action == snapshot.ActionAlloc {
			allocs++
		}
	}
	for _, seg := range s.DeviceSegments(0) {
		for _, b := range seg.Blocks {
			if b.State == snapshot.ActiveAllocated {
				live += b.Size
			}
		}
	}
	b, ok := res.Bounds["allocation.all.allocated"]
	if !ok || b.Min != allocs || b.Max != nil {
		t.Errorf("allocation.all.allocated: bound %v (%v), want >= %d, the trace's alloc entries", b, ok, allocs)
	}
	b, ok = res.Bounds["allocated_bytes.all.peak"]
	if !ok || b.Min != live || b.Max != nil || !strings.Contains(b.Reason, "could not be applied") || !strings.Contains(b.Reason, "memstat replay") {
		t.Errorf("allocated_bytes.all.peak: bound %v (%v, %q), want >= %d and the reason", b, ok, b.Reason, live)
	}
	if got := res.Stat("allocated_bytes.all.current"); got != live {
		t.Errorf("allocated_bytes.all.current %d, the final segments hold %d", got, live)
	}
	if _, ok := res.Bounds["num_ooms"]; ok {
		t.Errorf("num_ooms is a bound; the trace's oom entries determine it")
	}
}

// TestCaptureOOMWithoutPools: before 2.9 a pool released before the
// snapshot leaves none in the file. An oom during a capture has no retry
// (malloc skips release_cached_blocks while captures_underway is not
// empty), so where the default pools do not reproduce the recording the
// ooms count only at the upper end of num_alloc_retries and the private
// pools' peaks are bounds. An oom that differs only in the memory the
// device allowed (a memory fraction the file does not record) says
// nothing of pools: the retry stays exact.
func TestCaptureOOMWithoutPools(t *testing.T) {
	record := func(v allocator.Version, capture bool) (*Result, int64) {
		a, err := allocator.New(allocator.DefaultConfig(v), allocator.Options{Capacity: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.RecordHistory(allocator.HistoryOptions{Enabled: allocator.HistoryAll, Context: allocator.ContextAll}); err != nil {
			t.Fatal(err)
		}
		var oom *allocator.OOMError
		if capture {
			// A cached 100 MiB segment, then a capture whose 950 MiB
			// request cannot be met: no release, no retry.
			p, err := a.Malloc(100<<20, 0, snapshot.NoStack)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Free(p, snapshot.NoStack); err != nil {
				t.Fatal(err)
			}
			g := snapshot.PoolID{1, 0}
			if err := a.BeginAllocateToPool(g, allocator.PoolKindGraph, allocator.StreamFilter{Stream: 0}); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Malloc(950<<20, 0, snapshot.NoStack); !errors.As(err, &oom) {
				t.Fatalf("capture: %v, want an oom", err)
			}
			if err := a.EndAllocateToPool(g); err != nil {
				t.Fatal(err)
			}
			if err := a.ReleasePool(g); err != nil {
				t.Fatal(err)
			}
			a.EmptyCache(snapshot.NoStack)
		} else {
			if err := a.SetMemoryFraction(0.5); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Malloc(300<<20, 0, snapshot.NoStack); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Malloc(300<<20, 0, snapshot.NoStack); !errors.As(err, &oom) {
				t.Fatalf("fraction: %v, want an oom", err)
			}
		}
		var retries int64 = -1
		for _, kv := range a.MemoryStats() {
			if kv.Key == "num_alloc_retries" {
				retries = kv.Value
			}
		}
		return runResult(t, writeRead(t, a.Snapshot()), Options{Version: v}), retries
	}

	res, truth := record(allocator.V2_8, true)
	b, ok := res.Bounds["num_alloc_retries"]
	if truth != 0 || !ok || !b.Contains(truth) || b.Exact() || !strings.Contains(b.Reason, "released before the snapshot") {
		t.Errorf("capture: num_alloc_retries bound %v (%s), truth %d; want a bound holding 0", b, b.Reason, truth)
	}
	// 2.9+: the oom entry names the capture's pool (which never held
	// memory), so the replay sees it and the retry is a bound.
	res29, truth29 := record(allocator.V2_9, true)
	if b, ok := res29.Bounds["num_alloc_retries"]; truth29 != 0 || !ok || !b.Contains(truth29) || b.Exact() {
		t.Errorf("capture, 2.9: num_alloc_retries bound %v (present %v), truth %d; want a bound holding 0", b, ok, truth29)
	}
	if _, ok := res.Bounds[PrivatePoolReserved]; !ok || res.Pools.Any() {
		t.Errorf("capture: private pools' peak bound present %v, pools seen %v; want a bound and no pool", ok, res.Pools.Any())
	}

	res, truth = record(allocator.V2_8, false)
	if res.Fidelity.Divergences == 0 {
		t.Fatal("fraction: the replay did not diverge at the oom; the test tests nothing")
	}
	if got, ok := res.MemoryStatsMap()["num_alloc_retries"]; !ok || got != truth || truth != 1 {
		t.Errorf("fraction: num_alloc_retries %d (exact %v), truth %d; want exact 1", got, ok, truth)
	}
	if _, ok := res.Bounds[PrivatePoolReserved]; ok {
		t.Error("fraction: the private pools' peak is a bound, though nothing allows a pool")
	}
}

// TestCaptureOOMAssumption: a capture's oom that found nothing to release
// writes the same oom entry as one after a retry (malloc skips
// release_cached_blocks while captures_underway is not empty,
// CUDACachingAllocator.cpp DeviceCachingAllocator::malloc, 2.0 to 2.10),
// and where the capture's pool never held memory the default pools
// reproduce the recording call for call: the replay counts the retry
// (assumeNoCapture, printed) though the truth is 0. With Options.Captures
// (--captures) the retries are bounds that hold the truth, and before 2.9
// the private pools' peaks are bounds too.
func TestCaptureOOMAssumption(t *testing.T) {
	for _, v := range []allocator.Version{allocator.V2_1, allocator.V2_8} {
		a, err := allocator.New(allocator.DefaultConfig(v), allocator.Options{Capacity: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.RecordHistory(allocator.HistoryOptions{Enabled: allocator.HistoryAll, Context: allocator.ContextAll}); err != nil {
			t.Fatal(err)
		}
		// 600 MiB live, nothing cached: a capture's 600 MiB request
		// fails without anything a retry could have released.
		if _, err := a.Malloc(600<<20, 0, snapshot.NoStack); err != nil {
			t.Fatal(err)
		}
		g := snapshot.PoolID{1, 0}
		if err := a.BeginAllocateToPool(g, allocator.PoolKindGraph, allocator.StreamFilter{Stream: 0}); err != nil {
			t.Fatal(err)
		}
		var oom *allocator.OOMError
		if _, err := a.Malloc(600<<20, 0, snapshot.NoStack); !errors.As(err, &oom) {
			t.Fatalf("%s: capture: %v, want an oom", v, err)
		}
		if err := a.EndAllocateToPool(g); err != nil {
			t.Fatal(err)
		}
		if err := a.ReleasePool(g); err != nil {
			t.Fatal(err)
		}
		truth := int64(-1)
		for _, kv := range a.MemoryStats() {
			if kv.Key == "num_alloc_retries" {
				truth = kv.Value
			}
		}
		snap := writeRead(t, a.Snapshot())

		res := runResult(t, snap, Options{Version: v})
		if res.Fidelity.Divergences != 0 || res.Pools.Any() {
			t.Fatalf("%s: %d divergences, pools seen %v: the default pools do not reproduce the recording; the test tests nothing", v, res.Fidelity.Divergences, res.Pools.Any())
		}
		want := assumeNoCapture
		if !v.HasDeviceCounters() {
			want = assumeNoCaptureRetries
		}
		if got, ok := res.MemoryStatsMap()["num_alloc_retries"]; truth != 0 || !ok || got != 1 || !slices.Contains(res.Assumptions, want) {
			t.Errorf("%s: num_alloc_retries %d (exact %v), truth %d, assumptions %q; want the exact 1 the recording reads as, with the note", v, got, ok, truth, res.Assumptions)
		}

		res = runResult(t, snap, Options{Version: v, Captures: true})
		b, ok := res.Bounds["num_alloc_retries"]
		if !ok || !b.Contains(truth) || b.Exact() || !strings.Contains(b.Reason, "--captures") {
			t.Errorf("%s: --captures: num_alloc_retries bound %v (%s, present %v), truth %d; want a bound holding it", v, b, b.Reason, ok, truth)
		}
		if v.HasDeviceCounters() {
			if b, ok := res.Bounds["num_sync_all_streams"]; !ok || b.Min != 0 {
				t.Errorf("%s: --captures: num_sync_all_streams bound %v (present %v); want one from 0", v, b, ok)
			}
		}
		if b, ok := res.Bounds[PrivatePoolReserved]; !ok || b.Min != 0 || b.Reason != reasonCapturesOption {
			t.Errorf("%s: --captures: private pools' peak bound %v (present %v); want 0 up, for --captures", v, b, ok)
		}
		if len(res.Assumptions) != 0 {
			t.Errorf("%s: --captures: assumptions %q; want none", v, res.Assumptions)
		}
	}
}
