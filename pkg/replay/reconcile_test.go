package replay

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/snapshot"
)

// reconcile looks the final segments and blocks up on two cores before its
// last loop (lookupFinal) and takes those answers until it changes the
// simulator, and walks the replay's segments in two halves at once
// (reconcileHalves); the result and the reconciled state must be what
// looking each one up in the loop, and one walk, give. The published traces agree with their
// snapshots, so the snapshot side is perturbed so that reconcile runs:
// segments dropped (released), a segment the replay lacks before all
// others (the loop changes the state at once) or after all others (at
// its end), a free block made live in the middle (placed half-way).
func TestReconcileLookupsAgree(t *testing.T) {
	defer func(n, m int) { splitReconcileBlocks, splitReconcileRegions = n, m }(splitReconcileBlocks, splitReconcileRegions)
	perturb := map[string]func(final []*snapshot.Segment) []*snapshot.Segment{
		"dropped": func(final []*snapshot.Segment) []*snapshot.Segment {
			var out []*snapshot.Segment
			for i, s := range final {
				if i%3 != 1 {
					out = append(out, s)
				}
			}
			return out
		},
		"lacked first": func(final []*snapshot.Segment) []*snapshot.Segment {
			seg := &snapshot.Segment{Address: 4 << 20, TotalSize: 2 << 20, Blocks: []snapshot.Block{{Address: 4 << 20, Size: 2 << 20}}}
			return append([]*snapshot.Segment{seg}, final...)
		},
		"lacked last": func(final []*snapshot.Segment) []*snapshot.Segment {
			seg := &snapshot.Segment{Address: 1 << 60, TotalSize: 2 << 20, Blocks: []snapshot.Block{{Address: 1 << 60, Size: 2 << 20, State: snapshot.ActiveAllocated}}}
			return append(append([]*snapshot.Segment(nil), final...), seg)
		},
		"placed half-way": func(final []*snapshot.Segment) []*snapshot.Segment {
			out := append([]*snapshot.Segment(nil), final...)
			for k := len(out) / 2; k < len(out); k++ {
				for j, b := range out[k].Blocks {
					if b.State == snapshot.Inactive {
						c := *out[k]
						c.Blocks = append([]snapshot.Block(nil), c.Blocks...)
						c.Blocks[j].State = snapshot.ActiveAllocated
						out[k] = &c
						return out
					}
				}
			}
			return out
		},
	}
	compared, reconciled := 0, 0
	for _, fn := range realdata.Files(t) {
		snap, err := snapshot.Load(fn)
		if err != nil {
			t.Fatal(err)
		}
		for d := range snap.Devices() {
			if snap.Trace(d).Len() == 0 {
				continue
			}
			for name, p := range perturb {
				var results [2]*Result
				var states [2][]string
				for i, split := range []int{1 << 30, 2} {
					r, err := New(snap, Options{Device: d})
					if err != nil {
						t.Fatal(err)
					}
					for r.Step() == nil {
					}
					r.final = p(r.final)
					splitReconcileBlocks, splitReconcileRegions = split, split
					results[i] = r.Result()
					r.a.EachSegment(nil, func(s *snapshot.Segment) { states[i] = append(states[i], fmt.Sprint(*s)) })
					states[i] = append(states[i], fmt.Sprint(r.a.Unmodelled()))
				}
				what := fmt.Sprintf("%s device %d, %s", fn, d, name)
				if !reflect.DeepEqual(results[0], results[1]) {
					t.Errorf("%s: looked up in the loop %+v\nbefore it, on two cores %+v", what, results[0].Agreement, results[1].Agreement)
				}
				if !reflect.DeepEqual(states[0], states[1]) {
					t.Errorf("%s: the reconciled states differ", what)
				}
				if results[0].Agreement != nil && results[0].Agreement.Reconciled > 0 {
					reconciled++
				}
				compared++
			}
		}
	}
	if compared < 20 || reconciled < 10 {
		t.Errorf("only %d replays compared, %d of them reconciled", compared, reconciled)
	}
}

// lookupFinal's answers are BlockAt's.
func TestLookupFinal(t *testing.T) {
	defer func(n int) { splitReconcileBlocks = n }(splitReconcileBlocks)
	splitReconcileBlocks = 2
	checked := 0
	for _, fn := range realdata.Files(t) {
		snap, err := snapshot.Load(fn)
		if err != nil {
			t.Fatal(err)
		}
		r, err := New(snap, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for r.Step() == nil {
		}
		final := append([]*snapshot.Segment{{Address: 4 << 20, Blocks: []snapshot.Block{{Address: 4 << 20, State: snapshot.ActiveAllocated}}}}, r.final...)
		l := lookupFinal(r.a, final)
		if l == nil {
			continue
		}
		at := 0
		for k, s := range final {
			if k == l.mid {
				at = 0
			}
			first := at
			at += len(s.Blocks)
			got, want := l.seg[k], lookSegment(r.a, s)
			if got != want {
				t.Errorf("%s: segment %#x: %b, BlockAt says %b", fn, s.Address, got, want)
			}
			if want != segFound|segWalk {
				continue
			}
			for j, sb := range s.Blocks {
				if !sb.State.Active() {
					continue
				}
				cur, ok := r.a.BlockAt(sb.Address)
				if got, want := l.active(k, first+j), ok && cur.State.Active(); got != want {
					t.Errorf("%s: block %#x: active %v, BlockAt says %v", fn, sb.Address, got, want)
				}
				checked++
			}
		}
	}
	if checked == 0 {
		t.Error("no block checked")
	}
}

// snapshotBlocks' lookup, which steps on from its last answer when asked
// in rising order, answers as a binary search of every block does, in any
// order of questions: rising (as reconcile asks), falling, random, and
// rising runs with jumps back, over blocks with repeated addresses.
func TestSnapshotBlocksLookup(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 25))
	for trial := range 200 {
		var segs []*snapshot.Segment
		var addrs []uint64
		for range rng.IntN(6) {
			s := &snapshot.Segment{}
			for range rng.IntN(40) {
				a := uint64(rng.IntN(200)) * 512
				s.Blocks = append(s.Blocks, snapshot.Block{Address: a, Size: int64(rng.IntN(1 << 20)), State: snapshot.BlockState(rng.IntN(3))})
				addrs = append(addrs, a)
			}
			segs = append(segs, s)
		}
		// The oracle: every block by address, stably, the last of an
		// address found by a binary search.
		var all []snapshot.Block
		for _, s := range segs {
			all = append(all, s.Blocks...)
		}
		slices.SortStableFunc(all, func(a, b snapshot.Block) int { return cmp.Compare(a.Address, b.Address) })
		want := func(addr uint64) (snapshot.Block, bool) {
			i := sort.Search(len(all), func(i int) bool { return all[i].Address > addr })
			if i == 0 || all[i-1].Address != addr {
				return snapshot.Block{}, false
			}
			return all[i-1], true
		}
		var qs []uint64
		for range 300 {
			if len(addrs) > 0 && rng.IntN(2) == 0 {
				qs = append(qs, addrs[rng.IntN(len(addrs))])
			} else {
				qs = append(qs, uint64(rng.IntN(220*512)))
			}
		}
		orders := map[string][]uint64{"random": qs}
		rising := slices.Clone(qs)
		slices.Sort(rising)
		orders["rising"] = rising
		falling := slices.Clone(rising)
		slices.Reverse(falling)
		orders["falling"] = falling
		var jumps []uint64
		for k := 0; k < len(rising); k += 50 {
			jumps = append(jumps, rising[k:]...)
		}
		orders["rising with jumps back"] = jumps
		for name, order := range orders {
			look := snapshotBlocks(segs)
			for _, a := range order {
				gb, gok := look(a)
				wb, wok := want(a)
				if gb != wb || gok != wok {
					t.Fatalf("trial %d, %s: block at %#x: %+v %v, a binary search finds %+v %v", trial, name, a, gb, gok, wb, wok)
				}
			}
		}
	}
}
