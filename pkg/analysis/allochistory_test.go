package analysis

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/memstat/memstat/pkg/snapshot"
)

// TestAllocHistoryMatchesInOrder: the scan's history answers what a pass
// in order answered when it stopped at each entry (the last alloc entry
// at an address up to it, and at the end), with and without the
// predecessors kept; its firstFree is the in-order pass's. Random traces
// on few addresses, so addresses are reused many times.
func TestAllocHistoryMatchesInOrder(t *testing.T) {
	actions := []snapshot.Action{snapshot.ActionAlloc, snapshot.ActionAlloc, snapshot.ActionFreeRequested,
		snapshot.ActionFreeCompleted, snapshot.ActionFree, snapshot.ActionSegmentAlloc, snapshot.ActionOOM}
	rng := rand.New(rand.NewPCG(16, 11))
	for round := range 40 {
		n := 1 + rng.IntN(3000)
		addrs := 1 + rng.IntN(40)
		es := make([]snapshot.TraceEntry, n)
		for i := range es {
			es[i] = snapshot.TraceEntry{Action: actions[rng.IntN(len(actions))], Addr: uint64(rng.IntN(addrs)) << 9, Size: 512, Stack: snapshot.StackID(rng.IntN(5))}
		}
		tr := snapshot.TraceOf(es...)
		for _, withPrev := range []bool{false, true} {
			rp := &Replayed{firstFree: map[uint64]snapshot.StackID{}}
			c := &capturer{rp: rp, trace: tr}
			h := c.scan(withPrev, new(atomic.Bool))
			// The reference: a map updated in order.
			last := map[uint64]int{}
			first := map[uint64]snapshot.StackID{}
			for i, e := range es {
				switch e.Action {
				case snapshot.ActionAlloc:
					last[e.Addr] = i
				case snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted, snapshot.ActionFree:
					if _, ok := last[e.Addr]; !ok {
						if _, ok := first[e.Addr]; !ok {
							first[e.Addr] = e.Stack
						}
					}
				}
				if !withPrev || rng.IntN(8) != 0 && i != n-1 {
					continue
				}
				for a := uint64(0); a <= uint64(addrs); a++ {
					w, wok := last[a<<9]
					g, gok := h.lastAllocUpTo(a<<9, i)
					if g != w || gok != wok {
						t.Fatalf("round %d: lastAllocUpTo(%#x, %d) = %d, %v; in order %d, %v", round, a<<9, i, g, gok, w, wok)
					}
				}
			}
			for a := uint64(0); a <= uint64(addrs); a++ {
				w, wok := last[a<<9]
				if g, gok := h.lastAlloc(a << 9); g != w || gok != wok {
					t.Fatalf("round %d (withPrev %v): lastAlloc(%#x) = %d, %v; in order %d, %v", round, withPrev, a<<9, g, gok, w, wok)
				}
			}
			if len(rp.firstFree) != len(first) {
				t.Fatalf("round %d: firstFree has %d addresses, in order %d", round, len(rp.firstFree), len(first))
			}
			for a, s := range first {
				if g, ok := rp.firstFree[a]; !ok || g != s {
					t.Fatalf("round %d: firstFree[%#x] = %d, %v; in order %d", round, a, g, ok, s)
				}
			}
		}
	}
}

// TestAllocHistoryStops: a scan asked to stop (the replay beside it
// failed) returns without walking the trace.
func TestAllocHistoryStops(t *testing.T) {
	es := make([]snapshot.TraceEntry, 20000)
	for i := range es {
		es[i] = snapshot.TraceEntry{Action: snapshot.ActionAlloc, Addr: uint64(i+1) << 9, Size: 512}
	}
	c := &capturer{rp: &Replayed{firstFree: map[uint64]snapshot.StackID{}}, trace: snapshot.TraceOf(es...)}
	var stop atomic.Bool
	stop.Store(true)
	if h := c.scan(true, &stop); h.last.len() != 0 {
		t.Fatalf("a stopped scan read %d addresses", h.last.len())
	}
}

// TestLastTableAgreesWithAMap: swap and get answer as a Go map does,
// through growth, with clustered and spread addresses and address 0.
func TestLastTableAgreesWithAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	var tb lastTable
	ref := map[uint64]int32{}
	for i := range 200000 {
		var a uint64
		switch rng.IntN(3) {
		case 0:
			a = uint64(rng.IntN(5000)) << 9 // clustered, reused
		case 1:
			a = rng.Uint64() &^ 511 // spread
		default:
			a = 0x7f0000000000 + uint64(i)<<9 // always new
		}
		if rng.IntN(4) == 0 {
			g, gok := tb.get(a)
			w, wok := ref[a]
			if g != w || gok != wok {
				t.Fatalf("get(%#x) = %d, %v; map %d, %v", a, g, gok, w, wok)
			}
			continue
		}
		v := int32(rng.Int32())
		g, gok := tb.swap(a, v)
		w, wok := ref[a]
		if g != w || gok != wok {
			t.Fatalf("swap(%#x) returned %d, %v; map held %d, %v", a, g, gok, w, wok)
		}
		ref[a] = v
	}
	if tb.len() != len(ref) {
		t.Fatalf("len %d, map %d", tb.len(), len(ref))
	}
	for a, w := range ref {
		if g, ok := tb.get(a); !ok || g != w {
			t.Fatalf("get(%#x) = %d, %v; map %d", a, g, ok, w)
		}
	}
}
