package replay

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/snapshot"
)

// TestTouchScanBatches holds touchScan.scan, which notes the entries in
// batches after reading their table slots ahead, to noting each entry as
// it comes: the same addresses, first-event frees (in trace order),
// pairs, live allocations' stacks and segment events, for both halves,
// from the first entry and from a third of the way in, on recorded
// workloads (a ring cut, traces shorter than a batch) and the published
// snapshots.
func TestTouchScanBatches(t *testing.T) {
	var traces []*snapshot.Trace
	for _, pc := range roundTripCases {
		for _, ops := range []int{10, 3000} {
			s, _ := recordWorkload(t, pc, 5, ops, 1000)
			traces = append(traces, s.Trace(0))
		}
	}
	for _, fn := range realdata.Files(t) {
		s, err := snapshot.Load(fn)
		if err != nil {
			t.Fatal(err)
		}
		for d := range s.Devices() {
			traces = append(traces, s.Trace(d))
		}
	}
	type found struct {
		addrs       []uint64
		freed       []firstFree
		stacks      map[uint64]uint32
		same, pairs int
		segs        []firstFree
	}
	result := func(ts *touchScan, segs []firstFree) found {
		f := found{freed: ts.freed, stacks: map[uint64]uint32{}, same: ts.same, pairs: ts.pairs, segs: segs}
		ts.allocStack.each(func(k uint64, v uint32) { f.stacks[k] = v })
		f.addrs = ts.sortedAddrs()
		return f
	}
	compared := 0
	for k, tr := range traces {
		for _, from := range []int{0, tr.Len() / 3} {
			for shard := range uint64(2) {
				var batched touchScan
				var segs []firstFree
				batched.scan(tr, from, shard, func(i int, e snapshot.TraceEntry) { segs = append(segs, firstFree{i, e}) })
				var one touchScan
				var oneSegs []firstFree
				for i, e := range tr.From(from) {
					switch e.Action {
					case snapshot.ActionAlloc, snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted, snapshot.ActionFree:
						if touchShard(e.Addr) == shard {
							one.note(i, &e)
						}
					case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentFree, snapshot.ActionSegmentMap, snapshot.ActionSegmentUnmap:
						oneSegs = append(oneSegs, firstFree{i, e})
					}
				}
				got, want := result(&batched, segs), result(&one, oneSegs)
				what := fmt.Sprintf("trace %d from %d, half %d", k, from, shard)
				if !slices.Equal(got.addrs, want.addrs) || got.same != want.same || got.pairs != want.pairs {
					t.Fatalf("%s: %d addresses, %d/%d pairs; one at a time %d, %d/%d", what, len(got.addrs), got.same, got.pairs, len(want.addrs), want.same, want.pairs)
				}
				if !reflect.DeepEqual(got.freed, want.freed) || !reflect.DeepEqual(got.stacks, want.stacks) || !reflect.DeepEqual(got.segs, want.segs) {
					t.Fatalf("%s: first-event frees, live stacks or segment events differ", what)
				}
				if len(want.addrs) > 0 {
					compared++
				}
			}
		}
	}
	if compared < 20 {
		t.Fatalf("only %d halves compared", compared)
	}
}
