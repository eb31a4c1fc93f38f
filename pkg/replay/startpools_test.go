package replay

import (
	"math/rand/v2"
	"testing"

	"github.com/memstat/memstat/pkg/snapshot"
)

// TestStartPoolsOnePass: startPools names each pre-existing segment's pool
// after the first trace entry inside it (not an oom or snapshot marker),
// as a scan of the whole trace per segment does, on random layouts:
// segments with and without a pool, expandable ranges (left alone),
// entries inside, between and past the segments.
func TestStartPoolsOnePass(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 5))
	for round := 0; round < 200; round++ {
		ctx := &snapshot.Contexts{}
		var segs []snapshot.Segment
		at := uint64(1 << 30)
		for range 1 + rng.IntN(30) {
			at += uint64(rng.IntN(4)) << 21
			size := int64(1+rng.IntN(10)) << 21
			s := snapshot.Segment{Address: at, TotalSize: size, Expandable: rng.IntN(8) == 0}
			if rng.IntN(4) == 0 {
				s.PoolID = snapshot.PoolID{1, int64(rng.IntN(3))}
			}
			segs = append(segs, s)
			at += uint64(size)
		}
		actions := []snapshot.Action{snapshot.ActionAlloc, snapshot.ActionFreeCompleted, snapshot.ActionOOM, snapshot.ActionSnapshot, snapshot.ActionSegmentAlloc}
		var entries []snapshot.TraceEntry
		for range rng.IntN(400) {
			e := snapshot.TraceEntry{
				Action: actions[rng.IntN(len(actions))],
				Addr:   (1 << 30) + uint64(rng.IntN(int(at-(1<<30))+(4<<21)))&^511,
				Size:   512,
			}
			e.Context = ctx.Intern(snapshot.EntryContext{Pool: snapshot.PoolID{int64(rng.IntN(3)), int64(rng.IntN(3))}})
			entries = append(entries, e)
		}
		snap := &snapshot.Snapshot{Traces: []*snapshot.Trace{snapshot.TraceOf(entries...)}, Contexts: ctx}
		snap.Features.TracePoolID = true

		// What a scan per segment finds.
		want := make([]snapshot.PoolID, len(segs))
		for k, seg := range segs {
			want[k] = seg.PoolID
			if !seg.PoolID.IsDefault() || seg.Expandable {
				continue
			}
			for _, e := range entries {
				if e.Action != snapshot.ActionOOM && e.Action != snapshot.ActionSnapshot && e.Addr >= seg.Address && e.Addr < seg.End() {
					want[k] = ctx.Get(e.Context).Pool
					break
				}
			}
		}
		r := &Replay{snap: snap, trace: snap.Trace(0), start: startState{segments: segs}}
		r.startPools()
		for k := range segs {
			if got := r.start.segments[k].PoolID; got != want[k] {
				t.Fatalf("round %d: segment %d (%#x, %d bytes): pool %v, want %v", round, k, segs[k].Address, segs[k].TotalSize, got, want[k])
			}
		}
	}
}
