package pickle

import (
	"strings"
	"testing"
)

// itemsCompactor makes a record of every list of ints, from the ints alone
// (the purity the list cache relies on), and counts its calls.
type itemsCompactor struct{ calls int }

func (c *itemsCompactor) Compact(vs *Values, v Value) (Value, bool, error) {
	if v.Kind != KindList {
		return v, false, nil
	}
	c.calls++
	h := uint64(17)
	for _, it := range vs.Items(v) {
		if it.Kind != KindInt {
			return v, false, nil
		}
		h = h*31 + it.N
	}
	return Record(2, h), true, nil
}

func recordOf(items ...uint64) Value {
	h := uint64(17)
	for _, n := range items {
		h = h*31 + n
	}
	return Record(2, h)
}

// Protocol-4 pieces. memo 0 = 5, memo 1 = 7 (stored, then popped); a list
// of memo references 0 and 1 (EMPTY_LIST MEMOIZE MARK BINGET BINGET
// APPENDS) wrapped in a 1-tuple, which freezes it. The tail keeps the fast
// path's look-ahead inside the buffer.
const (
	lcHead  = "\x80\x04(K\x05\x940K\x07\x940"
	lcList  = "]\x94(h\x00h\x01e\x85"
	lcList1 = "]\x94h\x01a\x85" // one reference: EMPTY_LIST MEMOIZE BINGET APPEND
)

var lcTail = "\x8c\x20" + strings.Repeat("x", 32) + "0t."

func decodeItems(t *testing.T, data string) ([]Value, int) {
	t.Helper()
	vs := NewValues()
	c := &itemsCompactor{}
	v, err := NewBytesDecoder([]byte(data), vs, c).Decode()
	if err != nil {
		t.Fatalf("%q: %v", data, err)
	}
	var out []Value
	for _, tup := range vs.Items(v) {
		out = append(out, vs.Items(tup)[0])
	}
	return out, c.calls
}

func TestListCache(t *testing.T) {
	// The same list three times: compacted once, the same record each
	// time; a one-item list too.
	got, calls := decodeItems(t, lcHead+lcList+lcList+lcList+lcList1+lcList1+lcTail)
	want := []Value{recordOf(5, 7), recordOf(5, 7), recordOf(5, 7), recordOf(7), recordOf(7)}
	if len(got) != len(want) {
		t.Fatalf("got %d lists", len(got))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("list %d: %v, want %v", i, got[i], want[i])
		}
	}
	if calls != 2 {
		t.Errorf("compactor called %d times for 2 distinct lists of references", calls)
	}

	// A memo index stored again (LONG_BINPUT 0 := 9) changes what the
	// same references mean.
	got, calls = decodeItems(t, lcHead+lcList+"K\x09r\x00\x00\x00\x000"+lcList+lcTail)
	if got[0] != recordOf(5, 7) || got[1] != recordOf(9, 7) || calls != 2 {
		t.Errorf("after the memo changed: %v (%d calls), want %v then %v", got, calls, recordOf(5, 7), recordOf(9, 7))
	}

	// A list appended to through its memo reference before it is frozen
	// is not what its references say: its record is not reused.
	got, calls = decodeItems(t, lcHead+"]\x94(h\x00h\x01eh\x02K\x08a0\x85"+lcList+lcTail)
	if got[0] != recordOf(5, 7, 8) || got[1] != recordOf(5, 7) || calls != 2 {
		t.Errorf("a list changed after its references: %v (%d calls)", got, calls)
	}

	// A list dropped before it is frozen (POP) leaves its id to the next
	// container; the next list made of other items must not take its
	// place in the cache.
	got, calls = decodeItems(t, lcHead+"]\x94(h\x00h\x01e0"+"]\x94(K\x01K\x02e\x85"+lcList+lcTail)
	if got[0] != recordOf(1, 2) || got[1] != recordOf(5, 7) {
		t.Errorf("after a dropped list: %v (%d calls)", got, calls)
	}
}

// listChurn makes n lists of references, each frozen (so cached) and
// followed by a store to a memo index already taken (which empties the
// cache, so the next list is cached again): the cache's upkeep must stay
// linear in the input.
func listChurn(n int) []byte {
	var b strings.Builder
	b.WriteString("\x80\x04(K\x05\x940K\x07\x940")
	for i := range n {
		b.WriteString(lcList)
		b.WriteString("K" + string(rune('0'+i%10)) + "r\x00\x00\x00\x000")
	}
	b.WriteString(lcTail)
	return []byte(b.String())
}

func TestListCacheWorkIsLinear(t *testing.T) {
	var prevAlloc uint64
	var prevLen int
	for k := 4; k <= 64; k *= 2 {
		data := listChurn(k * 2000)
		c := &itemsCompactor{}
		var err error
		alloc := allocatedBy(func() { _, err = NewBytesDecoder(data, nil, c).Decode() })
		if err != nil {
			t.Fatal(err)
		}
		if prevLen > 0 {
			grow := float64(len(data)) / float64(prevLen)
			if r := float64(alloc) / float64(prevAlloc); r > 1.6*grow {
				t.Errorf("k=%d: input grew %.2fx, bytes allocated %.2fx", k, grow, r)
			}
		}
		prevAlloc, prevLen = alloc, len(data)
	}
}
