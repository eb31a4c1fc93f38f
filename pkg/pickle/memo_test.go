package pickle

import (
	"bytes"
	"encoding/binary"
	"fmt"
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

// TestMemoPlain: plain, the flat-dict path's read of a memo reference,
// answers exactly for the records and strs memoized in a word (what get
// returns), and leaves every other word to get: containers (which need a
// reference counted), spilled values, other kinds, indices never stored,
// reserved or past the end.
func TestMemoPlain(t *testing.T) {
	vals := []Value{
		None, Bool(true), Int(7), Int(1 << payloadBits), Float(1.5), {Kind: KindString},
		{Kind: KindString, N: 1<<payloadBits - 1}, {Kind: KindString, N: 1 << payloadBits},
		{Kind: KindBytes, N: 4}, {Kind: KindBigInt, N: 3}, {Kind: KindList, N: 12345}, {Kind: KindDict, N: 1},
		{Kind: KindTuple, N: 2}, {Kind: KindSet, N: 3}, Record(0, 0), Record(7, 1<<recordBits-1),
		Record(7, 1<<recordBits), Record(8, 0), {Kind: KindString, Tag: 1, N: 2},
	}
	var m memo
	for i, v := range vals {
		m.grow(i)
		m.set(i, v)
	}
	gap := len(vals) + 5000 // on a page of its own, never stored: the zero page
	m.grow(gap)
	reserved := gap + 1
	m.reserve(reserved)
	plains := 0
	for i := range reserved + 3 {
		got, ok := m.plain(i)
		want, stored := m.get(uint64(i))
		isPlain := stored && (want.Kind == KindRecord || want.Kind == KindString)
		if _, packed := pack(want); !packed {
			isPlain = false
		}
		if ok != isPlain || (ok && got != want) {
			t.Errorf("plain(%d) = %v, %v; get = %v, %v", i, got, ok, want, stored)
		}
		if ok {
			plains++
		}
	}
	if plains != 4 {
		t.Errorf("plain answered %d indices, want the 4 strs and records in words", plains)
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

// TestMemoZeroPage: pages grow adds read as zeros and share one page until
// set stores in them; a store goes to a page of its own, the shared one
// stays zeros, and a decoder started past a skim fills only the pages of
// the objects it decodes.
func TestMemoZeroPage(t *testing.T) {
	var m memo
	m.grow(3*memoPage + 5)
	for k, pg := range m.pages {
		if &pg[0] != &memoZeroPage[0] {
			t.Fatalf("page %d made before anything was stored in it", k)
		}
	}
	if !m.set(memoPage+7, Int(42)) || !m.set(3*memoPage, Bool(true)) {
		t.Fatal("set refused")
	}
	for k, pg := range m.pages {
		if shared := &pg[0] == &memoZeroPage[0]; shared != (k == 0 || k == 2) {
			t.Fatalf("page %d shared: %v", k, shared)
		}
	}
	for i, want := range map[int]Value{memoPage + 7: Int(42), 3 * memoPage: Bool(true)} {
		if v, ok := m.get(uint64(i)); !ok || v != want {
			t.Fatalf("index %d: %v %v, want %v", i, v, ok, want)
		}
	}
	if _, ok := m.get(5); ok || m.word(memoPage+8) != 0 || m.stored != 2 {
		t.Fatalf("an index never stored reads as stored (stored %d)", m.stored)
	}
	for i, w := range memoZeroPage {
		if w != 0 {
			t.Fatalf("the shared page was written at %d", i)
		}
	}

	// 20,000 strings stored before the key (memo 2 on), the key's value
	// refers to two (pages 0 and 4): the decoder past the skim makes those
	// two pages.
	var b bytes.Buffer
	b.WriteString("\x80\x04}\x94(\x8c\x01a\x94](")
	for i := range 20_000 {
		fmt.Fprintf(&b, "\x8c\x05s%04d\x94", i%10_000)
	}
	b.WriteString("e\x8c\x03key\x94](h\x05j")
	binary.Write(&b, binary.LittleEndian, uint32(4*memoPage+1))
	b.WriteString("eu.")
	data := b.Bytes()
	sk, err := SkimTo(bytes.NewReader(data), "key", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	d := sk.Decoder(bytes.NewReader(data[sk.Stop:]), bytes.NewReader(data), nil, nil, nil)
	top, err := d.Decode()
	if err != nil {
		t.Fatal(err)
	}
	want, wvs, err := Loads(data)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := d.Values().Get(top, "key")
	wkey, _ := wvs.Get(want, "key")
	if got, want := Canonical(d.Values(), key), Canonical(wvs, wkey); got != want || d.LazyResolved() != 2 {
		t.Fatalf("the key's value decodes to %s (%d objects decoded on demand), from the start %s", got, d.LazyResolved(), want)
	}
	made := 0
	for _, pg := range d.memo.pages {
		if &pg[0] != &memoZeroPage[0] {
			made++
		}
	}
	if n := len(d.memo.pages); n < 5 || made != 2 {
		t.Fatalf("%d pages made of %d, want the 2 the objects referred to are in", made, n)
	}
}
