package pickle

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/chunkread"
	"github.com/memstat/memstat/internal/realdata"
)

// logCompactor is a compactor that logs every dict and list it is offered,
// with what it made of it: a dict holding a str key "name", "action" or
// "state" becomes a record (a dict with a key "bad" fails), a non-empty
// list of records becomes a record, anything else is kept. It implements
// FlatDictCompactor as the same function, so that a decode with the
// flat-dict path and one without must log the same lines.
type logCompactor struct {
	log   []string
	recs  uint64
	lists map[string]uint64
}

func (c *logCompactor) Compact(vs *Values, v Value) (Value, bool, error) {
	return c.compact(vs, v.Kind, vs.Items(v))
}

func (c *logCompactor) CompactFlatDict(vs *Values, items []Value) (Value, bool, error) {
	return c.compact(vs, KindDict, items)
}

func (c *logCompactor) compact(vs *Values, k Kind, items []Value) (Value, bool, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s[", k)
	make := false
	for i, it := range items {
		switch it.Kind {
		case KindString:
			t := vs.Text(it)
			fmt.Fprintf(&b, "%q ", t)
			if k == KindDict && i%2 == 0 {
				switch t {
				case "bad":
					c.log = append(c.log, b.String()+"] error")
					return None, false, fmt.Errorf("a dict with a key \"bad\"")
				case "name", "action", "state":
					make = true
				}
			}
		case KindList, KindTuple, KindDict, KindSet:
			fmt.Fprintf(&b, "%s(%d) ", it.Kind, vs.Len(it)) // ids differ
		default:
			fmt.Fprintf(&b, "%v ", it)
		}
	}
	if k == KindList && len(items) > 0 {
		make = true
		for _, it := range items {
			make = make && it.Kind == KindRecord
		}
	}
	switch {
	case k == KindList && make:
		// Interned by content, as a snapshot's stacks are: a list the
		// decoder's cache answers gets the record a new one would, so
		// that lists are left out of the log (whether one is cached
		// depends on how the input arrived).
		key := b.String()
		id, ok := c.lists[key]
		if !ok {
			id = uint64(len(c.lists))
			c.lists[key] = id
		}
		return Record(2, id), true, nil
	case !make || k != KindDict:
		if k == KindDict {
			c.log = append(c.log, b.String()+"] kept")
		}
		return None, false, nil
	}
	c.recs++
	c.log = append(c.log, fmt.Sprintf("%s] -> %d", b.String(), c.recs))
	return Record(1, c.recs), true, nil
}

// decodeLogged decodes data with a logCompactor, the flat-dict path on or
// off, streamed in odd-sized chunks or not; it returns the log, the
// result's digest or the error.
func decodeLogged(data []byte, flat, chunked bool) (log []string, result string) {
	c := &logCompactor{lists: map[string]uint64{}}
	var d *Decoder
	if chunked {
		d = NewDecoder(chunkread.New(data), nil, c)
	} else {
		d = NewBytesDecoder(data, nil, c)
	}
	d.SetFlatDicts(flat)
	v, err := d.Decode()
	if err != nil {
		return c.log, "error: " + err.Error()
	}
	var b strings.Builder
	budget := 20000
	dumpValue(&b, d.Values(), v, 4, &budget)
	return c.log, b.String()
}

// dumpValue writes v and what it holds, depth levels down and within
// budget values (inputs may nest deeply or hold themselves).
func dumpValue(b *strings.Builder, vs *Values, v Value, depth int, budget *int) {
	if *budget--; *budget < 0 {
		b.WriteString("...")
		return
	}
	v = vs.Resolve(v)
	switch {
	case v.Kind == KindString || v.Kind == KindBytes:
		fmt.Fprintf(b, "%q", vs.Text(v))
	case v.IsContainer():
		fmt.Fprintf(b, "%s(", v.Kind)
		if depth > 0 {
			for _, it := range vs.Items(v) {
				dumpValue(b, vs, it, depth-1, budget)
				b.WriteByte(' ')
			}
		}
		b.WriteByte(')')
	case v.Kind == KindBigInt:
		b.WriteString(vs.BigInt(v).String())
	default:
		fmt.Fprintf(b, "%v", v)
	}
}

// checkFlatDicts checks that decoding data with the flat-dict path offers
// the compactor the same dicts and lists in the same order, with the same
// records made, and ends with the same value or the same error, as
// decoding it without.
func checkFlatDicts(t *testing.T, name string, data []byte) {
	t.Helper()
	wantLog, want := decodeLogged(data, false, false)
	for _, chunked := range []bool{false, true} {
		log, got := decodeLogged(data, true, chunked)
		for i := range min(len(log), len(wantLog)) {
			if log[i] != wantLog[i] {
				t.Fatalf("%s (chunked %v): compaction %d differs: flat-dict path\n  %.300s\nwithout it\n  %.300s", name, chunked, i, log[i], wantLog[i])
			}
		}
		if len(log) != len(wantLog) {
			t.Fatalf("%s (chunked %v): %d compactions with the flat-dict path, %d without", name, chunked, len(log), len(wantLog))
		}
		if got != want {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			t.Fatalf("%s (chunked %v): the flat-dict path gives\n  ...%.300s\nwithout it\n  ...%.300s", name, chunked, got[max(0, i-100):], want[max(0, i-100):])
		}
	}
}

// flatBatchPickle builds `MARK (dict)... APPENDS` into a list, as CPython writes
// a snapshot's trace: dicts memoized, keys memo references after the first
// dict, a frames list of memo references per dict.
func flatBatchPickle(r *rand.Rand, n int, bad bool) []byte {
	var b []byte
	b = append(b, opProto, 4, opEmptyList, opMemoize, opMark)
	memo := 1
	keys := map[string]int{}
	str := func(s string) {
		if i, ok := keys[s]; ok {
			b = append(b, opBinGet, byte(i))
			return
		}
		b = append(b, opShortBinUnicode, byte(len(s)))
		b = append(b, s...)
		b = append(b, opMemoize)
		keys[s] = memo
		memo++
	}
	for i := range n {
		if i > 0 && r.Intn(40) == 0 {
			b = append(b, opFrame, 1, 0, 0, 0, 0, 0, 0, 0)
		}
		b = append(b, opEmptyDict, opMemoize, opMark)
		memo++
		str("action")
		str([]string{"alloc", "free_requested", "free_completed"}[r.Intn(3)])
		str("addr")
		b = append(b, opLong1, 5, byte(i), 0, 0, 0x7f, 0)
		if bad && r.Intn(500) == 0 {
			str("bad") // the compactor fails on it, at the APPENDS
			b = append(b, opNone)
		}
		str("size")
		b = append(b, opBinInt, byte(r.Intn(256)), 2, 0, 0)
		str("frames")
		b = append(b, opEmptyList, opMemoize)
		memo++
		if r.Intn(3) > 0 {
			b = append(b, opMark, opBinGet, 2, opBinGet, 4, opAppends)
		}
		b = append(b, opSetItems)
		if r.Intn(60) == 0 {
			b = append(b, opAppends, opMark)
		}
	}
	return append(b, opAppends, opStop)
}

// TestFlatDictsMatchGeneric: the flat-dict path is invisible to a
// compactor, on the published snapshots (whole and cut short), on
// snapshot-shaped batches with random bytes changed (so that it meets
// every opcode at every place and must hand over to the generic path
// there), and on random valid programs.
func TestFlatDictsMatchGeneric(t *testing.T) {
	r := rand.New(rand.NewSource(16))
	mutate := func(data []byte) []byte {
		m := append([]byte(nil), data...)
		for range 1 + r.Intn(3) {
			m[r.Intn(len(m))] = byte(r.Intn(256))
		}
		return m
	}
	for i := range 80 {
		data := flatBatchPickle(r, 1+r.Intn(300), true)
		checkFlatDicts(t, fmt.Sprintf("batch %d", i), data)
		for j := range 10 {
			checkFlatDicts(t, fmt.Sprintf("batch %d mutation %d", i, j), mutate(data))
		}
		checkFlatDicts(t, fmt.Sprintf("batch %d cut", i), data[:r.Intn(len(data))])
	}
	for i := range 100 {
		checkFlatDicts(t, fmt.Sprintf("program %d", i), genProgram(r, 64<<(i%7), i%2 == 0))
	}
	for _, p := range realdata.ReadIfPresent(t, "checked generated pickles only") {
		checkFlatDicts(t, p.Path, p.Data)
		for range 5 {
			checkFlatDicts(t, p.Path+" (mutated)", mutate(p.Data[:min(len(p.Data), 64<<10)]))
		}
	}
}

// TestFlatDictsLong1: the flat-dict path reads a LONG1 of every length it
// takes (0-8 bytes, sign bit set or not; 9 goes the generic way) as the
// generic path does, whether or not the 8 bytes after its length are
// buffered: the last value before the input's end, the whole input cut
// at every byte, and handed out in odd-sized chunks.
func TestFlatDictsLong1(t *testing.T) {
	for n := range 10 {
		for _, top := range []byte{0x00, 0x7f, 0x80, 0xff} {
			b := []byte{opProto, 4, opEmptyList, opMark}
			for i := range 3 {
				b = append(b, opEmptyDict, opMark, opShortBinUnicode, 1, 'a'+byte(i), opLong1, byte(n))
				for j := range n {
					b = append(b, byte(0x11*(j+1)))
				}
				if n > 0 {
					b[len(b)-1] = top
				}
				b = append(b, opSetItems)
			}
			b = append(b, opAppends, opStop)
			name := fmt.Sprintf("LONG1 of %d bytes, last %#x", n, top)
			checkFlatDicts(t, name, b)
			for cut := range len(b) {
				checkFlatDicts(t, fmt.Sprintf("%s cut at %d", name, cut), b[:cut])
			}
		}
	}
}

// TestFlatDictsBatchShape: a batch of 1000 flat dicts becomes 1000
// records, in file order, with the path on or off.
func TestFlatDictsBatchShape(t *testing.T) {
	data := flatBatchPickle(rand.New(rand.NewSource(1)), 1000, false)
	for _, flat := range []bool{false, true} {
		c := &logCompactor{lists: map[string]uint64{}}
		d := NewBytesDecoder(data, nil, c)
		d.SetFlatDicts(flat)
		if _, err := d.Decode(); err != nil {
			t.Fatal(err)
		}
		if c.recs != 1000 || len(c.log) != 1000 || !strings.HasSuffix(c.log[999], "-> 1000") {
			t.Errorf("flat %v: %d records, %d dicts offered", flat, c.recs, len(c.log))
		}
	}
}
