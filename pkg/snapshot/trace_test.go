package snapshot

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// randomEntries makes entries whose addresses, times and sizes jump
// anywhere (the worst case of the delta encoding), every action.
func randomEntries(rng *rand.Rand, n int) []TraceEntry {
	tr := make([]TraceEntry, n)
	for i := range tr {
		tr[i] = TraceEntry{Addr: rng.Uint64() >> rng.IntN(64), Size: rng.Int64() >> rng.IntN(64), TimeUS: rng.Int64() >> rng.IntN(64),
			Stack: StackID(rng.Uint32()), Context: ContextID(rng.Uint32() >> rng.IntN(32)), Action: Action(rng.IntN(256))}
		if i%5 == 0 {
			tr[i].Size, tr[i].TimeUS = -tr[i].Size, -tr[i].TimeUS
		}
	}
	if n > 8 {
		tr[7].Addr, tr[8].Addr = math.MaxUint64, 0
		tr[5].Size, tr[6].Size = math.MinInt64, math.MaxInt64
	}
	return tr
}

// checkTrace reads c back every way it can be read and compares with want.
func checkTrace(t *testing.T, rng *rand.Rand, c *Trace, want []TraceEntry) {
	t.Helper()
	if c.Len() != len(want) {
		t.Fatalf("Len %d, want %d", c.Len(), len(want))
	}
	if got := c.Entries(); !slices.Equal(got, want) {
		t.Fatal("Entries differs from the entries appended")
	}
	var counts [256]int
	for i, e := range c.All() {
		if e != want[i] {
			t.Fatalf("All: entry %d reads %+v, want %+v", i, e, want[i])
		}
		counts[want[i].Action]++
	}
	for a, n := range counts {
		if c.Count(Action(a)) != n {
			t.Fatalf("Count(%d) = %d, want %d", a, c.Count(Action(a)), n)
		}
	}
	if len(want) == 0 {
		if c.First() != (TraceEntry{}) || c.Last() != (TraceEntry{}) {
			t.Error("an empty trace has a first or last entry")
		}
		return
	}
	if c.First() != want[0] || c.Last() != want[len(want)-1] {
		t.Error("First or Last differs")
	}
	r := c.Reader()
	idx := []int{5, 5, 4, 0, 300, 299, 301, len(want) - 1, traceBlock, traceBlock - 1, 2 * traceBlock, 3}
	for range 3000 {
		idx = append(idx, rng.IntN(len(want)))
	}
	// Backwards over a few blocks, as a backward pass reads.
	for i := min(len(want)-1, 3*traceBlock); i >= 0; i-- {
		idx = append(idx, i)
	}
	for _, i := range idx {
		if i >= len(want) {
			continue
		}
		if r.At(i) != want[i] || c.At(i) != want[i] {
			t.Fatalf("entry %d reads %+v, want %+v", i, r.At(i), want[i])
		}
	}
	var buf []TraceEntry
	for range 200 {
		i := rng.IntN(len(want) + 1)
		j := i + rng.IntN(len(want)-i+1)
		if got := c.Slice(i, j, buf); !slices.Equal(got, want[i:j]) {
			t.Fatalf("Slice(%d, %d) differs", i, j)
		}
		if buf = r.Slice(i, j, buf); !slices.Equal(buf, want[i:j]) {
			t.Fatalf("Reader.Slice(%d, %d) differs", i, j)
		}
		n := 0
		for k, e := range c.From(i) {
			if k != i+n || e != want[k] {
				t.Fatalf("From(%d): entry %d reads %+v, want %+v", i, k, e, want[k])
			}
			if n++; n == 600 {
				break
			}
		}
	}
}

// TestTrace: the compact trace reads back every entry, in every order,
// across blocks and chunks (a block may straddle two chunks), and so do
// views of it (a device's trace in a file that holds several).
func TestTrace(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, traceBlock - 1, traceBlock, 3*traceBlock + 17, 120_000} {
		want := randomEntries(rng, n)
		c := TraceOf(want...)
		checkTrace(t, rng, c, want)
		if n < 1000 {
			continue
		}
		if len(c.chunks) < 3 {
			t.Fatalf("%d entries of random values fill %d chunks: the test does not cross chunks", n, len(c.chunks))
		}
		for _, ch := range c.chunks[:len(c.chunks)-1] {
			if cap(ch) > traceChunkMax {
				t.Errorf("a chunk of %d bytes, more than %d", cap(ch), traceChunkMax)
			}
		}
		for range 5 {
			i := rng.IntN(n)
			k := rng.IntN(n - i + 1)
			checkTrace(t, rng, c.view(i, k), want[i:i+k])
		}
	}
	var b TraceBuilder
	if b.Build().Len() != 0 || (&Snapshot{}).Trace(3).Len() != 0 || (*Trace)(nil).Len() != 0 {
		t.Error("an empty trace has entries")
	}
}

// TestTraceSize: a trace of an allocator's entries (addresses and times
// close to their neighbours) takes about 12 bytes an entry, and the
// builder never holds more than the bytes written plus one chunk.
func TestTraceSize(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var b TraceBuilder
	n := 500_000
	addr, now := uint64(0x7f0000000000), int64(1_700_000_000_000_000)
	for i := range n {
		now += int64(rng.IntN(300))
		e := TraceEntry{Action: Action(1 + i%3), Addr: addr + uint64(rng.IntN(1<<16))*512, Size: int64(rng.IntN(1 << 22)), TimeUS: now,
			Stack: StackID(rng.IntN(5000)), Context: ContextID(rng.IntN(2))}
		b.Append(e)
		if i%50_000 == 0 && b.Bytes() > int64(i)*16+traceChunkMax+64<<10 {
			t.Fatalf("after %d entries the builder holds %d bytes", i, b.Bytes())
		}
	}
	tr := b.Build()
	if per := float64(tr.Bytes()) / float64(n); per > 14 || per < 6 {
		t.Errorf("%.1f bytes an entry, want about 12", per)
	}
	if last := tr.chunks[len(tr.chunks)-1]; cap(last)-len(last) > 4<<10 {
		t.Errorf("the last chunk keeps %d bytes spare", cap(last)-len(last))
	}
}

// allocatorLike makes n entries shaped as an allocator records them.
func allocatorLike(n int) *Trace {
	rng := rand.New(rand.NewPCG(3, 4))
	var b TraceBuilder
	addr, now := uint64(0x7f0000000000), int64(1_700_000_000_000_000)
	for i := range n {
		now += int64(rng.IntN(300))
		b.Append(TraceEntry{Action: Action(1 + i%3), Addr: addr + uint64(rng.IntN(1<<16))*512, Size: int64(rng.IntN(1 << 22)), TimeUS: now,
			Stack: StackID(rng.IntN(5000)), Context: ContextID(rng.IntN(2))})
	}
	return b.Build()
}

// BenchmarkTraceAll: one sequential pass over a trace (what the replay's
// scans cost per entry).
func BenchmarkTraceAll(b *testing.B) {
	tr := allocatorLike(1 << 20)
	b.ResetTimer()
	var sum uint64
	for b.Loop() {
		for _, e := range tr.All() {
			sum += e.Addr
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(tr.Len()), "ns/entry")
	_ = sum
}

func BenchmarkTraceFill(b *testing.B) {
	tr := allocatorLike(1 << 20)
	buf := make([]TraceEntry, traceBlock)
	b.ResetTimer()
	for b.Loop() {
		var d traceDecoder
		d.seek(tr, 0)
		for k := 0; k < tr.Len(); k += traceBlock {
			d.fill(buf[:min(traceBlock, tr.Len()-k)])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(tr.Len()), "ns/entry")
}

// BenchmarkTraceAppend: what the decoder pays to store an entry.
func BenchmarkTraceAppend(b *testing.B) {
	entries := allocatorLike(1 << 16).Entries()
	b.ResetTimer()
	for b.Loop() {
		var tb TraceBuilder
		for range 8 {
			for i := range entries {
				tb.Append(entries[i])
			}
		}
		tb.Build()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(8*len(entries)), "ns/entry")
}

// TestTraceClosed reads each Closed trace on another goroutine while the
// builder appends (run with -race: the finished chunks are never written
// again), and checks Extends on the built trace and its views.
func TestTraceClosed(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	want := randomEntries(rng, 200_000)
	var b TraceBuilder
	prefixes := make(chan *Trace, 4)
	checked := make(chan []int)
	go func() {
		var lens []int
		for p := range prefixes {
			for i, e := range p.All() {
				if e != want[i] {
					t.Errorf("closed trace of %d entries: entry %d reads %+v, want %+v", p.Len(), i, e, want[i])
					break
				}
			}
			if p.Count(ActionAlloc) != 0 {
				t.Errorf("closed trace of %d entries counts actions", p.Len())
			}
			lens = append(lens, p.Len())
		}
		checked <- lens
	}()
	var all []*Trace
	last := 0
	for i := range want {
		b.Append(want[i])
		if n := b.ClosedLen(); n != last {
			if n < last || n > b.Len() {
				t.Fatalf("after %d entries: ClosedLen %d (was %d)", b.Len(), n, last)
			}
			last = n
			p := b.Closed()
			all = append(all, p)
			prefixes <- p
		}
	}
	close(prefixes)
	lens := <-checked
	if len(lens) < 5 {
		t.Fatalf("%d closed traces over %d entries: want several", len(lens), len(want))
	}
	tr := b.Build()
	checkTrace(t, rng, tr, want)
	for _, p := range all {
		if !tr.Extends(p) {
			t.Fatalf("the built trace does not extend its closed trace of %d entries", p.Len())
		}
		if tr.view(0, p.Len()).Extends(p) != true || (p.Len() > 1 && tr.view(0, p.Len()-1).Extends(p)) {
			t.Fatalf("views from 0 and the closed trace of %d entries", p.Len())
		}
		if tr.view(1, tr.Len()-1).Extends(p) {
			t.Fatalf("a view from entry 1 extends the closed trace of %d entries", p.Len())
		}
	}
	other := TraceOf(want...)
	if other.Extends(all[len(all)-1]) {
		t.Fatal("a trace of the same entries in other storage extends a closed trace")
	}
	var empty TraceBuilder
	if n := empty.Closed().Len(); n != 0 {
		t.Fatalf("an empty builder's closed trace has %d entries", n)
	}
}
