package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/pickle"
)

// moduleRoot finds the folder holding go.mod above the test's folder.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test folder")
		}
		dir = parent
	}
}

// checkTool returns python3 and shared/tools/check_snapshot.py (beside the
// checkout), or skips.
func checkTool(t testing.TB) (py, tool string) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH; skipping the CPython checks")
	}
	tool = filepath.Join(moduleRoot(t), "..", "shared", "tools", "check_snapshot.py")
	if _, err := os.Stat(tool); err != nil {
		t.Skipf("%s not found; skipping the acceptance check", tool)
	}
	return py, tool
}

// runCheckSnapshot runs check_snapshot.py on files and fails the test for
// each file it does not pass.
func runCheckSnapshot(t *testing.T, files []string) {
	t.Helper()
	py, tool := checkTool(t)
	out, err := exec.Command(py, append([]string{tool}, files...)...).CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	ok := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "OK ") {
			ok++
		} else {
			t.Errorf("check_snapshot.py: %s", l)
		}
	}
	if ok != len(files) || err != nil {
		t.Errorf("check_snapshot.py passed %d of %d files (%v)", ok, len(files), err)
	}
}

// cpythonCheckPy loads each file with CPython (globals refused, through
// pkg/pickle/testdata/canon.py, the decoder's oracle), prints its value
// digest, and lists anything outside the opcodes the Encoder may write, a
// protocol other than 4, a LONG1 beyond 8 bytes or a frame over 64 KiB.
const cpythonCheckPy = `
import pickletools, sys
sys.path.insert(0, sys.argv[1])
import canon
allowed = {"PROTO", "FRAME", "STOP", "MARK", "EMPTY_DICT", "SETITEMS", "EMPTY_LIST", "APPENDS", "TUPLE2",
           "NONE", "NEWTRUE", "NEWFALSE", "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT",
           "SHORT_BINUNICODE", "BINUNICODE", "BINGET", "LONG_BINGET", "MEMOIZE"}
for path in sys.argv[2:]:
    data = open(path, "rb").read()
    problems = []
    seen = set()
    for op, arg, pos in pickletools.genops(data):
        seen.add(op.name)
        if op.name == "PROTO" and arg != 4:
            problems.append(f"protocol {arg}")
        if op.name == "LONG1" and not -2**63 <= arg < 2**63:
            problems.append(f"LONG1 over 8 bytes: {arg}")
        if op.name == "FRAME" and arg > 65536:
            problems.append(f"frame of {arg} bytes")
    if seen - allowed:
        problems.append(f"opcodes {sorted(seen - allowed)}")
    with open(path, "rb") as f:
        digest = canon.digest(canon.NoGlobals(f).load(), {})
    print(digest, "; ".join(problems[:4]) or "ok")
`

// checkCPython runs cpythonCheckPy on the written files (data[i] is the
// content of files[i]) and compares each CPython digest with the Go
// decoder's digest of the same bytes. It skips without python3.
func checkCPython(t *testing.T, files []string, data [][]byte) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Log("python3 not on PATH; skipping the CPython checks")
		return
	}
	canonDir := filepath.Join(moduleRoot(t), "pkg", "pickle", "testdata")
	out, err := exec.Command(py, append([]string{"-c", cpythonCheckPy, canonDir}, files...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("CPython cannot load the rewrites: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(files) {
		t.Fatalf("python printed %d lines for %d files:\n%s", len(lines), len(files), out)
	}
	for i, l := range lines {
		digest, verdict, _ := strings.Cut(l, " ")
		name := filepath.Base(files[i])
		if verdict != "ok" {
			t.Errorf("%s: %s", name, verdict)
		}
		v, vs, err := pickle.Loads(data[i])
		if err != nil {
			t.Errorf("%s: Go decoder: %v", name, err)
			continue
		}
		if got := pickle.Digest(vs, v); got != digest {
			t.Errorf("%s: the Go decoder reads %s, CPython %s", name, got, digest)
		}
	}
}

// diffModels lists how b differs from a, comparing everything a written
// and re-read snapshot must keep: segments, blocks, trace entries (stacks
// by their frames, strings by text), settings, annotations, the string
// table, warnings and the schema features.
func diffModels(a, b *Snapshot, strictStrings bool) []string {
	var d []string
	add := func(format string, args ...any) {
		if len(d) < 12 {
			d = append(d, fmt.Sprintf(format, args...))
		}
	}
	frames := func(s *Snapshot, id StackID) []Frame {
		if id == NoStack {
			return nil
		}
		return s.Stacks.Frames(id)
	}
	if len(a.Segments) != len(b.Segments) {
		add("%d segments, re-read %d", len(a.Segments), len(b.Segments))
	}
	for i := range min(len(a.Segments), len(b.Segments)) {
		sa, sb := a.Segments[i], b.Segments[i]
		if !slices.Equal(frames(a, sa.Stack), frames(b, sb.Stack)) {
			add("segment %d: stack differs", i)
		}
		if len(sa.Blocks) != len(sb.Blocks) {
			add("segment %d: %d blocks, re-read %d", i, len(sa.Blocks), len(sb.Blocks))
		} else {
			for j := range sa.Blocks {
				ba, bb := sa.Blocks[j], sb.Blocks[j]
				if !slices.Equal(frames(a, ba.Stack), frames(b, bb.Stack)) {
					add("segment %d block %d: stack differs", i, j)
				}
				ba.Stack, bb.Stack = 0, 0
				if ba != bb {
					add("segment %d block %d: %+v, re-read %+v", i, j, ba, bb)
				}
			}
		}
		sa.Stack, sb.Stack, sa.Blocks, sb.Blocks = 0, 0, nil, nil
		if !reflect.DeepEqual(sa, sb) {
			add("segment %d: %+v, re-read %+v", i, sa, sb)
		}
	}
	for dev := range max(len(a.Traces), len(b.Traces)) {
		ta, tb := a.Trace(dev).Entries(), b.Trace(dev).Entries()
		if len(ta) != len(tb) {
			add("device %d: %d trace entries, re-read %d", dev, len(ta), len(tb))
			continue
		}
		for k := range ta {
			ea, eb := ta[k], tb[k]
			if !slices.Equal(frames(a, ea.Stack), frames(b, eb.Stack)) {
				add("device %d entry %d: stack differs", dev, k)
			}
			ca, cb := a.Context(&ea), b.Context(&eb)
			if a.String(ca.CompileContext) != b.String(cb.CompileContext) || a.String(ca.UserMetadata) != b.String(cb.UserMetadata) {
				add("device %d entry %d: strings differ", dev, k)
			}
			if ca.Stream != cb.Stream {
				add("device %d entry %d: stream %d, re-read %d", dev, k, ca.Stream, cb.Stream)
			}
			ea.Stack, eb.Stack = 0, 0
			ea.Context, eb.Context = 0, 0
			if ea != eb {
				add("device %d entry %d: %+v, re-read %+v", dev, k, ea, eb)
			}
		}
	}
	if (a.Settings == nil) != (b.Settings == nil) {
		add("settings present %v, re-read %v", a.Settings != nil, b.Settings != nil)
	} else if a.Settings != nil {
		sa, sb := *a.Settings, *b.Settings
		// Write completes the 2.10 key set with PyTorch's defaults.
		defaults := map[string]string{"pinned_num_register_threads": "1", "pinned_use_cuda_host_register": "False",
			"graph_capture_record_stream_reuse": "False"}
		oa, ob := map[string]string{}, map[string]string{}
		for _, kv := range sa.Other {
			oa[kv.Key] = kv.Value
		}
		for _, kv := range sb.Other {
			ob[kv.Key] = kv.Value
		}
		for k, v := range defaults {
			if _, ok := oa[k]; !ok && ob[k] == v {
				delete(ob, k)
			}
		}
		if !reflect.DeepEqual(oa, ob) {
			add("settings: other keys %v, re-read %v", oa, ob)
		}
		sa.Other, sb.Other = nil, nil
		if !reflect.DeepEqual(sa, sb) {
			add("settings: %+v, re-read %+v", sa, sb)
		}
	}
	if len(a.Annotations)+len(b.Annotations) > 0 && !reflect.DeepEqual(a.Annotations, b.Annotations) {
		add("annotations differ: %d, re-read %d", len(a.Annotations), len(b.Annotations))
	}
	// A model read from a file has the string table Read builds, which the
	// rewrite must reproduce exactly; a model made by hand may number its
	// strings otherwise (Read interns a file's "" under an id of its own).
	if strictStrings {
		if !slices.Equal(a.Strings, b.Strings) {
			add("string table %q, re-read %q", a.Strings, b.Strings)
		}
	} else if sa, sb := sortedSet(append([]string{""}, a.Strings...)), sortedSet(append([]string{""}, b.Strings...)); !slices.Equal(sa, sb) {
		add("string table %q, re-read %q", a.Strings, b.Strings)
	}
	if !slices.Equal(a.Warnings, b.Warnings) {
		add("warnings %q, re-read %q", a.Warnings, b.Warnings)
	}
	fa, fb := a.Features, b.Features
	if fa.TimeUS != fb.TimeUS || fa.CompileContext != fb.CompileContext || fa.UserMetadata != fb.UserMetadata ||
		fa.Annotations != fb.Annotations || fa.AllocatorSetting != fb.AllocatorSetting {
		add("features %+v, re-read %+v", fa, fb)
	}
	// A 2.0 file (block history) is written back in 2.0's form.
	if fb.PickleProtocol != 4 || fb.BlockHistory != fa.BlockHistory || fb.BareSegmentList {
		add("re-read features %+v: want a protocol-4 2.x dict of the same form", fb)
	}
	return d
}

func sortedSet(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// writeBytes writes s and checks that a second Write gives the same bytes.
func writeBytes(t *testing.T, s *Snapshot) []byte {
	t.Helper()
	var a, b bytes.Buffer
	if err := Write(&a, s); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if err := Write(&b, s); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two Writes of one snapshot differ")
	}
	return a.Bytes()
}

func roundTrip(t *testing.T, s *Snapshot, data []byte, strict bool) *Snapshot {
	t.Helper()
	back, err := Read(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("reading back: %v", err)
	}
	if d := diffModels(s, back, strict); len(d) > 0 {
		t.Errorf("the re-read model differs:\n  %s", strings.Join(d, "\n  "))
	}
	return back
}

// TestWriteRoundTripRealSnapshots rewrites every real snapshot and checks
// that reading the rewrite gives the same model, that it is deterministic
// and no larger than the original, and that CPython and PyTorch's
// acceptance check read it.
func TestWriteRoundTripRealSnapshots(t *testing.T) {
	files := realdata.Files(t)
	dir := t.TempDir()
	var written []string
	var datas [][]byte
	var inTotal, outTotal int64
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			s, err := Load(f)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			data := writeBytes(t, s)
			roundTrip(t, s, data, true)
			st, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			ratio := float64(len(data)) / float64(st.Size())
			t.Logf("%d -> %d bytes (%.3f)", st.Size(), len(data), ratio)
			inTotal += st.Size()
			outTotal += int64(len(data))
			if ratio > 1.02 {
				t.Errorf("the rewrite is %.1f%% larger than the original", 100*(ratio-1))
			}
			out := filepath.Join(dir, name+".pickle")
			if err := os.WriteFile(out, data, 0o644); err != nil {
				t.Fatal(err)
			}
			written = append(written, out)
			datas = append(datas, data)
		})
	}
	t.Logf("all real snapshots: %d -> %d bytes (%.3f)", inTotal, outTotal, float64(outTotal)/float64(inTotal))
	if len(written) > 0 {
		checkCPython(t, written, datas)
		runCheckSnapshot(t, written)
	}
}

// sameAsOriginalPy compares, in CPython, each original snapshot with its
// rewrite: the values must be equal, type for type, after the changes Write
// makes on purpose (documented on Write): allocator_settings gains the 2.10
// keys with PyTorch's defaults, a trace entry's empty "frames" list is left
// out, an unsigned -1 line number (2^64-1) is written as -1, a
// SIZE_MAX max_split_size as -1, JSON lists read as tuples where PyTorch
// writes tuples, and annotations keep name, stage, device and time_us.
// Files in the 1.13 or 2.0 schema, which Write modernizes, are skipped.
const sameAsOriginalPy = `
import json, pickle, sys

class NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused global {module}.{name}")

def load(path):
    data = open(path, "rb").read()
    if data.lstrip()[:1] == b"{":
        return json.loads(data)
    import io
    return NoGlobals(io.BytesIO(data)).load()

DEFAULTS = {"pinned_num_register_threads": 1, "pinned_use_cuda_host_register": False,
            "graph_capture_record_stream_reuse": False}

def normalize(orig, new):
    st, nst = orig.get("allocator_settings"), new.get("allocator_settings")
    if st is not None and nst is not None:
        for k, v in DEFAULTS.items():
            if k not in st and nst.get(k, object()) == v and type(nst[k]) is type(v):
                del nst[k]
        if isinstance(st.get("max_split_size"), int) and st["max_split_size"] >= 2**62:
            st["max_split_size"] = -1
    for trace in orig.get("device_traces", []):
        for e in trace:
            if e.get("frames") == []:
                del e["frames"]
    seen = set()
    def fix_frames(frames):
        if id(frames) in seen:
            return
        seen.add(id(frames))
        for f in frames:
            if isinstance(f.get("line"), int) and f["line"] >= 2**63:
                f["line"] -= 2**64
    for s in orig["segments"]:
        fix_frames(s.get("frames", []))
        for b in s["blocks"]:
            fix_frames(b.get("frames", []))
    for trace in orig.get("device_traces", []):
        for e in trace:
            fix_frames(e.get("frames", []))
    if "external_annotations" in orig:
        anns = [{k: a[k] for k in ("name", "stage", "device", "time_us") if k in a}
                for a in orig["external_annotations"]]
        orig["external_annotations"] = sorted(anns, key=lambda a: a.get("time_us", 0))

def same(a, b, path, out, done):
    if len(out) > 5:
        return
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if (id(a), id(b)) in done:
            return
        done.add((id(a), id(b)))
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} items, rewrite {len(b)}")
            return
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]", out, done)
    elif isinstance(a, dict) and isinstance(b, dict):
        if (id(a), id(b)) in done:
            return
        done.add((id(a), id(b)))
        for k in a:
            if k not in b:
                out.append(f"{path}.{k} missing in the rewrite")
            else:
                same(a[k], b[k], f"{path}.{k}", out, done)
        for k in b:
            if k not in a:
                out.append(f"{path}.{k} added by the rewrite")
    elif type(a) is not type(b) or a != b:
        out.append(f"{path}: {a!r:.80} ({type(a).__name__}), rewrite {b!r:.80} ({type(b).__name__})")

for orig_path, new_path in zip(sys.argv[1::2], sys.argv[2::2]):
    orig, new = load(orig_path), load(new_path)
    if isinstance(orig, list) or any("history" in b for s in orig["segments"] for b in s["blocks"]):
        print("SKIP legacy schema")
        continue
    normalize(orig, new)
    out = []
    same(orig, new, "", out, set())
    print("SAME" if not out else "DIFF " + "; ".join(out))
`

// TestWriteSameAsOriginalInCPython checks each real snapshot's rewrite
// against the original in CPython (see sameAsOriginalPy), independently of
// memstat's reader and model.
func TestWriteSameAsOriginalInCPython(t *testing.T) {
	files := realdata.Files(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH")
	}
	dir := t.TempDir()
	var args []string
	for _, f := range files {
		s, err := Load(f)
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		out := filepath.Join(dir, filepath.Base(f)+".pickle")
		if err := WriteFile(out, s); err != nil {
			t.Fatal(err)
		}
		args = append(args, f, out)
	}
	out, err := exec.Command(py, append([]string{"-c", sameAsOriginalPy}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(files) {
		t.Fatalf("python printed %d lines for %d files:\n%s", len(lines), len(files), out)
	}
	compared := 0
	for i, l := range lines {
		name := filepath.Base(files[i])
		switch {
		case l == "SAME":
			compared++
		case strings.HasPrefix(l, "SKIP"):
			t.Logf("%s: %s", name, l)
		default:
			t.Errorf("%s: %s", name, l)
		}
	}
	if compared < len(files)/2 {
		t.Errorf("only %d of %d files compared", compared, len(files))
	}
	t.Logf("%d of %d rewrites hold the same values as their originals", compared, len(files))
}

// builder helpers for hand-made snapshots.

func seg(dev int, addr uint64, pool Pool, blocks ...Block) Segment {
	s := Segment{Device: dev, Address: addr, Pool: pool}
	a := addr
	for _, b := range blocks {
		b.Address = a
		a += uint64(b.Size)
		s.TotalSize += b.Size
		if b.State == ActiveAllocated {
			s.AllocatedSize += b.Size
		}
		if b.State.Active() {
			s.ActiveSize += b.Size
			s.RequestedSize += b.RequestedSize
		}
		s.Blocks = append(s.Blocks, b)
	}
	return s
}

// handBuilt returns snapshots covering what real files rarely have:
// expandable segments, pending frees, oom entries, empty traces, several
// devices, private pools, odd strings and settings.
func handBuilt() map[string]*Snapshot {
	out := map[string]*Snapshot{}

	st := NewStacks()
	fwd := st.InternFrames([]Frame{{"forward", "/x/model.py", 10}, {"<module>", "train.py", 3}})
	bwd := st.InternFrames([]Frame{{"backward", "/x/model.py", 20}, {"<module>", "train.py", 3}})
	cpp := st.InternFrames([]Frame{{"c10::cuda::CUDACachingAllocator::malloc(int, unsigned long)", "??", 0},
		{"torch::autograd::Engine::thread_main", "/pytorch/engine.cpp", -1}, {"日本語 ñ", "/x/ü.py", 1 << 40}})
	long := st.InternFrames([]Frame{{strings.Repeat("very_long_name_", 30), "/x/model.py", 11}, {"forward", "/x/model.py", 10}})
	const base = 0x7f0000000000
	const MiB = 1 << 20
	ct := &Contexts{}
	full := &Snapshot{
		Stacks:   st,
		Contexts: ct,
		Strings:  []string{"", "N/A", "Torch-Compiled Region: 0/1", "step 3 ✓"},
		Segments: []Segment{
			seg(0, base, LargePool,
				Block{Size: 8 * MiB, RequestedSize: 8*MiB - 100, State: ActiveAllocated, Stack: fwd},
				Block{Size: 4 * MiB, RequestedSize: 4 * MiB, State: ActivePendingFree, Stack: bwd},
				Block{Size: 8 * MiB, RequestedSize: 3 * MiB, State: Inactive}),
			seg(0, base+64*MiB, SmallPool,
				Block{Size: 512, RequestedSize: 4, State: ActiveAllocated, Stack: cpp},
				Block{Size: 2*MiB - 512, RequestedSize: 0, State: Inactive}),
			seg(2, 0x7e0000000000, LargePool,
				Block{Size: 20 * MiB, RequestedSize: 20 * MiB, State: ActiveAllocated, Stack: long}),
		},
		Traces: tracesOf([][]TraceEntry{
			{
				{Action: ActionSegmentAlloc, Addr: base, Size: 20 * MiB, TimeUS: 1735689600000000, Stack: fwd, Context: ct.Intern(EntryContext{CompileContext: 1})},
				{Action: ActionAlloc, Addr: base, Size: 8*MiB - 100, TimeUS: 1735689600000001, Stack: fwd, Context: ct.Intern(EntryContext{CompileContext: 2, UserMetadata: 3})},
				{Action: ActionAlloc, Addr: base + 8*MiB, Size: 4 * MiB, TimeUS: 1735689600000002, Stack: bwd, Context: ct.Intern(EntryContext{Stream: 0x55d0c0ffee00, CompileContext: 1})},
				{Action: ActionFreeRequested, Addr: base + 8*MiB, Size: 4 * MiB, TimeUS: 1735689600000003, Stack: bwd, Context: ct.Intern(EntryContext{Stream: 0x55d0c0ffee00, CompileContext: 1})},
				{Action: ActionSegmentFree, Addr: base + 128*MiB, Size: 2 * MiB, TimeUS: 1735689600000004, Context: ct.Intern(EntryContext{CompileContext: 1})},
				{Action: ActionOOM, Addr: 1293942784, Size: 85899345920, TimeUS: 1735689600000005, Stack: fwd, Context: ct.Intern(EntryContext{CompileContext: 1})},
				{Action: ActionSnapshot, Size: 12 * MiB, TimeUS: 1735689600000006, Context: ct.Intern(EntryContext{CompileContext: 1})},
				{Action: ActionSegmentAlloc, Addr: base + 64*MiB, Size: 2 * MiB, TimeUS: 1735689600000007, Stack: cpp, Context: ct.Intern(EntryContext{CompileContext: 1})},
				{Action: ActionAlloc, Addr: base + 64*MiB, Size: 4, TimeUS: 1735689600000008, Stack: cpp, Context: ct.Intern(EntryContext{CompileContext: 1})},
			},
			{}, // device 1: no history
		}),
		Settings: &AllocatorSettings{
			AllocConf: "expandable_segments:True,max_split_size_mb:512", MaxSplitSize: 512 * MiB,
			GarbageCollectionThreshold: 0.6, ExpandableSegments: true, ReleaseLockOnCudaMalloc: true,
			RoundupPower2Divisions: [16]int64{1, 2, 4, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16},
			Other: []KeyValue{{"pinned_num_register_threads", "8"}, {"pinned_use_cuda_host_register", "True"},
				{"graph_capture_record_stream_reuse", "True"}, {"max_round_threshold", "4"},
				{"max_cached_size", "18446744073709551615"}, {"weird", "1.5"}, {"label", "x"}, {"nothing", "None"}},
		},
		Annotations: []Annotation{{Device: 0, TimeUS: 1735689600000001, Name: "fwd", Stage: "START"},
			{Device: 0, TimeUS: 1735689600000004, Name: "fwd", Stage: "END"}},
		Features: Features{TimeUS: true, CompileContext: true, UserMetadata: true, Annotations: true, AllocatorSetting: true},
	}
	out["full"] = full

	// Expandable segments: one mapped range per segment, grown and shrunk
	// with segment_map/segment_unmap.
	est := NewStacks()
	grow := est.InternFrames([]Frame{{"grow", "/x/a.py", 5}})
	ct = &Contexts{}
	exp := &Snapshot{
		Stacks: est, Strings: []string{"", "N/A"}, Contexts: ct,
		Segments: []Segment{
			seg(0, 0x7f1000000000, LargePool,
				Block{Size: 20 * MiB, RequestedSize: 20 * MiB, State: ActiveAllocated, Stack: grow},
				Block{Size: 12 * MiB, RequestedSize: 12 * MiB, State: Inactive}),
		},
		Traces: tracesOf([][]TraceEntry{{
			{Action: ActionSegmentMap, Addr: 0x7f1000000000, Size: 32 * MiB, TimeUS: 1, Stack: grow, Context: ct.Intern(EntryContext{CompileContext: 1})},
			{Action: ActionAlloc, Addr: 0x7f1000000000, Size: 20 * MiB, TimeUS: 2, Stack: grow, Context: ct.Intern(EntryContext{CompileContext: 1})},
			{Action: ActionSegmentUnmap, Addr: 0x7f1002000000, Size: 2 * MiB, TimeUS: 3, Context: ct.Intern(EntryContext{CompileContext: 1})},
		}}),
		Settings: &AllocatorSettings{AllocConf: "expandable_segments:True", MaxSplitSize: -1, ExpandableSegments: true},
		Features: Features{TimeUS: true, CompileContext: true, AllocatorSetting: true},
	}
	exp.Segments[0].Expandable = true
	exp.Segments[0].PoolID = PoolID{1, 7}
	out["expandable"] = exp

	// A 2.1-era snapshot: no settings, no times, no annotations, empty
	// traces on four devices, segments on two.
	old := &Snapshot{
		Stacks: NewStacks(), Strings: []string{""},
		Segments: []Segment{
			seg(1, 0x7f2000000000, LargePool, Block{Size: 2 * MiB, RequestedSize: 2 * MiB, State: ActiveAllocated}),
			seg(3, 0x7f3000000000, SmallPool, Block{Size: 2 * MiB, RequestedSize: 1, State: Inactive}),
		},
		Traces: tracesOf([][]TraceEntry{{}, {}, {}, {}}),
	}
	out["old_no_history"] = old

	// Nothing at all, and no stack table.
	out["empty"] = &Snapshot{}
	return out
}

// TestWriteHandBuilt checks hand-made snapshots: they read back the same,
// pass the acceptance check, load in CPython, and have PyTorch's key order.
func TestWriteHandBuilt(t *testing.T) {
	dir := t.TempDir()
	var files []string
	var datas [][]byte
	for name, s := range handBuilt() {
		t.Run(name, func(t *testing.T) {
			data := writeBytes(t, s)
			back := roundTrip(t, s, data, false)
			if name == "empty" {
				if len(back.Segments) != 0 || len(back.Traces) != 0 {
					t.Errorf("empty snapshot reads back as %+v", back)
				}
			}
			f := filepath.Join(dir, name+".pickle")
			if err := os.WriteFile(f, data, 0o644); err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
			datas = append(datas, data)
		})
	}
	checkCPython(t, files, datas)
	runCheckSnapshot(t, files)
}

// keysOf returns the keys of a decoded dict, in order.
func keysOf(vs *pickle.Values, d pickle.Value) []string {
	var keys []string
	items := vs.Items(d)
	for i := 0; i < len(items); i += 2 {
		keys = append(keys, vs.Text(items[i]))
	}
	return keys
}

func TestWriteKeyOrderAndSharing(t *testing.T) {
	s := handBuilt()["full"]
	data := writeBytes(t, s)
	top, vs, err := pickle.Loads(data)
	if err != nil {
		t.Fatal(err)
	}
	want := func(what string, got []string, want ...string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s keys %q, want %q", what, got, want)
		}
	}
	want("top-level", keysOf(vs, top), "segments", "device_traces", "allocator_settings", "external_annotations")
	segs, _ := vs.Get(top, "segments")
	seg0 := vs.Items(segs)[0]
	want("segment", keysOf(vs, seg0), "device", "address", "total_size", "allocated_size", "active_size",
		"requested_size", "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks")
	if pid, _ := vs.Get(seg0, "segment_pool_id"); pid.Kind != pickle.KindTuple || vs.Len(pid) != 2 {
		t.Errorf("segment_pool_id is a %s of %d", pid.Kind, vs.Len(pid))
	}
	blocks, _ := vs.Get(seg0, "blocks")
	blk := vs.Items(blocks)[0]
	want("block", keysOf(vs, blk), "address", "size", "requested_size", "state", "frames")
	frames, _ := vs.Get(blk, "frames")
	want("frame", keysOf(vs, vs.Items(frames)[0]), "name", "filename", "line")
	traces, _ := vs.Get(top, "device_traces")
	if n := vs.Len(traces); n != 3 {
		t.Errorf("device_traces has %d lists, want 3 (devices 0-2)", n)
	}
	entries := vs.Items(vs.Items(traces)[0])
	want("trace entry", keysOf(vs, entries[1]), "action", "addr", "size", "stream", "time_us", "compile_context", "user_metadata", "frames")
	want("oom entry", keysOf(vs, entries[5]), "action", "device_free", "size", "stream", "time_us", "compile_context", "user_metadata", "frames")
	want("entry without a stack", keysOf(vs, entries[4]), "action", "addr", "size", "stream", "time_us", "compile_context", "user_metadata")
	st, _ := vs.Get(top, "allocator_settings")
	want("allocator_settings", keysOf(vs, st), append(settingsKeys[:],
		"max_round_threshold", "max_cached_size", "weird", "label", "nothing")...)
	rd, _ := vs.Get(st, "roundup_power2_divisions")
	want("roundup_power2_divisions", keysOf(vs, rd), "1", "2", "4", "8", "16", "32", "64", "128", "256", "512",
		"1024", "2048", "4096", "8192", "16384", "32768")
	mc, _ := vs.Get(st, "max_cached_size")
	if mc.Kind != pickle.KindString {
		t.Errorf("an uninterpreted setting beyond int64 is a %s, want its text", mc.Kind)
	}
	ann, _ := vs.Get(top, "external_annotations")
	want("annotation", keysOf(vs, vs.Items(ann)[0]), "name", "stage", "device", "time_us")

	// A 2.1-era model gets neither settings nor annotations nor times.
	old := writeBytes(t, handBuilt()["old_no_history"])
	top, vs, err = pickle.Loads(old)
	if err != nil {
		t.Fatal(err)
	}
	want("2.1 top-level", keysOf(vs, top), "segments", "device_traces")
}

// TestWriteSharesStacks checks the memoization: a snapshot whose entries
// reuse a few stacks costs about one dict per distinct frame, and every
// use after the first is a memo reference.
func TestWriteSharesStacks(t *testing.T) {
	s := synthetic(200, 20000, 300, 25)
	data := writeBytes(t, s)
	if _, err := Read(bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	dicts := bytes.Count(data, []byte{'}'}) // upper bound on EMPTY_DICT opcodes
	entries := 0
	for _, tr := range s.Traces {
		entries += tr.Len()
	}
	blocks := 0
	for _, sg := range s.Segments {
		blocks += len(sg.Blocks)
	}
	// Each frame dict costs ~3 names + a line; unshared, 20000 entries x 25
	// frames would be 500000 dicts.
	if limit := 3*(entries+blocks+len(s.Segments)+s.Stacks.NumFrames()) + 1000; dicts > limit {
		t.Errorf("%d '}' bytes for %d entries, %d blocks, %d frames: frames are not shared", dicts, entries, blocks, s.Stacks.NumFrames())
	}
	perEntry := float64(len(data)) / float64(entries+blocks)
	t.Logf("%d bytes, %.1f bytes per entry or block, %d distinct frames, %d stacks", len(data), perEntry, s.Stacks.NumFrames(), s.Stacks.NumStacks())
	if perEntry > 120 {
		t.Errorf("%.1f bytes per entry: stacks are not shared", perEntry)
	}
}

// synthetic makes a snapshot shaped like a long recorded training run:
// segs segments of 8 blocks, n trace entries, stacks distinct stacks of
// depth frames drawn from a smaller set of frames.
func synthetic(segs, n, stacks, depth int) *Snapshot {
	st := NewStacks()
	var ids []StackID
	for i := range stacks {
		var fr []Frame
		for d := range depth {
			k := (i*7 + d*13) % (stacks * 2)
			fr = append(fr, Frame{Name: fmt.Sprintf("fn_%d", k), Filename: fmt.Sprintf("/src/pkg%d/module%d.py", k%9, k%31), Line: int64(k*3 + d)})
		}
		ids = append(ids, st.InternFrames(fr))
	}
	ct := &Contexts{}
	s := &Snapshot{Stacks: st, Strings: []string{"", "N/A"}, Contexts: ct,
		Settings: &AllocatorSettings{MaxSplitSize: -1},
		Features: Features{TimeUS: true, CompileContext: true, UserMetadata: true, Annotations: true, AllocatorSetting: true}}
	const MiB = 1 << 20
	for i := range segs {
		var blocks []Block
		for j := range 8 {
			state := []BlockState{ActiveAllocated, Inactive, ActivePendingFree, ActiveAllocated}[j%4]
			stack := ids[(i*8+j)%len(ids)]
			if state == Inactive {
				stack = NoStack
			}
			blocks = append(blocks, Block{Size: 2 * MiB, RequestedSize: 2*MiB - int64(j*512), State: state, Stack: stack})
		}
		s.Segments = append(s.Segments, seg(0, 0x7f0000000000+uint64(i)*64*MiB, LargePool, blocks...))
	}
	var tr []TraceEntry
	actions := []Action{ActionAlloc, ActionFreeRequested, ActionFreeCompleted}
	for i := range n {
		tr = append(tr, TraceEntry{Action: actions[i%3], Addr: 0x7f0000000000 + uint64(i/3%5000)*512,
			Size: int64(i%977) * 512, TimeUS: 1735689600000000 + int64(i), Stack: ids[(i/3*31)%len(ids)], Context: ct.Intern(EntryContext{Stream: 0, CompileContext: 1})})
	}
	s.Traces = tracesOf([][]TraceEntry{tr})
	return s
}

func TestWriteRejectsBadIDs(t *testing.T) {
	s := handBuilt()["full"]
	bad := *s
	bad.Segments = slices.Clone(s.Segments)
	bad.Segments[0].Stack = 999
	if err := Write(io.Discard, &bad); err == nil || !strings.Contains(err.Error(), "stack id 999") {
		t.Errorf("a stack id past the table: %v", err)
	}
	bad = *s
	bad.Stacks = nil
	if err := Write(io.Discard, &bad); err == nil {
		t.Error("stacks without a stack table written without error")
	}
	bad = *s
	bad.Contexts = &Contexts{}
	bad.Traces = tracesOf([][]TraceEntry{{{Action: ActionAlloc, Context: bad.Contexts.Intern(EntryContext{CompileContext: 77})}}})
	if err := Write(io.Discard, &bad); err == nil || !strings.Contains(err.Error(), "string id 77") {
		t.Errorf("a string id past the table: %v", err)
	}
	bad.Traces = tracesOf([][]TraceEntry{{{Action: ActionAlloc, Context: 5}}})
	if err := Write(io.Discard, &bad); err == nil || !strings.Contains(err.Error(), "context id 5") {
		t.Errorf("a context id past the table: %v", err)
	}
}

// failWriter accepts limit bytes, then fails.
type failWriter struct{ limit, n int }

var errNoSpace = errors.New("no space left on device")

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n+len(p) <= w.limit {
		w.n += len(p)
		return len(p), nil
	}
	k := w.limit - w.n
	w.n = w.limit
	return k, errNoSpace
}

func TestWriteFailingWriter(t *testing.T) {
	s := synthetic(50, 5000, 50, 10)
	full := writeBytes(t, s)
	for _, limit := range []int{0, 10, 70000, len(full) - 1} {
		if err := Write(&failWriter{limit: limit}, s); !errors.Is(err, errNoSpace) {
			t.Errorf("writer failing after %d of %d bytes: %v", limit, len(full), err)
		}
	}
}

// dirNames lists a folder.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteFileAtomic(t *testing.T) {
	good := synthetic(50, 5000, 50, 10)
	want := writeBytes(t, good)
	// bad fails late: its last trace entry names a stack that does not
	// exist, after more than a frame of data reached the temporary file.
	bad := *good
	bad.Traces = []*Trace{TraceOf(append(good.Traces[0].Entries(), TraceEntry{Action: ActionAlloc, Stack: 12345})...)}

	t.Run("new file", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "snap.pickle")
		if err := WriteFile(path, good); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("file content differs from Write's (%v)", err)
		}
		if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
			t.Errorf("mode %v, want 0644", st.Mode().Perm())
		}
		if names := dirNames(t, dir); !slices.Equal(names, []string{"snap.pickle"}) {
			t.Errorf("folder holds %q", names)
		}
	})
	t.Run("replace keeps mode", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "snap.pickle")
		if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := WriteFile(path, good); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(path)
		if !bytes.Equal(got, want) {
			t.Error("not replaced")
		}
		if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
			t.Errorf("mode %v, want 0600 kept", st.Mode().Perm())
		}
	})
	t.Run("failure leaves the old file", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "snap.pickle")
		if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		err := WriteFile(path, &bad)
		if err == nil || !strings.Contains(err.Error(), "stack id 12345") {
			t.Fatalf("WriteFile of a bad model: %v", err)
		}
		got, _ := os.ReadFile(path)
		if string(got) != "old" {
			t.Error("the old file was changed")
		}
		if names := dirNames(t, dir); !slices.Equal(names, []string{"snap.pickle"}) {
			t.Errorf("folder holds %q after a failed write", names)
		}
	})
	t.Run("failure creates nothing", func(t *testing.T) {
		dir := t.TempDir()
		if err := WriteFile(filepath.Join(dir, "snap.pickle"), &bad); err == nil {
			t.Fatal("no error")
		}
		if names := dirNames(t, dir); len(names) != 0 {
			t.Errorf("folder holds %q after a failed write", names)
		}
	})
	t.Run("missing folder", func(t *testing.T) {
		dir := t.TempDir()
		if err := WriteFile(filepath.Join(dir, "no", "snap.pickle"), good); err == nil {
			t.Fatal("no error")
		}
		if names := dirNames(t, dir); len(names) != 0 {
			t.Errorf("folder holds %q", names)
		}
	})
	t.Run("target is a folder", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "snap.pickle"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := WriteFile(filepath.Join(dir, "snap.pickle"), good); err == nil {
			t.Fatal("no error")
		}
		if names := dirNames(t, dir); !slices.Equal(names, []string{"snap.pickle"}) {
			t.Errorf("folder holds %q", names)
		}
	})
}

// BenchmarkWrite measures Write's throughput in output bytes per second,
// on a synthetic recorded run and on the largest real snapshot.
func BenchmarkWrite(b *testing.B) {
	run := func(b *testing.B, s *Snapshot) {
		var buf bytes.Buffer
		if err := Write(&buf, s); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(buf.Len()))
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			buf.Reset()
			if err := Write(&buf, s); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("synthetic", func(b *testing.B) { run(b, synthetic(2000, 300000, 3000, 30)) })
	b.Run("real", func(b *testing.B) {
		files := realdata.Files(b)
		var biggest string
		var size int64
		for _, f := range files {
			if st, err := os.Stat(f); err == nil && st.Size() > size {
				biggest, size = f, st.Size()
			}
		}
		s, err := Load(biggest)
		if err != nil {
			b.Fatal(err)
		}
		run(b, s)
	})
}

// BenchmarkRead measures Read's throughput in input bytes per second (the
// whole path: decoding, compaction into the model, assembly) on a
// synthetic recorded run, on the largest real snapshot, and on the file
// named by MEMSTAT_BENCH_FILE when set (bench/run.sh passes its generated
// snapshots).
func BenchmarkRead(b *testing.B) {
	run := func(b *testing.B, data []byte) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Read(bytes.NewReader(data), int64(len(data))); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("synthetic", func(b *testing.B) {
		var buf bytes.Buffer
		if err := Write(&buf, synthetic(2000, 300000, 3000, 30)); err != nil {
			b.Fatal(err)
		}
		run(b, buf.Bytes())
	})
	b.Run("real", func(b *testing.B) {
		var biggest string
		var size int64
		for _, f := range realdata.Files(b) {
			if st, err := os.Stat(f); err == nil && st.Size() > size {
				biggest, size = f, st.Size()
			}
		}
		data, err := os.ReadFile(biggest)
		if err != nil {
			b.Fatal(err)
		}
		run(b, data)
	})
	if f := os.Getenv("MEMSTAT_BENCH_FILE"); f != "" {
		b.Run(filepath.Base(f), func(b *testing.B) {
			data, err := os.ReadFile(f)
			if err != nil {
				b.Fatal(err)
			}
			run(b, data)
		})
	}
}

// tracesOf makes the compact traces of a literal's entries.
func tracesOf(ts [][]TraceEntry) []*Trace {
	out := make([]*Trace, len(ts))
	for i, t := range ts {
		out[i] = TraceOf(t...)
	}
	return out
}
