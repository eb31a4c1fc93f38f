package replay

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/snapshot"
)

// TestStartScanSameResult holds a replay that takes a StartScan begun
// while its file was read to the replay of the same file read plainly:
// the same start state and the same result, on recorded workloads (ring
// cut or not) and the published snapshots. Run it with -race: the scan
// reads the trace's finished chunks while the reader appends.
func TestStartScanSameResult(t *testing.T) {
	type input struct {
		name string
		data []byte
	}
	var inputs []input
	for ci, pc := range roundTripCases {
		for _, maxEntries := range []int{0, 1000} {
			s, _ := recordWorkload(t, pc, 11, 3000, maxEntries)
			var buf bytes.Buffer
			if err := snapshot.Write(&buf, s); err != nil {
				t.Fatal(err)
			}
			inputs = append(inputs, input{fmt.Sprintf("case %d, max entries %d", ci, maxEntries), buf.Bytes()})
		}
	}
	for _, p := range realdata.ReadIfPresent(t, "recorded workloads only") {
		inputs = append(inputs, input{filepath.Base(p.Path), p.Data})
	}
	compared, taken, foreignTaken := 0, 0, 0
	var prev []byte
	for _, in := range inputs {
		plain, err := snapshot.Read(bytes.NewReader(in.data), int64(len(in.data)))
		if err != nil {
			t.Fatalf("%s: %v", in.name, err)
		}
		scan := NewStartScan()
		s, err := snapshot.ReadWith(bytes.NewReader(in.data), int64(len(in.data)), snapshot.LoadOptions{TraceGrown: scan.Grown})
		if err != nil {
			t.Fatalf("%s: %v", in.name, err)
		}
		// Stopped first, the scan covers every part handed on (what the
		// count of scans taken below relies on); a hasty one is halted
		// by the replay that takes it, wherever its goroutine is.
		scan.Stop()
		hasty := NewStartScan()
		hs, err := snapshot.ReadWith(bytes.NewReader(in.data), int64(len(in.data)), snapshot.LoadOptions{TraceGrown: hasty.Grown})
		if err != nil {
			t.Fatalf("%s: %v", in.name, err)
		}
		// A scan of another file's trace is not taken.
		var foreign *StartScan
		if prev != nil {
			foreign = NewStartScan()
			if _, err := snapshot.ReadWith(bytes.NewReader(prev), int64(len(prev)), snapshot.LoadOptions{TraceGrown: foreign.Grown}); err != nil {
				t.Fatal(err)
			}
		}
		prev = in.data
		for d := range s.Devices() {
			if s.Trace(d).Len() == 0 {
				continue
			}
			o := Options{Device: d, KeepStart: true}
			want, err := New(plain, o)
			if err != nil {
				t.Fatalf("%s: device %d: %v", in.name, d, err)
			}
			if foreign != nil {
				fo := o
				fo.StartScan = foreign
				f, err := New(s, fo)
				if err != nil {
					t.Fatalf("%s: device %d: %v", in.name, d, err)
				}
				if !reflect.DeepEqual(f.start, want.start) {
					t.Fatalf("%s: device %d: the start state with another file's scan differs", in.name, d)
				}
				if foreign.taken {
					foreignTaken++
				}
			}
			ho := o
			ho.StartScan = hasty
			h, err := New(hs, ho)
			if err != nil {
				t.Fatalf("%s: device %d: %v", in.name, d, err)
			}
			if !reflect.DeepEqual(h.start, want.start) {
				t.Fatalf("%s: device %d: the start state with a halted scan taken (%d entries) differs", in.name, d, hasty.n)
			}
			o.StartScan = scan
			got, err := New(s, o)
			if err != nil {
				t.Fatalf("%s: device %d: %v", in.name, d, err)
			}
			if !reflect.DeepEqual(got.start, want.start) {
				t.Fatalf("%s: device %d: the start state with the scan taken differs:\n%+v\nwant\n%+v", in.name, d, got.start, want.start)
			}
			gr, err := got.Run()
			if err != nil {
				t.Fatalf("%s: device %d: %v", in.name, d, err)
			}
			wr, err := want.Run()
			if err != nil {
				t.Fatalf("%s: device %d: %v", in.name, d, err)
			}
			if !reflect.DeepEqual(gr, wr) {
				t.Fatalf("%s: device %d: the result with the scan taken differs:\n%+v\nwant\n%+v", in.name, d, gr, wr)
			}
			compared++
		}
		hasty.Stop()
		if foreign != nil {
			foreign.Stop()
		}
		if scan.taken {
			taken++
		}
	}
	if foreignTaken > 0 {
		t.Fatalf("%d scans taken by the replay of another file", foreignTaken)
	}
	if taken < len(inputs)/2 {
		t.Fatalf("%d of %d scans taken: want most (the traces have finished chunks)", taken, len(inputs))
	}
	t.Logf("compared %d replays, %d with a scan taken", compared, taken)
}

// TestSortAddrs holds the touch scan's radix sort to slices.Sort: device
// addresses (a shared top, 512-byte steps), random keys, duplicates, keys
// differing in one byte only, short inputs and too little scratch.
func TestSortAddrs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	inputs := map[string][]uint64{"empty": nil, "one": {7}}
	for _, n := range []int{10, 1023, 1024, 5000, 200_000} {
		dev := make([]uint64, n)
		anyKey := make([]uint64, n)
		dup := make([]uint64, n)
		oneByte := make([]uint64, n)
		for i := range n {
			dev[i] = 0x7f0000000000 + rng.Uint64N(1<<36)&^511
			anyKey[i] = rng.Uint64()
			dup[i] = uint64(rng.IntN(50)) << 40
			oneByte[i] = 0x1234000000000000 | uint64(rng.IntN(256))<<24
		}
		inputs[fmt.Sprint("device ", n)] = dev
		inputs[fmt.Sprint("random ", n)] = anyKey
		inputs[fmt.Sprint("duplicates ", n)] = dup
		inputs[fmt.Sprint("one byte ", n)] = oneByte
	}
	for name, in := range inputs {
		for _, scratch := range []int{len(in), 2*len(in) + 5, len(in) - 1} {
			if scratch < 0 {
				continue
			}
			got := slices.Clone(in)
			sortAddrs(got, make([]uint64, scratch))
			want := slices.Clone(in)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("%s, scratch %d: not sorted as slices.Sort sorts", name, scratch)
			}
		}
	}
}

// TestStartScanHaltedMidway takes scans halted inside each part handed
// on (a halted scan stops at the next multiple of haltEvery entries):
// the replay scans the rest, and the start state and the result are a
// plain replay's.
func TestStartScanHaltedMidway(t *testing.T) {
	s0, _ := recordWorkload(t, roundTripCases[0], 12, 6000, 0)
	var buf bytes.Buffer
	if err := snapshot.Write(&buf, s0); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	var parts []*snapshot.Trace
	s, err := snapshot.ReadWith(bytes.NewReader(data), int64(len(data)), snapshot.LoadOptions{TraceGrown: func(p *snapshot.Trace) { parts = append(parts, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 3 {
		t.Fatalf("%d parts handed on: want several", len(parts))
	}
	want, err := New(s, Options{KeepStart: true})
	if err != nil {
		t.Fatal(err)
	}
	wr, err := want.Run()
	if err != nil {
		t.Fatal(err)
	}
	partial := 0
	for k, part := range parts {
		// No goroutine: the test scans as the goroutine would.
		sc := &StartScan{wake: make(chan struct{}, 1), done: make(chan struct{})}
		close(sc.done)
		for _, p := range parts[:k] {
			sc.scan(p)
		}
		before := sc.n
		sc.halt.Store(true)
		if sc.scan(part) {
			t.Fatalf("part %d: a halted scan went on to its end", k)
		}
		if sc.n > before && sc.n < part.Len() {
			partial++
		}
		r, err := New(s, Options{KeepStart: true, StartScan: sc})
		if err != nil {
			t.Fatal(err)
		}
		if sc.n > 0 && !sc.taken {
			t.Fatalf("part %d, halted after %d entries: not taken", k, sc.n)
		}
		if !reflect.DeepEqual(r.start, want.start) {
			t.Fatalf("part %d, halted after %d entries: the start state differs", k, sc.n)
		}
		got, err := r.Run()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, wr) {
			t.Fatalf("part %d, halted after %d entries: the result differs", k, sc.n)
		}
	}
	if partial == 0 {
		t.Fatalf("no scan halted inside a part (%d parts)", len(parts))
	}
}
