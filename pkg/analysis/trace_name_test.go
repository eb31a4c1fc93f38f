package analysis

import "testing"

// TestAppendName: a name a walk leaves to the printer (NameNo) spells as
// AllocName does, in place after what the buffer holds, and SpellName
// leaves the event as if the walk had spelled it.
func TestAppendName(t *testing.T) {
	// AllocName's own sequence, by counting in base 26 without a zero.
	want := func(k int) string {
		var s []byte
		for k++; k > 0; k = (k - 1) / 26 {
			s = append([]byte{byte('a' + (k-1)%26)}, s...)
		}
		return string(s)
	}
	for _, k := range []int{0, 1, 25, 26, 27, 51, 52, 701, 702, 703, 18277, 18278, 475253, 475254, 1 << 30} {
		if got := AllocName(k); got != want(k) {
			t.Fatalf("AllocName(%d) = %q, want %q", k, got, want(k))
		}
		ev := TraceEvent{NameNo: int32(k + 1)}
		if !ev.HasName() {
			t.Fatalf("NameNo %d: no name", k+1)
		}
		if got := string(ev.AppendName([]byte("x="))); got != "x="+want(k) {
			t.Fatalf("AppendName(NameNo %d) = %q", k+1, got)
		}
		ev.SpellName()
		if ev.Name != want(k) || ev.NameNo != 0 || string(ev.AppendName(nil)) != want(k) {
			t.Fatalf("SpellName(NameNo %d): %+v", k+1, ev)
		}
	}
	if ev := (TraceEvent{}); ev.HasName() || len(ev.AppendName(nil)) != 0 {
		t.Fatal("an event without a name has one")
	}
}
