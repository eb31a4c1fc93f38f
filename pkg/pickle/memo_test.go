package pickle

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"
)

// TestMemoWords: every value comes back from the memo as stored, in a
// word where it fits one (the edges of the record and payload fields) and
// from the side table where it does not.
func TestMemoWords(t *testing.T) {
	vals := []Value{
		None, Bool(false), Bool(true), Int(0), Int(1<<payloadBits - 1), Int(1 << payloadBits), Int(-1),
		Int(math.MaxInt64), Float(0), Float(1.5), {Kind: KindString, N: 1<<payloadBits - 1},
		{Kind: KindString, N: 1 << payloadBits}, {Kind: KindBigInt, N: 3}, {Kind: KindList, N: 12345},
		{Kind: KindDict}, Record(0, 0), Record(7, 1<<recordBits-1), Record(7, 1<<recordBits),
		Record(8, 0), Record(255, 1<<40), {Kind: KindString, Tag: 1, N: 2},
	}
	var m memo
	spilled := 0
	for i, v := range vals {
		m.grow(i)
		if !m.set(i, v) {
			t.Fatalf("set %v refused with an empty side table", v)
		}
		if _, ok := pack(v); !ok {
			spilled++
		}
	}
	for i, v := range vals {
		if got, ok := m.get(uint64(i)); !ok || got != v {
			t.Errorf("memo[%d] = %v, %v; want %v", i, got, ok, v)
		}
	}
	if len(m.spill) != spilled || spilled != 9 {
		t.Errorf("%d values spilled (%d by pack), want 9", len(m.spill), spilled)
	}
	if m.stored != len(vals) {
		t.Errorf("stored %d, want %d", m.stored, len(vals))
	}
	if _, ok := m.get(uint64(len(vals))); ok {
		t.Error("an index never stored reads as stored")
	}
}

// TestMemoSideTableFull: a pickle that memoizes more values than the side
// table holds (floats, which no word holds) is refused with an error that
// says so, wherever the memoizing opcode is decoded; up to the limit, the
// values come back from the memo.
func TestMemoSideTableFull(t *testing.T) {
	defer func(n int) { memoSpillMax = n }(memoSpillMax)
	memoSpillMax = 3
	build := func(n int) []byte {
		b := []byte{opProto, 4, opEmptyList, opMark}
		for i := range n {
			b = append(b, opBinFloat)
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(float64(i)+0.5))
			b = append(b, opMemoize)
		}
		return append(b, opBinGet, 0, opAppends, opStop)
	}
	v, vs, err := Loads(build(3))
	if err != nil {
		t.Fatal(err)
	}
	if items := vs.Items(v); len(items) != 4 || items[3] != Float(0.5) {
		t.Errorf("decoded %v, want four floats, the last the memo's first", items)
	}
	for _, streamed := range []bool{false, true} {
		var err error
		if streamed {
			_, err = NewDecoder(strings.NewReader(string(build(4))), nil, nil).Decode()
		} else {
			_, _, err = Loads(build(4))
		}
		if err == nil || !strings.Contains(err.Error(), "the memo holds more than 3 values") {
			t.Errorf("streamed=%v: error %v, want the side table's limit", streamed, err)
		}
	}
}
