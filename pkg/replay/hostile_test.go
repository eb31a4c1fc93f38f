package replay

import (
	"testing"

	"github.com/memstat/memstat/pkg/allocator"
)

// A recording with a map larger than the default device's reservation
// replays (the device memory is raised to fit it) instead of panicking.
func TestReplayMapLargerThanDefaultReservation(t *testing.T) {
	cfg, err := allocator.ParseConfig("expandable_segments:True", allocator.Latest)
	if err != nil {
		t.Fatal(err)
	}
	a, err := allocator.New(cfg, allocator.Options{TotalMemory: 100 * allocator.GiB})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.RecordHistory(allocator.HistoryOptions{Enabled: allocator.HistoryAll, Context: allocator.ContextAll}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Malloc(91*allocator.GiB, 0, 0); err != nil {
		t.Fatal(err)
	}
	snap := a.Snapshot()
	for _, mode := range []Mode{Follow, WhatIf} {
		r, err := New(snap, Options{Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		for r.Step() == nil {
		}
		if got := r.Result().Stats.AllocatedBytes[0].Peak; got != 91*allocator.GiB {
			t.Errorf("%v: peak allocated %d, want %d", mode, got, int64(91*allocator.GiB))
		}
	}
}

// TestRoundTripNoPanic: round trips that once panicked must replay to an
// answer, and a right one.
func TestRoundTripNoPanic(t *testing.T) {
	for _, s := range rtSettings {
		if s.name != "graphs+MemPool+expandable" {
			continue
		}
		// A guessed reservation moved onto another (PlaceGuessedReservation
		// looked only at the lowest region in the way), then a forced map
		// inserted a duplicate unmapped block.
		if o := roundTrip(s, allocator.V2_6, 43, 250); len(o.problems) > 0 {
			t.Errorf("2.6 seed 43: %v", o.problems)
		}
	}
}
