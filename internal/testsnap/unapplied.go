package testsnap

import (
	"slices"
	"testing"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// UnappliedFree records a run whose trace frees an address nothing holds,
// an entry no replay can apply: a 30 MiB and a 10 MiB tensor, the first
// freed, and just before that free a free_requested/free_completed pair of
// 0x1234. The allocated peak was 40 MiB, 10 MiB are live at the end, and
// both segments (40 MiB) are still cached.
func UnappliedFree(t testing.TB) *snapshot.Snapshot {
	t.Helper()
	a, err := allocator.New(allocator.DefaultConfig(allocator.Latest), allocator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.RecordHistory(allocator.HistoryOptions{Enabled: allocator.HistoryAll, Context: allocator.ContextAll}); err != nil {
		t.Fatal(err)
	}
	p, err := a.Malloc(30*MiB, 0, snapshot.NoStack)
	if err == nil {
		_, err = a.Malloc(10*MiB, 0, snapshot.NoStack)
	}
	if err == nil {
		err = a.Free(p, snapshot.NoStack)
	}
	if err != nil {
		t.Fatal(err)
	}
	s := a.Snapshot()
	tr := s.Trace(0).Entries()
	i := slices.IndexFunc(tr, func(e snapshot.TraceEntry) bool { return e.Action == snapshot.ActionFreeRequested })
	if i < 0 || i+1 >= len(tr) || tr[i+1].Action != snapshot.ActionFreeCompleted {
		t.Fatalf("no free_requested, free_completed pair in %v", tr)
	}
	bogus := []snapshot.TraceEntry{tr[i], tr[i+1]}
	bogus[0].Addr, bogus[1].Addr = 0x1234, 0x1234
	s.Traces[0] = snapshot.TraceOf(slices.Insert(tr, i, bogus...)...)
	return s
}
