package replay

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// The round-trip harness (issue 12): random workloads are recorded with the
// simulator, written as a snapshot, read back and replayed in follow mode.
// Every figure the replay prints as exact must equal the simulator's own
// memory_stats(), every bound must contain it, and every placement and
// segment event must be reproduced.
//
// `go test ./pkg/replay -run TestRoundTrip` runs a few seeds per
// setting and version; `make fidelity` runs thousands and prints the
// table of the README's fidelity section (-roundtrip.runs or
// MEMSTAT_FIDELITY_RUNS: runs per setting and version).

var (
	roundTripRuns  = flag.Int("roundtrip.runs", 0, "round-trip runs per setting and version (0: MEMSTAT_FIDELITY_RUNS, else 2; 1 in -short)")
	roundTripTable = flag.Bool("roundtrip.table", false, "print the round-trip fidelity table")
	roundTripOnly  = flag.String("roundtrip.setting", "", "run only the setting of this name (e.g. 'runtime settings')")
)

// rtSetting is one allocator setting the harness records under.
type rtSetting struct {
	name     string
	conf     string
	fraction float64
	streams  int // streams used (1: the default stream only)
	// runtime: _set_allocator_settings at random points; the replay is
	// told so (Options.RuntimeSettings, --runtime-settings), as the user
	// who wrote the call would.
	runtime bool
	// resize: the runtime calls change max_split_size_mb and
	// roundup_power2_divisions (2.0+) instead of expandable_segments;
	// with switchAll, all three (expandable_segments from 2.1).
	resize, switchAll bool
	// pools: graph captures (a new pool, or a live one as
	// pool=g.pool() does), use_mem_pool blocks (2.5+) with MemPool
	// reuse, pools released mid-run (graph reset, MemPool destructor),
	// and empty_cache() while pools are alive (rtWorkload.poolStep).
	pools bool
}

// namesSettings says whether a replay of a file without its settings
// (before 2.3) is told them: for settings that change how blocks are
// rounded or split.
func (s rtSetting) namesSettings() bool {
	return strings.Contains(s.conf, "max_split_size_mb") || strings.Contains(s.conf, "roundup_power2_divisions")
}

var rtSettings = []rtSetting{
	{name: "default", conf: "", streams: 1},
	{name: "max_split_size_mb:64", conf: "max_split_size_mb:64", streams: 1},
	{name: "roundup_power2_divisions:4", conf: "roundup_power2_divisions:4", streams: 1},
	{name: "gc:0.5+fraction:0.8", conf: "garbage_collection_threshold:0.5", fraction: 0.8, streams: 1},
	{name: "expandable_segments", conf: "expandable_segments:True", streams: 1},
	{name: "3 streams+max_split_size_mb:64", conf: "max_split_size_mb:64", streams: 3},
	{name: "3 streams+expandable", conf: "expandable_segments:True", streams: 3},
	{name: "graphs+MemPool", conf: "", streams: 2, pools: true},
	{name: "graphs+MemPool+expandable", conf: "expandable_segments:True", streams: 2, pools: true},
	{name: "runtime settings", conf: "", streams: 2, runtime: true},
	{name: "runtime max_split/roundup", conf: "max_split_size_mb:64", streams: 2, runtime: true, resize: true},
	{name: "runtime all settings", conf: "roundup_power2_divisions:2", streams: 2, runtime: true, resize: true, switchAll: true},
}

var (
	// rtNoOption replays the runtime-settings row without
	// Options.RuntimeSettings (TestRoundTripRegressions: what a user who
	// does not say so gets).
	rtNoOption      bool
	rtDebugExamples bool
	rtDebugTrace    func([]snapshot.TraceEntry)
)

var rtVersions = []allocator.Version{allocator.V2_0, allocator.V2_1, allocator.V2_2, allocator.V2_3, allocator.V2_4, allocator.V2_5, allocator.V2_6, allocator.V2_7, allocator.V2_8, allocator.V2_9, allocator.V2_10}

// rtStreams are the stream handles a workload uses.
var rtStreams = []int64{0, 0x5a1, 0x5b2}

const rtCapacity = 1 << 30

// rtWorkload is one recorded random workload.
type rtWorkload struct {
	rng     *rand.Rand
	a       *allocator.Allocator
	set     rtSetting
	v       allocator.Version
	live    []uint64
	streams []int64
	ops     []string // what ran, for failure messages
	// Private pools (rtSetting.pools).
	livePools []snapshot.PoolID // pools with a use left (a graph, a MemPool object)
	capture   *snapshot.PoolID  // the capture or use_mem_pool block underway
	memPool   bool              // ... is a use_mem_pool block
	nextGraph int64
	nextMem   int64
}

// poolStep ends the capture underway, or releases a live pool (a graph's
// reset(), a MemPool's destructor: CUDACachingAllocator.cpp releasePool),
// or begins a capture into a new pool or a live one (pool=g.pool()) on
// one stream (beginAllocateToPool with the capture's stream filter), or a
// use_mem_pool block on every stream (2.5+), into a new MemPool or one
// used before.
func (w *rtWorkload) poolStep() error {
	a := w.a
	if w.capture != nil {
		id := *w.capture
		w.capture = nil
		w.ops = append(w.ops, fmt.Sprintf("end_allocate_to_pool(%v)", id))
		if err := a.EndAllocateToPool(id); err != nil {
			return err
		}
		if w.memPool {
			// use_mem_pool's __exit__ drops the use its __enter__ took.
			return a.ReleasePool(id)
		}
		return nil
	}
	if len(w.livePools) > 0 && w.rng.IntN(3) == 0 {
		j := w.rng.IntN(len(w.livePools))
		id := w.livePools[j]
		w.livePools = slices.Delete(w.livePools, j, j+1)
		w.ops = append(w.ops, fmt.Sprintf("release_pool(%v)", id))
		return a.ReleasePool(id)
	}
	var id snapshot.PoolID
	reuse := len(w.livePools) > 0 && w.rng.IntN(2) == 0
	if reuse {
		id = w.livePools[w.rng.IntN(len(w.livePools))]
	}
	w.memPool = w.v.HasMemPool() && w.rng.IntN(2) == 0
	if w.memPool {
		if !reuse || id[1] == 0 {
			w.nextMem++
			id = snapshot.PoolID{0, w.nextMem}
			w.ops = append(w.ops, fmt.Sprintf("MemPool() %v", id))
			if err := a.CreatePool(id, allocator.PoolKindMemPool); err != nil {
				return err
			}
			w.livePools = append(w.livePools, id)
		}
		w.ops = append(w.ops, fmt.Sprintf("use_mem_pool(%v)", id))
		if err := a.BeginAllocateToPool(id, allocator.PoolKindMemPool, allocator.StreamFilter{AllStreams: true}); err != nil {
			return err
		}
	} else {
		if !reuse {
			w.nextGraph++
			id = snapshot.PoolID{w.nextGraph, 0}
		}
		s := w.streams[w.rng.IntN(len(w.streams))]
		w.ops = append(w.ops, fmt.Sprintf("capture_begin(%v, stream %#x)", id, s))
		if err := a.BeginAllocateToPool(id, allocator.PoolKindGraph, allocator.StreamFilter{Stream: s}); err != nil {
			return err
		}
		// The graph holds a use of its pool until it is reset.
		w.livePools = append(w.livePools, id)
	}
	w.capture = &id
	return nil
}

func (w *rtWorkload) size() int64 {
	r := w.rng.Float64()
	var lo, hi float64
	switch {
	case r < 0.35:
		lo, hi = 1, 1<<20 // small pool
	case r < 0.8:
		lo, hi = 1<<20, 40<<20 // large pool
	case r < 0.95:
		lo, hi = 40<<20, 300<<20 // oversize under max_split_size_mb:64
	default:
		lo, hi = 300<<20, 1200<<20 // OOMs on a 1 GiB device
	}
	n := int64(lo * math.Pow(hi/lo, w.rng.Float64()))
	if w.rng.IntN(4) == 0 {
		n &^= 511
	}
	return max(n, 1)
}

// runtimeConf is a random _set_allocator_settings string the version
// accepts. The runtime-settings row switches expandable_segments only:
// the trace shows which kind of segment each allocation came from. The
// resize row also sets max_split_size_mb and roundup_power2_divisions
// (each call resets both to their defaults first, parseArgs 2.0 to 2.10),
// which change block sizes the trace does not record.
func (w *rtWorkload) runtimeConf() string {
	if !w.set.resize {
		if w.rng.IntN(2) == 0 {
			return "expandable_segments:True"
		}
		return "expandable_segments:False"
	}
	var parts []string
	if w.rng.IntN(3) > 0 {
		parts = append(parts, fmt.Sprintf("max_split_size_mb:%d", []int{24, 64, 128, 300}[w.rng.IntN(4)]))
	}
	if w.rng.IntN(2) == 0 {
		parts = append(parts, fmt.Sprintf("roundup_power2_divisions:%d", []int{1, 2, 4, 8, 16}[w.rng.IntN(5)]))
	}
	if w.set.switchAll && w.v.HasExpandableSegments() && w.rng.IntN(2) == 0 {
		parts = append(parts, []string{"expandable_segments:True", "expandable_segments:False"}[w.rng.IntN(2)])
	}
	return strings.Join(parts, ",")
}

// crashes reports whether malloc(size) on stream s would end the program
// with an error other than an out-of-memory one: max_split_size_mb
// lowered at runtime below a free block of a split segment, which
// release_available_cached_blocks then cudaFrees (a CUDA error,
// allocator.ErrCudaFreeInvalid), or, before 2.5, that function meeting a
// block of an expandable segment switched off at runtime (an internal
// assert). A program that dies there writes no snapshot of its own, so
// the resize rows do not make it.
func (w *rtWorkload) crashes(size int64, s int64) bool {
	if !w.set.resize {
		return false
	}
	_, err := w.a.Clone().Malloc(size, s, snapshot.NoStack)
	var oom *allocator.OOMError
	return err != nil && !errors.As(err, &oom)
}

func (w *rtWorkload) step() error {
	a := w.a
	stack := snapshot.NoStack
	if w.set.pools && w.rng.IntN(100) < 8 {
		return w.poolStep()
	}
	r := w.rng.IntN(100)
	if w.capture != nil && r >= 91 {
		// No synchronize, empty_cache or settings change while a
		// capture runs (CUDA forbids synchronizing a capturing stream).
		r = w.rng.IntN(91)
	}
	switch {
	case r < 48 || len(w.live) == 0:
		size := w.size()
		s := w.streams[w.rng.IntN(len(w.streams))]
		if w.crashes(size, s) {
			w.ops = append(w.ops, fmt.Sprintf("(malloc(%d, %#x) would crash: skipped)", size, s))
			return nil
		}
		addr, err := a.Malloc(size, s, stack)
		w.ops = append(w.ops, fmt.Sprintf("malloc(%d, %#x)", size, s))
		var oom *allocator.OOMError
		switch {
		case errors.As(err, &oom):
		case err != nil:
			return err
		default:
			w.live = append(w.live, addr)
		}
	case r < 85:
		j := w.rng.IntN(len(w.live))
		addr := w.live[j]
		w.live = slices.Delete(w.live, j, j+1)
		w.ops = append(w.ops, fmt.Sprintf("free(%#x)", addr))
		return a.Free(addr, stack)
	case r < 91:
		if len(w.streams) == 1 {
			return nil
		}
		addr := w.live[w.rng.IntN(len(w.live))]
		s := w.streams[w.rng.IntN(len(w.streams))]
		w.ops = append(w.ops, fmt.Sprintf("record_stream(%#x, %#x)", addr, s))
		return a.RecordStream(addr, s)
	case r < 96:
		s := w.streams[w.rng.IntN(len(w.streams))]
		w.ops = append(w.ops, fmt.Sprintf("synchronize(%#x)", s))
		a.CompleteStreamEvents(s)
	case r < 98:
		w.ops = append(w.ops, "empty_cache()")
		a.EmptyCache(stack)
	default:
		if !w.set.runtime || !w.set.resize && !w.v.HasExpandableSegments() {
			return nil
		}
		conf := w.runtimeConf()
		w.ops = append(w.ops, fmt.Sprintf("_set_allocator_settings(%q)", conf))
		return a.SetAllocatorSettings(conf)
	}
	return nil
}

// rtOutcome is what one round trip found.
type rtOutcome struct {
	skipped  string   // the setting does not exist in the version
	problems []string // empty: every exact figure equal, every bound holds
	// detected: the recording itself shows a runtime switch of
	// expandable_segments (reasonRuntimeSplit; its block-size figures are
	// bounds with or without the option), or, with the option, a block
	// size the recorded settings do not make (reasonRuntimeSeen).
	detected bool
	// assumed: the replay noted it assumed no unshown switch
	// (Result.Assumptions).
	assumed bool
	// unapplied: trace entries the replay could not apply.
	unapplied int
}

// unappliedPass: problems a run with unapplied entries does not count,
// when the replay says so (unappliedBounds): the placements and the final
// state those entries would have made. Its figures must still be exact
// or bounded.
func unappliedPass(res *Result, problems []string) []string {
	if res.Fidelity.Unapplied == 0 || !strings.HasPrefix(res.Bounds["allocated_bytes.all.peak"].Reason, plural(res.Fidelity.Unapplied, "recorded entry", "recorded entries")+" of the trace could not be applied") {
		return problems
	}
	return slices.DeleteFunc(problems, func(p string) bool {
		return strings.HasPrefix(p, "entry ") && strings.HasSuffix(p, "is not in the replayed state") ||
			strings.HasSuffix(p, " entries not applied") || strings.HasPrefix(p, "final state: ") || strings.HasPrefix(p, "first divergence: ")
	})
}

// roundTrip records one workload, writes and reads its snapshot, replays
// it and compares.
func roundTrip(set rtSetting, v allocator.Version, seed uint64, ops int) rtOutcome {
	cfg, err := allocator.ParseConfig(set.conf, v)
	if err != nil {
		return rtOutcome{skipped: err.Error()}
	}
	if set.runtime && !set.resize && !v.HasExpandableSegments() {
		return rtOutcome{skipped: "nothing to switch at runtime before 2.1"}
	}
	if set.pools && v < allocator.V2_1 {
		// docs/versions.md, Private pools.
		return rtOutcome{skipped: "2.0 snapshots carry no segment_pool_id: a pool's segments cannot be told apart"}
	}
	a, err := allocator.New(cfg, allocator.Options{Capacity: rtCapacity})
	if err != nil {
		return rtOutcome{problems: []string{err.Error()}}
	}
	if set.fraction > 0 {
		if err := a.SetMemoryFraction(set.fraction); err != nil {
			return rtOutcome{problems: []string{err.Error()}}
		}
	}
	if err := a.RecordHistory(allocator.HistoryOptions{Enabled: allocator.HistoryAll, Context: allocator.ContextAll}); err != nil {
		return rtOutcome{problems: []string{err.Error()}}
	}
	w := &rtWorkload{rng: rand.New(rand.NewPCG(seed, uint64(v))), a: a, set: set, v: v, streams: rtStreams[:set.streams]}
	for i := 0; i < ops || w.capture != nil; i++ {
		// A capture still underway at the end is ended first.
		if i >= ops {
			if err := w.poolStep(); err != nil {
				return rtOutcome{problems: []string{fmt.Sprintf("workload: %v after %s", err, strings.Join(lastOps(w.ops, 3), "; "))}}
			}
			continue
		}
		if err := w.step(); err != nil {
			return rtOutcome{problems: []string{fmt.Sprintf("workload: %v after %s", err, strings.Join(lastOps(w.ops, 3), "; "))}}
		}
	}
	truth := a.MemoryStats()
	truthPools := usedPools(a.PoolUsages())
	truthReserved, truthAllocated := a.PrivatePoolStats()
	var buf bytes.Buffer
	if err := snapshot.Write(&buf, a.Snapshot()); err != nil {
		return rtOutcome{problems: []string{"write: " + err.Error()}}
	}
	snap, err := snapshot.Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		return rtOutcome{problems: []string{"read: " + err.Error()}}
	}
	ro := Options{Version: v, RuntimeSettings: set.runtime && !rtNoOption}
	if !v.HasAllocatorSettings() && set.namesSettings() {
		// The file does not carry its settings. The replay finds
		// expandable segments in the recording itself and bounds the
		// figures of max_split_size_mb; how blocks were rounded and
		// split is not inferred yet, so for those settings the user
		// names them (memstat replay --alloc-conf).
		ro.Config = &cfg
	}
	if rtDebugTrace != nil {
		rtDebugTrace(snap.Trace(0).Entries())
	}
	// Every recorded placement must be where the replayed state has the
	// allocation, whoever decided it (the simulator or a forced step).
	var misplaced []string
	ro.OnEvent = func(i int, e snapshot.TraceEntry, ra *allocator.Allocator) {
		if e.Action == snapshot.ActionAlloc && !ra.Allocated(e.Addr) && len(misplaced) < 3 {
			misplaced = append(misplaced, fmt.Sprintf("entry %d: alloc at %#x is not in the replayed state", i, e.Addr))
		}
	}
	r, err := New(snap, ro)
	if err != nil {
		return rtOutcome{problems: []string{"replay: " + err.Error()}}
	}
	res, err := r.Run()
	if err != nil {
		return rtOutcome{problems: []string{"replay: " + err.Error()}}
	}
	problems := append(misplaced, compareRoundTrip(truth, res)...)
	if set.pools {
		problems = append(problems, comparePools(truthPools, truthReserved, truthAllocated, res)...)
	}
	problems = unappliedPass(res, problems)
	reason := res.Bounds["allocated_bytes.all.allocated"].Reason
	return rtOutcome{problems: problems, detected: strings.HasPrefix(reason, reasonRuntimeSplit) || reason == reasonRuntimeSeen, assumed: len(res.Assumptions) > 0,
		unapplied: res.Fidelity.Unapplied}
}

// usedPools are the pools a snapshot can show: the default pools and
// every pool holding a segment (a pool without one leaves no trace).
func usedPools(us []allocator.PoolUsage) []string {
	var out []string
	for _, u := range us {
		if u.Segments > 0 || u.ID == (snapshot.PoolID{}) {
			out = append(out, fmt.Sprintf("%v: %d segments, %d reserved, %d allocated, %d active, largest free %d",
				u.ID, u.Segments, u.Reserved, u.Allocated, u.Active, u.LargestFree))
		}
	}
	return out
}

// comparePools lists the differences between the simulator's per-pool
// figures and the replay's: each pool's final figures are exact, and the
// private pools' peaks are exact or a bound that holds the simulator's.
func comparePools(truth []string, reserved, allocated allocator.Stat, res *Result) []string {
	var out []string
	got := usedPools(res.Pools.Final)
	if len(got) == 0 && len(truth) == 1 {
		// The replay saw no private pool and lists none; the truth lists
		// the default pools alone (their figures are memory_stats').
		got = truth
	}
	if !slices.Equal(got, truth) {
		out = append(out, fmt.Sprintf("per-pool figures:\n    replay %v\n    truth  %v", got, truth))
	}
	for _, c := range []struct {
		key        string
		got, truth allocator.Stat
	}{{PrivatePoolReserved, res.Pools.Reserved, reserved}, {PrivatePoolAllocated, res.Pools.Allocated, allocated}} {
		if c.got.Current != c.truth.Current {
			out = append(out, fmt.Sprintf("%s now: replay %d, truth %d", c.key, c.got.Current, c.truth.Current))
		}
		if b, ok := res.Bounds[c.key]; ok {
			if !b.Contains(c.truth.Peak) {
				out = append(out, fmt.Sprintf("%s peak: bound %s does not contain %d", c.key, b, c.truth.Peak))
			}
		} else if c.got.Peak != c.truth.Peak {
			out = append(out, fmt.Sprintf("%s peak: replay %d, truth %d", c.key, c.got.Peak, c.truth.Peak))
		}
	}
	return out
}

func lastOps(ops []string, n int) []string {
	return ops[max(0, len(ops)-n):]
}

// compareRoundTrip lists every difference between the simulator's
// memory_stats and the replay's figures.
func compareRoundTrip(truth []allocator.KeyValue, res *Result) []string {
	var out []string
	got := res.MemoryStatsMap()
	for _, kv := range truth {
		if b, ok := res.Bounds[kv.Key]; ok {
			if _, dup := got[kv.Key]; dup {
				out = append(out, fmt.Sprintf("%s is both exact and bounded", kv.Key))
			}
			if !b.Contains(kv.Value) {
				out = append(out, fmt.Sprintf("%s: bound %s does not contain %d", kv.Key, b, kv.Value))
			}
			continue
		}
		g, ok := got[kv.Key]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: missing (truth %d)", kv.Key, kv.Value))
		case g != kv.Value:
			out = append(out, fmt.Sprintf("%s: replay %d, truth %d", kv.Key, g, kv.Value))
		}
	}
	// The private pools' peaks are bounds beside memory_stats, not keys
	// of it (comparePools checks them).
	bounds := len(res.Bounds)
	for _, k := range []string{PrivatePoolReserved, PrivatePoolAllocated} {
		if _, ok := res.Bounds[k]; ok {
			bounds--
		}
	}
	if len(got)+bounds != len(truth) {
		out = append(out, fmt.Sprintf("replay has %d figures and %d bounds, truth %d", len(got), bounds, len(truth)))
	}
	// The simulator's own decisions may differ from the recording (it
	// does not know the memory fraction, nor which release was an
	// empty_cache()); the replayed state must follow the recording all
	// the same: nothing left unapplied, the final state equal.
	f := res.Fidelity
	if f.Unapplied > 0 {
		out = append(out, fmt.Sprintf("%d entries not applied", f.Unapplied))
	}
	if res.Agreement != nil && !res.Agreement.Exact() {
		out = append(out, fmt.Sprintf("final state: %d mismatches with the snapshot", res.Agreement.MismatchCount))
	}
	if len(out) > 0 && len(f.Examples) > 0 {
		out = append(out, "first divergence: "+f.Examples[0])
	}
	if rtDebugExamples {
		out = append(out, f.Examples...)
		out = append(out, res.Warnings...)
		if res.Agreement != nil {
			out = append(out, res.Agreement.Mismatches...)
		}
	}
	return out
}

func roundTripRunCount(t *testing.T) int {
	if *roundTripRuns > 0 {
		return *roundTripRuns
	}
	if s := os.Getenv("MEMSTAT_FIDELITY_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("MEMSTAT_FIDELITY_RUNS=%q: want a positive number", s)
		}
		return n
	}
	if testing.Short() {
		return 1
	}
	return 2
}

// TestRoundTrip is the harness: every setting × every version × runs
// seeds. It fails on the first seeds that do not round-trip and, with
// -roundtrip.table, prints the fidelity table.
func TestRoundTrip(t *testing.T) {
	runs := roundTripRunCount(t)
	ops := 250
	// bounded: passed with entries left unapplied (their figures bounds).
	type cell struct{ runs, exact, detected, bounded int }
	table := make(map[string]map[allocator.Version]*cell)
	var settings []rtSetting
	for _, set := range rtSettings {
		if *roundTripOnly == "" || set.name == *roundTripOnly {
			settings = append(settings, set)
		}
	}
	if len(settings) == 0 {
		t.Fatalf("-roundtrip.setting=%q: no such setting", *roundTripOnly)
	}
	for _, set := range settings {
		table[set.name] = make(map[allocator.Version]*cell)
		for _, v := range rtVersions {
			c := &cell{}
			table[set.name][v] = c
			failures := 0
			for seed := uint64(1); seed <= uint64(runs); seed++ {
				o := roundTrip(set, v, seed, ops)
				if o.skipped != "" {
					break
				}
				c.runs++
				if o.detected {
					c.detected++
				}
				if !set.runtime && o.detected {
					// A switch claimed where none happened turns exact
					// figures into bounds for nothing.
					o.problems = append(o.problems, "the replay found a runtime expandable_segments switch in a recording without one")
				}
				if len(o.problems) == 0 {
					c.exact++
					if o.unapplied > 0 {
						c.bounded++
					}
					continue
				}
				if failures++; failures <= 2 {
					t.Errorf("%s, %s, seed %d:\n  %s", set.name, v, seed, strings.Join(o.problems, "\n  "))
				}
			}
		}
	}
	if !*roundTripTable {
		return
	}
	// A markdown table: it goes into the README as it is.
	var b strings.Builder
	b.WriteString("| setting |")
	for _, v := range rtVersions {
		fmt.Fprintf(&b, " %s |", v)
	}
	b.WriteString("\n|---|")
	for range rtVersions {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, set := range settings {
		fmt.Fprintf(&b, "| %s |", set.name)
		for _, v := range rtVersions {
			c := table[set.name][v]
			if c.runs == 0 {
				b.WriteString(" n/a |")
				continue
			}
			fmt.Fprintf(&b, " %.0f%% of %d", math.Floor(100*float64(c.exact)/float64(c.runs)), c.runs)
			if c.bounded > 0 {
				fmt.Fprintf(&b, " (%d bounded)", c.bounded)
			}
			b.WriteString(" |")
		}
		b.WriteString("\n")
	}
	fmt.Printf("Round trips per setting and PyTorch release: the share with every exact figure equal to the simulator's, every bound holding its value and every placement in the replayed state (runtime settings: replayed with --runtime-settings; bounded: passed with entries the replay could not apply, their figures bounds).\n\n%s", b.String())
	for _, set := range settings {
		if !set.runtime {
			continue
		}
		var runs, detected, exact int
		for _, c := range table[set.name] {
			runs, detected, exact = runs+c.runs, detected+c.detected, exact+c.exact
		}
		fmt.Printf("\n%s: %d runs, %d passed; the recording itself showed the switch in %d.\n", set.name, runs, exact, detected)
	}
}
