package snapshot

import (
	"testing"
	"unsafe"
)

// A gigabyte snapshot holds ten million trace entries: their size is the
// bulk of memstat's memory, and no pointer may creep in (the collector
// would scan the whole trace).
func TestTraceEntryStaysSmall(t *testing.T) {
	if got := unsafe.Sizeof(TraceEntry{}); got != 40 {
		t.Errorf("TraceEntry is %d bytes, want 40", got)
	}
}

func TestContextsIntern(t *testing.T) {
	var ct Contexts
	if ct.Intern(EntryContext{}) != 0 || ct.Len() != 1 {
		t.Fatal("the zero context is not ID 0")
	}
	// Past the short scan the table switches to a map; IDs stay stable.
	ids := map[EntryContext]ContextID{}
	for i := range 3 * contextsScan {
		c := EntryContext{Stream: int64(i % (2 * contextsScan)), UserMetadata: StrID(i % 3)}
		id := ct.Intern(c)
		if prev, ok := ids[c]; ok && prev != id {
			t.Fatalf("context %+v: id %d, then %d", c, prev, id)
		}
		ids[c] = id
		if ct.Get(id) != c {
			t.Fatalf("Get(%d) = %+v, want %+v", id, ct.Get(id), c)
		}
	}
	// ids includes the zero context (stream 0, no metadata): ID 0.
	if ct.Len() != len(ids) {
		t.Errorf("Len %d for %d distinct contexts", ct.Len(), len(ids))
	}
	cl := ct.Clone()
	cl.Intern(EntryContext{Stream: -1})
	if ct.Len() == cl.Len() {
		t.Error("interning into a clone changed the original")
	}
	if ct.Get(ContextID(ct.Len()+5)) != (EntryContext{}) {
		t.Error("an unknown id is not the zero context")
	}
}
