package snapshot

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/chunkread"
	"github.com/memstat/memstat/internal/realdata"
)

// FuzzRead reads arbitrary bytes as a snapshot twice, from a bytes.Reader
// with the size known and streamed in small chunks with the size unknown,
// and checks that neither panics, that both agree (error text, or the
// whole model), that errors are one short line, that every stack, frame and
// string id of a model resolves, and that the bytes allocated stay within
// the linear bound of TestReadMemoryIsLinearInInputSize.
//
// Run it with
//
//	go test -run='^$' -fuzz='^FuzzRead$' -fuzztime=30s ./pkg/snapshot
//
// Seeds: testdata/fuzz/FuzzRead (small synthesized snapshots of every
// PyTorch version and encoding, and short prefixes of real snapshots), the
// crafted inputs of hostile_test.go, and when ../shared/testdata/real is
// present, prefixes of every real snapshot and the smallest ones whole.
func FuzzRead(f *testing.F) {
	addSnapshotSeeds(f)
	for _, file := range realdata.FilesIfPresent() {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, n := range []int{100, 1000, 4096} {
			f.Add(data[:min(n, len(data))])
		}
		if len(data) <= 16<<10 {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkRead(t, data)
	})
}

// addSnapshotSeeds adds the seeds FuzzRead and FuzzStreamLazy share: the
// small hostile inputs and the well-formed seed snapshots.
func addSnapshotSeeds(f *testing.F) {
	for _, c := range hostileSnapshots() {
		if len(c.data) <= 8<<10 {
			f.Add(c.data)
		}
	}
	for _, s := range seedSnapshots() {
		f.Add(s.data)
	}
}

// Memory bound of every Read: readAllocPerByte bytes allocated (TotalAlloc,
// garbage included) per input byte (decompressed, for gzip) plus
// readAllocSlack (the 1 MiB read buffers and gzip's window).
const (
	readAllocPerByte = 512
	readAllocSlack   = 4 << 20
	maxReadErrorLen  = 400
)

func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// checkRead is FuzzRead's property for one input; it returns the error of
// the first read.
func checkRead(t *testing.T, data []byte) (*Snapshot, error) {
	t.Helper()
	var s1, s2 *Snapshot
	var err1, err2 error
	alloc := allocatedBy(func() {
		s1, err1 = Read(bytes.NewReader(data), int64(len(data)))
		s2, err2 = Read(chunkread.New(data), -1)
	})
	n := uint64(len(data))
	if len(data) > 2 && data[0] == 0x1f && data[1] == 0x8b {
		n = max(n, uint64(gunzippedSize(data)))
	}
	if limit := 2*readAllocPerByte*n + 2*readAllocSlack; alloc > limit {
		t.Errorf("reading %d bytes allocated %d bytes, over the %d-byte bound", len(data), alloc, limit)
	}
	if (err1 == nil) != (err2 == nil) {
		t.Fatalf("sized and streamed reads disagree:\n   sized: %v\nstreamed: %v", err1, err2)
	}
	// The decoder's flat-dict path (pickle.FlatDictCompactor) is invisible:
	// without it, the same model or the same error.
	s3, err3 := readFlat(bytes.NewReader(data), int64(len(data)), nil, false)
	if (err1 == nil) != (err3 == nil) || err1 != nil && err1.Error() != err3.Error() {
		t.Fatalf("reads with and without the flat-dict path disagree:\n    with: %v\n without: %v", err1, err3)
	}
	if err1 != nil {
		checkReadError(t, err1)
		if err1.Error() != err2.Error() {
			t.Fatalf("sized and streamed errors differ:\n   sized: %v\nstreamed: %v", err1, err2)
		}
		return nil, err1
	}
	m1, m2 := modelSummary(t, s1), modelSummary(t, s2)
	if m1 != m2 {
		t.Fatalf("sized and streamed reads give different models")
	}
	if !reflect.DeepEqual(s1, s3) {
		t.Fatalf("reads with and without the flat-dict path give different models")
	}
	checkStream(t, data, s1)
	return s1, nil
}

// checkStream: reading data with its entries handed on (Stream, as
// `trace --stream` does) hands on the entries Read keeps, each as its
// device's, and ends with the same model less the entries; or it refuses
// the file in one line, only because an entry's device was not known
// while it decoded or its lists were not runs in file order.
func checkStream(t *testing.T, data []byte, want *Snapshot) {
	t.Helper()
	var got [][]StreamedEntry
	st := &entryStream{fn: func(e *StreamedEntry) error {
		for len(got) <= e.Device {
			got = append(got, nil)
		}
		if e.Index != len(got[e.Device]) {
			t.Fatalf("device %d: entry handed on as index %d after %d", e.Device, e.Index, len(got[e.Device]))
		}
		got[e.Device] = append(got[e.Device], *e)
		return nil
	}}
	s, err := readWith(bytes.NewReader(data), int64(len(data)), st)
	if err != nil {
		checkReadError(t, err)
		if msg := err.Error(); !strings.Contains(msg, "outside device_traces") && !strings.Contains(msg, "decoded in it") && !strings.Contains(msg, "decoded as its own") {
			t.Fatalf("Read reads it, the stream refuses it: %v", err)
		}
		return
	}
	for d := range want.Devices() {
		tr := want.Trace(d)
		var dev []StreamedEntry
		if d < len(got) {
			dev = got[d]
		}
		if len(dev) != tr.Len() || s.Trace(d).Len() != 0 {
			t.Fatalf("device %d: %d entries handed on, Read has %d", d, len(dev), tr.Len())
		}
		for i, e := range tr.All() {
			c := want.Context(&e)
			e.Context = 0
			if dev[i].Entry != e || dev[i].Context != c {
				t.Fatalf("device %d entry %d: handed on %+v %+v, Read has %+v %+v", d, i, dev[i].Entry, dev[i].Context, e, c)
			}
		}
	}
	s.Traces, s.Contexts = want.Traces, want.Contexts
	if modelSummary(t, s) != modelSummary(t, want) {
		t.Fatalf("the streamed read gives another model")
	}
}

// gunzippedSize returns how many bytes a gzip stream expands to (up to
// 1 GiB; it stops at the first error).
func gunzippedSize(data []byte) int64 {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return 0
	}
	n, _ := io.Copy(io.Discard, io.LimitReader(zr, 1<<30))
	return n
}

func checkReadError(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	if strings.ContainsAny(msg, "\n\r") {
		t.Errorf("error is not one line: %q", msg)
	}
	if len(msg) > maxReadErrorLen {
		t.Errorf("error is %d bytes long, over %d: %.200q...", len(msg), maxReadErrorLen, msg)
	}
}

// modelSummary renders a model as text, resolving every stack, frame and
// string id it holds (an id out of range panics here). Frames are shown by
// id: two reads of one input intern them in the same order.
func modelSummary(t *testing.T, s *Snapshot) string {
	t.Helper()
	var b strings.Builder
	stack := func(id StackID) {
		if int(id) >= s.Stacks.NumStacks() {
			t.Fatalf("stack id %d out of range (%d stacks)", id, s.Stacks.NumStacks())
		}
		for _, fid := range s.Stacks.Stack(id) {
			// the frame id, not its text: one long name may be shared by
			// every frame (hostile inputs do that)
			f := s.Stacks.Frame(fid)
			fmt.Fprintf(&b, " %d:%d:%d:%d", fid, len(f.Name), len(f.Filename), f.Line)
		}
		b.WriteByte('\n')
	}
	for _, sg := range s.Segments {
		fmt.Fprintf(&b, "seg %+v", Segment{Device: sg.Device, Address: sg.Address, TotalSize: sg.TotalSize,
			AllocatedSize: sg.AllocatedSize, ActiveSize: sg.ActiveSize, RequestedSize: sg.RequestedSize,
			Stream: sg.Stream, Pool: sg.Pool, PoolID: sg.PoolID, Expandable: sg.Expandable})
		stack(sg.Stack)
		for _, bl := range sg.Blocks {
			fmt.Fprintf(&b, "blk %d %d %d %s", bl.Address, bl.Size, bl.RequestedSize, bl.State)
			stack(bl.Stack)
		}
	}
	for d := range s.Devices() {
		for _, e := range s.Trace(d).All() {
			if s.Contexts == nil || int(e.Context) >= s.Contexts.Len() {
				t.Fatalf("context id out of range")
			}
			c := s.Context(&e)
			if int(c.CompileContext) >= len(s.Strings) || int(c.UserMetadata) >= len(s.Strings) {
				t.Fatalf("string id out of range")
			}
			fmt.Fprintf(&b, "ev %d %s %d %d %d %d %q %q", d, e.Action, e.Addr, e.Size, c.Stream, e.TimeUS,
				s.String(c.CompileContext), s.String(c.UserMetadata))
			stack(e.Stack)
		}
		_ = s.DeviceSegments(d)
	}
	fmt.Fprintf(&b, "%+v %+v %q\n", s.Settings, s.Annotations, s.Warnings)
	return b.String()
}

// Pickle trees for tests. A *ptDict or *ptList written twice is written
// once and referenced through the memo after, as CPython does for a shared
// object; ptRaw is written as it is (opcodes for hostile shapes).
type (
	ptDict  struct{ kv []any } // key, value, key, value, ...
	ptList  struct{ items []any }
	ptTuple []any
	ptRaw   string
)

func pdict(kv ...any) *ptDict    { return &ptDict{kv: kv} }
func plist(items ...any) *ptList { return &ptList{items: items} }

// ptStyle is how a pickler writes: CPython's pickle.dump at a protocol, or
// PyTorch's C++ torch::jit::Pickler (protocol 2, every string memoized by
// value, containers never shared, MARK...SETITEMS even for one item, ints
// past int32 as 8-byte LONG1).
type ptStyle struct {
	proto int
	cpp   bool
}

type ptWriter struct {
	ptStyle
	b    []byte
	memo map[any]int
	strs map[string]int
	n    int
}

// encodeTree pickles v.
func encodeTree(st ptStyle, v any) []byte {
	w := &ptWriter{ptStyle: st, memo: map[any]int{}, strs: map[string]int{}}
	w.value(v)
	w.b = append(w.b, '.')
	head := []byte{0x80, byte(st.proto)}
	if st.proto >= 4 {
		head = append(head, 0x95)
		head = binary.LittleEndian.AppendUint64(head, uint64(len(w.b)))
	}
	return append(head, w.b...)
}

func (w *ptWriter) op(b ...byte) { w.b = append(w.b, b...) }

func (w *ptWriter) u32(op byte, n uint32) {
	w.op(op)
	w.b = binary.LittleEndian.AppendUint32(w.b, n)
}

func (w *ptWriter) put() int {
	switch {
	case w.proto >= 4 && !w.cpp:
		w.op(0x94) // MEMOIZE
	case w.n < 256:
		w.op('q', byte(w.n))
	default:
		w.u32('r', uint32(w.n))
	}
	w.n++
	return w.n - 1
}

func (w *ptWriter) get(i int) {
	if i < 256 {
		w.op('h', byte(i))
	} else {
		w.u32('j', uint32(i))
	}
}

func (w *ptWriter) value(v any) {
	switch x := v.(type) {
	case nil:
		w.op('N')
	case bool:
		if x {
			w.op(0x88)
		} else {
			w.op(0x89)
		}
	case int:
		w.int(int64(x))
	case int64:
		w.int(x)
	case uint64:
		if x < 1<<63 {
			w.int(int64(x))
			return
		}
		w.op(0x8a, 9)
		w.b = binary.LittleEndian.AppendUint64(w.b, x)
		w.op(0)
	case float64:
		w.op('G')
		w.b = binary.BigEndian.AppendUint64(w.b, math.Float64bits(x))
	case string:
		if i, ok := w.strs[x]; ok {
			w.get(i)
			return
		}
		if len(x) < 256 && w.proto >= 4 && !w.cpp {
			w.op(0x8c, byte(len(x)))
		} else {
			w.u32('X', uint32(len(x)))
		}
		w.b = append(w.b, x...)
		w.strs[x] = w.put()
	case ptRaw:
		w.b = append(w.b, x...)
	case ptTuple:
		for _, it := range x {
			w.value(it)
		}
		switch len(x) {
		case 0:
			w.op(')')
			return
		case 1, 2, 3:
			w.op(0x85 + byte(len(x)-1))
		default:
			panic("long tuple")
		}
		if !w.cpp {
			w.put()
		}
	case *ptDict:
		if i, ok := w.memo[x]; ok && !w.cpp {
			w.get(i)
			return
		}
		w.op('}')
		if !w.cpp {
			w.memo[x] = w.put()
		}
		w.batches(x.kv, 2, 's', 'u')
	case *ptList:
		if i, ok := w.memo[x]; ok && !w.cpp {
			w.get(i)
			return
		}
		w.op(']')
		if !w.cpp {
			w.memo[x] = w.put()
		}
		w.batches(x.items, 1, 'a', 'e')
	default:
		panic(fmt.Sprintf("cannot pickle %T", v))
	}
}

// batches writes items as CPython does (one item: APPEND or SETITEM;
// more: MARK ... APPENDS/SETITEMS per 1000) or as the C++ pickler does
// (always MARK ... APPENDS/SETITEMS).
func (w *ptWriter) batches(items []any, per int, one, many byte) {
	if len(items) == per && !w.cpp {
		for _, it := range items {
			w.value(it)
		}
		w.op(one)
		return
	}
	for i := 0; i < len(items) || (i == 0 && w.cpp); i += 1000 * per {
		w.op('(')
		for _, it := range items[i:min(i+1000*per, len(items))] {
			w.value(it)
		}
		w.op(many)
	}
}

func (w *ptWriter) int(i int64) {
	switch {
	case i >= 0 && i < 256:
		w.op('K', byte(i))
	case i >= 0 && i < 65536:
		w.op('M', byte(i), byte(i>>8))
	case i == int64(int32(i)):
		w.u32('J', uint32(i))
	case w.cpp:
		w.op(0x8a, 8)
		w.b = binary.LittleEndian.AppendUint64(w.b, uint64(i))
	default:
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(i))
		n := 8
		for n > 1 && ((b[n-1] == 0 && b[n-2]&0x80 == 0) || (b[n-1] == 0xff && b[n-2]&0x80 != 0)) {
			n--
		}
		w.op(0x8a, byte(n))
		w.op(b[:n]...)
	}
}

// treeJSON writes a tree as the JSON the newest viewer reads.
func treeJSON(v any) []byte {
	var b []byte
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case nil:
			b = append(b, "null"...)
		case bool:
			b = strconv.AppendBool(b, x)
		case int:
			b = strconv.AppendInt(b, int64(x), 10)
		case int64:
			b = strconv.AppendInt(b, x, 10)
		case uint64:
			b = strconv.AppendUint(b, x, 10)
		case float64:
			b = strconv.AppendFloat(b, x, 'g', -1, 64)
		case string:
			b = strconv.AppendQuote(b, x)
		case ptRaw:
			b = append(b, x...)
		case ptTuple:
			walk(plist(x...))
		case *ptList:
			b = append(b, '[')
			for i, it := range x.items {
				if i > 0 {
					b = append(b, ',')
				}
				walk(it)
			}
			b = append(b, ']')
		case *ptDict:
			b = append(b, '{')
			for i := 0; i < len(x.kv); i += 2 {
				if i > 0 {
					b = append(b, ',')
				}
				walk(x.kv[i])
				b = append(b, ':')
				walk(x.kv[i+1])
			}
			b = append(b, '}')
		}
	}
	walk(v)
	return b
}

// snapShape says what a synthesized snapshot holds.
type snapShape struct {
	version  string // "1.13", "2.0", "2.1", "2.2", "2.5", "2.10"
	segments int
	blocks   int // per segment
	entries  int // per device
	devices  int
	depth    int // frames per stack
	stacks   int // distinct stacks
}

// synthSnapshot returns a snapshot tree shaped like PyTorch's at one
// version: blocks tile their segments, frames and stacks are shared like
// torch's py_symbolize shares them (from 2.1; 2.0 and 1.13 write fresh
// frame lists), trace entries alloc and free the blocks.
func synthSnapshot(r *rand.Rand, sh snapShape) any {
	v := map[string]int{"1.13": 113, "2.0": 200, "2.1": 201, "2.2": 202, "2.5": 205, "2.10": 210}[sh.version]
	names := []string{"forward", "backward", "<module>", "_conv_forward", "linear", "matmul",
		"torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)"}
	var frames []*ptDict
	frame := func() *ptDict {
		if len(frames) > 0 && r.Intn(3) > 0 {
			return frames[r.Intn(len(frames))]
		}
		f := pdict("name", names[r.Intn(len(names))], "filename", fmt.Sprintf("/src/pkg/mod%d.py", r.Intn(40)), "line", r.Intn(3000))
		frames = append(frames, f)
		return f
	}
	var stacks []*ptList
	stack := func() any {
		if sh.depth == 0 {
			return plist()
		}
		if v >= 201 && len(stacks) >= sh.stacks {
			return stacks[r.Intn(len(stacks))]
		}
		s := plist()
		for range 1 + r.Intn(sh.depth) {
			s.items = append(s.items, frame())
		}
		stacks = append(stacks, s)
		return s
	}
	addr := uint64(0x7f0000000000)
	var segs []any
	var allocs []struct {
		addr   uint64
		size   int64
		frames any
	}
	for i := range sh.segments {
		seg := pdict("device", i%sh.devices, "address", addr)
		var blocks []any
		var total, allocated, active, requested int64
		start := addr
		for j := range sh.blocks {
			size := int64(512 << uint(r.Intn(12)))
			state := []string{"active_allocated", "inactive", "active_pending_free"}[r.Intn(3)]
			req := size - int64(r.Intn(512))
			frames := stack()
			var bl *ptDict
			switch {
			case v < 201:
				bl = pdict("size", size, "state", state, "history", plist(pdict("addr", addr, "real_size", req, "frames", frames)))
			default:
				bl = pdict("address", addr, "size", size, "requested_size", req, "state", state, "frames", frames)
			}
			if state != "inactive" {
				active += size
				requested += req
				allocs = append(allocs, struct {
					addr   uint64
					size   int64
					frames any
				}{addr, req, frames})
			}
			if state == "active_allocated" {
				allocated += size
			}
			total += size
			addr += uint64(size)
			blocks = append(blocks, bl)
			_ = j
		}
		seg.kv = append(seg.kv, "total_size", total, "allocated_size", allocated, "active_size", active)
		if v >= 201 {
			seg.kv = append(seg.kv, "requested_size", requested)
		}
		seg.kv = append(seg.kv, "stream", 0, "segment_type", []string{"large", "small"}[r.Intn(2)])
		if v >= 201 {
			seg.kv = append(seg.kv, "segment_pool_id", ptTuple{0, 0}, "is_expandable", r.Intn(5) == 0, "frames", stack())
		}
		seg.kv = append(seg.kv, "blocks", plist(blocks...))
		segs = append(segs, seg)
		addr = start + uint64(total) + 1<<21
	}
	if v == 113 {
		return plist(segs...)
	}
	var traces []any
	for d := range sh.devices {
		tr := plist()
		for k := range sh.entries {
			e := pdict("action", []string{"alloc", "free_requested", "free_completed", "segment_alloc", "snapshot", "oom"}[r.Intn(6)])
			a := struct {
				addr   uint64
				size   int64
				frames any
			}{addr: uint64(k) << 9, size: int64(k), frames: stack()}
			if len(allocs) > 0 {
				a = allocs[r.Intn(len(allocs))]
			}
			e.kv = append(e.kv, "addr", a.addr, "size", a.size, "stream", 0, "frames", a.frames)
			if v >= 202 {
				e.kv = append(e.kv, "time_us", int64(1_700_000_000_000_000+k*37))
			}
			if v >= 210 {
				e.kv = append(e.kv, "compile_context", "N/A", "user_metadata", "")
			}
			if e.kv[1] == "oom" {
				e.kv = append(e.kv, "device_free", int64(1<<30))
			}
			tr.items = append(tr.items, e)
		}
		_ = d
		traces = append(traces, tr)
	}
	top := pdict("segments", plist(segs...), "device_traces", plist(traces...))
	if v >= 205 {
		rd := pdict()
		for i := range 16 {
			rd.kv = append(rd.kv, strconv.Itoa(1<<i), 0)
		}
		top.kv = append(top.kv, "allocator_settings", pdict("PYTORCH_CUDA_ALLOC_CONF", "", "max_split_size", -1,
			"garbage_collection_threshold", 0.0, "expandable_segments", false, "pinned_num_register_threads", 1,
			"release_lock_on_cudamalloc", false, "pinned_use_cuda_host_register", false, "roundup_power2_divisions", rd),
			"external_annotations", plist(pdict("device", 0, "name", "fwd", "stage", "START", "time_us", int64(1_700_000_000_000_000))))
	}
	return top
}

// seedSnapshot is one synthesized FuzzRead seed.
type seedSnapshot struct {
	name string
	data []byte
}

// seedSnapshots synthesizes small snapshots of every version in every
// encoding: CPython's protocols 2-5, PyTorch's C++ pickler, JSON, gzip.
func seedSnapshots() []seedSnapshot {
	var out []seedSnapshot
	r := rand.New(rand.NewSource(5))
	for i, ver := range []string{"1.13", "2.0", "2.1", "2.2", "2.5", "2.10"} {
		sh := snapShape{version: ver, segments: 2, blocks: 2, entries: 3, devices: 1 + i%2, depth: 2, stacks: 3}
		tree := synthSnapshot(r, sh)
		for _, st := range []ptStyle{{proto: 2}, {proto: 4}, {proto: 5}, {proto: 2, cpp: true}} {
			out = append(out, seedSnapshot{fmt.Sprintf("%s-p%d-cpp%v", ver, st.proto, st.cpp), encodeTree(st, tree)})
		}
		if ver != "1.13" { // a bare list: the JSON readers take a dict only
			out = append(out, seedSnapshot{ver + "-json", treeJSON(tree)})
		}
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(encodeTree(ptStyle{proto: 3}, tree))
		zw.Close()
		out = append(out, seedSnapshot{ver + "-p3-gzip", gz.Bytes()})
	}
	return out
}

// TestSeedSnapshotsRead reads every synthesized seed: all are valid
// snapshots and every encoding of one tree gives the same model.
func TestSeedSnapshotsRead(t *testing.T) {
	byVersion := map[string]string{}
	for _, s := range seedSnapshots() {
		snap, err := checkRead(t, s.data)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		ver, _, _ := strings.Cut(s.name, "-")
		m := modelSummary(t, snap)
		if prev, ok := byVersion[ver]; ok && prev != m {
			t.Errorf("%s reads differently from the other encodings of %s", s.name, ver)
		}
		byVersion[ver] = m
	}
}

// TestWriteFuzzSeeds writes the committed seed corpora (small synthesized
// snapshots and pickles, 1 KiB prefixes of a few real snapshots) when
// MEMSTAT_WRITE_FUZZ_SEEDS is set.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("MEMSTAT_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set MEMSTAT_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz/FuzzRead")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzRead")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) {
		if len(data) > 4096 {
			t.Fatalf("seed %s is %d bytes, over 4 KiB", name, len(data))
		}
		text := "go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range seedSnapshots() {
		write("synth-"+s.name, s.data)
	}
	for _, f := range realdata.FilesIfPresent() {
		base := filepath.Base(f)
		if strings.Contains(base, "nishi951") || strings.Contains(base, "Yiyi") || strings.Contains(base, "Nesta") {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			write("real-prefix-"+strings.SplitN(base, "__", 2)[0], data[:1024])
		}
	}
}
