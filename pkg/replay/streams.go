package replay

import "github.com/memstat/memstat/pkg/snapshot"

// streamTable maps a Contexts table's IDs to their streams, for the
// replay's many stream lookups.
type streamTable []int64

func streamsOf(t *snapshot.Contexts) streamTable {
	if t == nil {
		return streamTable{0}
	}
	st := make(streamTable, t.Len())
	for i := range st {
		st[i] = t.Get(snapshot.ContextID(i)).Stream
	}
	return st
}

func (st streamTable) of(e *snapshot.TraceEntry) int64 {
	if int(e.Context) < len(st) {
		return st[e.Context]
	}
	return 0
}
