package replay

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/randworkload"
	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/internal/testsnap"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// noTraceCurrents is the oracle of finalSegmentCurrents: the .current
// figures of a replay of device dev's final state without its trace
// (every final segment seeded into a simulator, or kept outside it), as
// finalCurrents computed them before it counted them directly.
func noTraceCurrents(t *testing.T, s *snapshot.Snapshot, dev int, cfg allocator.Config) map[string]int64 {
	t.Helper()
	c := *s
	c.Traces = slices.Clone(c.Traces)
	if dev < len(c.Traces) {
		c.Traces[dev] = nil
	}
	r, err := New(&c, Options{Device: dev, Config: &cfg})
	if err != nil {
		t.Fatalf("no-trace replay: %v", err)
	}
	out := map[string]int64{}
	for _, kv := range r.Result().MemoryStats {
		if strings.HasSuffix(kv.Key, ".current") {
			out[kv.Key] = kv.Value
		}
	}
	return out
}

// sameCurrents requires finalSegmentCurrents to give device dev of s
// every .current figure of the no-trace replay, and no other.
func sameCurrents(t *testing.T, name string, s *snapshot.Snapshot, dev int, cfg allocator.Config) {
	t.Helper()
	want := noTraceCurrents(t, s, dev, cfg)
	got := map[string]int64{}
	for _, kv := range finalSegmentCurrents(s.DeviceSegments(dev), cfg) {
		if strings.HasSuffix(kv.Key, ".current") {
			got[kv.Key] = kv.Value
		}
	}
	var diffs []string
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			diffs = append(diffs, fmt.Sprintf("%s: counted %d (present %v), no-trace replay %d", k, g, ok, w))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: counted, not in the no-trace replay", k))
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		t.Errorf("%s device %d (%s): the direct count differs from the no-trace replay:\n  %s", name, dev, cfg.String(), strings.Join(diffs, "\n  "))
	}
}

// devicesOf lists the devices that have segments or a trace.
func devicesOf(s *snapshot.Snapshot) []int {
	n := len(s.Traces)
	for _, seg := range s.Segments {
		n = max(n, seg.Device+1)
	}
	var out []int
	for d := range n {
		if len(s.DeviceSegments(d)) > 0 {
			out = append(out, d)
		}
	}
	return out
}

// TestFinalSegmentCurrentsMatchNoTraceReplay: the final segments' current
// figures counted in one pass (finalSegmentCurrents, which finalCurrents
// uses for a follow replay with unapplied entries) equal those of a
// no-trace replay of the same segments, key by key: on every published
// snapshot (under its own settings and under a max_split_size that makes
// oversize blocks), on random workloads recorded by the simulator (every
// round-trip setting, expandable segments, max_split_size, private pools,
// 2.0 to 2.10), on the recordings with entries no replay can apply, and
// on hand-made segments the seeding merges or cannot hold.
func TestFinalSegmentCurrentsMatchNoTraceReplay(t *testing.T) {
	t.Run("real", func(t *testing.T) {
		for _, fn := range realdata.Files(t) {
			s, err := snapshot.Load(fn)
			if err != nil {
				t.Fatal(err)
			}
			for _, dev := range devicesOf(s) {
				r, err := New(s, Options{Device: dev})
				if err != nil {
					t.Fatalf("%s: %v", filepath.Base(fn), err)
				}
				cfg := r.Config()
				sameCurrents(t, filepath.Base(fn), s, dev, cfg)
				split, err := cfg.Reparse("max_split_size_mb:40")
				if err != nil {
					t.Fatal(err)
				}
				sameCurrents(t, filepath.Base(fn), s, dev, split)
			}
		}
	})
	t.Run("recorded", func(t *testing.T) {
		cases := append(slices.Clone(roundTripCases),
			randworkload.Case{Conf: "", Version: allocator.V2_0, Capacity: 1 << 30, Streams: []int64{0, 3}, Scale: 300 << 20},
			randworkload.Case{Conf: "max_split_size_mb:30", Version: allocator.V2_3, Streams: []int64{0}, Scale: 300 << 20},
			randworkload.Case{Conf: "expandable_segments:True", Version: allocator.V2_4, Capacity: 800 << 20, Streams: []int64{0, 2}, Scale: 200 << 20},
			randworkload.Case{Conf: "expandable_segments:True,max_split_size_mb:50", Version: allocator.V2_10, Streams: []int64{0, 2}, Scale: 300 << 20, Pools: true},
		)
		ops := 800
		if testing.Short() {
			ops = 300
		}
		for ci, pc := range cases {
			for seed := uint64(1); seed <= 3; seed++ {
				s, _ := recordWorkload(t, pc, seed, ops, 0)
				cfg, err := allocator.ParseConfig(pc.Conf, pc.Version)
				if err != nil {
					t.Fatal(err)
				}
				sameCurrents(t, fmt.Sprintf("case %d %s %q seed %d", ci, pc.Version, pc.Conf, seed), s, 0, cfg)
			}
		}
	})
	t.Run("unapplied", func(t *testing.T) {
		// TestUnappliedEntriesMakeBounds' recording, an alloc dropped.
		s, _ := recordWorkload(t, roundTripCases[0], 1, 400, 0)
		tr := s.Traces[0].Entries()
		for i, e := range tr {
			if e.Action == snapshot.ActionAlloc && i > len(tr)/4 {
				tr[i].Action = snapshot.ActionUserDefined
				break
			}
		}
		s.Traces[0] = snapshot.TraceOf(tr...)
		r, err := New(s, Options{Version: allocator.Latest})
		if err != nil {
			t.Fatal(err)
		}
		res := r.Result()
		if res.Fidelity.Unapplied == 0 {
			t.Fatal("no entry left unapplied")
		}
		sameCurrents(t, "dropped alloc", s, 0, r.Config())
		// check's recording: a free of 0x1234 nothing holds.
		s = testsnap.UnappliedFree(t)
		if r, err = New(s, Options{Version: allocator.Latest}); err != nil {
			t.Fatal(err)
		}
		if res := r.Result(); res.Fidelity.Unapplied == 0 {
			t.Fatal("the free of 0x1234 was applied")
		}
		sameCurrents(t, "free of 0x1234", s, 0, r.Config())
	})
	t.Run("hand-made", func(t *testing.T) {
		const mb = 1 << 20
		blk := func(addr uint64, size int64, st snapshot.BlockState) snapshot.Block {
			req := size
			if !st.Active() {
				req = 0
			}
			return snapshot.Block{Address: addr, Size: size, RequestedSize: req, State: st}
		}
		in, pend, free := snapshot.ActiveAllocated, snapshot.ActivePendingFree, snapshot.Inactive
		s := &snapshot.Snapshot{Segments: []snapshot.Segment{
			// Neighbouring free blocks, merged by the seeding.
			{Address: 0x10000000, TotalSize: 20 * mb, Pool: snapshot.LargePool, Blocks: []snapshot.Block{
				blk(0x10000000, 4*mb, in), blk(0x10400000, 2*mb, free), blk(0x10600000, 2*mb, free),
				blk(0x10800000, 4*mb, pend), blk(0x10c00000, 8*mb, free)}},
			// Free blocks only.
			{Address: 0x20000000, TotalSize: 20 * mb, Pool: snapshot.LargePool, Blocks: []snapshot.Block{
				blk(0x20000000, 10*mb, free), blk(0x20a00000, 10*mb, free)}},
			// Blocks that do not tile the segment: kept outside.
			{Address: 0x30000000, TotalSize: 20 * mb, Pool: snapshot.LargePool, Blocks: []snapshot.Block{
				blk(0x30000000, 4*mb, in), blk(0x30400000, 2*mb, free)}},
			// No blocks listed; a small-pool segment.
			{Address: 0x40000000, TotalSize: 2 * mb, Pool: snapshot.SmallPool},
			{Address: 0x40200000, TotalSize: 2 * mb, Pool: snapshot.SmallPool, Blocks: []snapshot.Block{
				blk(0x40200000, 512, in), blk(0x40200200, 2*mb-512, free)}},
			// Oversize under max_split_size_mb:30.
			{Address: 0x50000000, TotalSize: 40 * mb, Pool: snapshot.LargePool, Blocks: []snapshot.Block{
				blk(0x50000000, 40*mb, in)}},
			// Expandable segments: two mapped ranges of one stream side
			// by side (one seeded range), and a range of a small pool.
			{Address: 0x60000000, TotalSize: 40 * mb, Pool: snapshot.LargePool, Expandable: true, Blocks: []snapshot.Block{
				blk(0x60000000, 6*mb, in), blk(0x60600000, 34*mb, free)}},
			{Address: 0x62800000, TotalSize: 20 * mb, Pool: snapshot.LargePool, Expandable: true, Blocks: []snapshot.Block{
				blk(0x62800000, 20*mb, pend)}},
			{Address: 0x70000000, TotalSize: 4 * mb, Pool: snapshot.SmallPool, Expandable: true, Stream: 7, Blocks: []snapshot.Block{
				blk(0x70000000, 1024, in), blk(0x70000400, 4*mb-1024, free)}},
		}}
		for _, conf := range []string{"", "max_split_size_mb:30"} {
			cfg, err := allocator.ParseConfig(conf, allocator.Latest)
			if err != nil {
				t.Fatal(err)
			}
			sameCurrents(t, "hand-made", s, 0, cfg)
		}
	})
}
