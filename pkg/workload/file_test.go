package workload

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/golden"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

func runSource(t *testing.T, name, src string) (*Env, string) {
	t.Helper()
	f, err := ParseFile(name, src)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	e, err := NewEnv(Options{Config: allocator.DefaultConfig(allocator.Latest), DeviceMemory: 80 << 30, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	f.Run(e)
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	return e, out.String()
}

// The example files in testdata/workloads print what PyTorch would print
// (memory_summary's table, memory_stats' OrderedDict, plain integers).
func TestExampleFiles(t *testing.T) {
	paths, _ := filepath.Glob("../../testdata/workloads/*.mem")
	if len(paths) == 0 {
		t.Fatal("no example workload files")
	}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".mem")
		t.Run(name, func(t *testing.T) {
			f, err := ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			e, _ := NewEnv(Options{Config: allocator.DefaultConfig(allocator.Latest), DeviceMemory: 80 << 30, Out: &out})
			f.Run(e)
			if err := e.Err(); err != nil {
				t.Fatal(err)
			}
			if err := e.Allocator().CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, "file_"+name, out.Bytes())
		})
	}
}

// memory_summary() and memory_stats() at a known state: one 6 MiB tensor
// freed next to a live one, so every figure is distinct.
func TestPrintedStats(t *testing.T) {
	_, out := runSource(t, "stats.mem", `
alloc a 6MiB
alloc b [1024, 1024] float32
alloc c 1000
free a
print(memory_allocated())
print(memory_reserved())
print(max_memory_allocated())
print(torch.cuda.max_memory_reserved())
print(memory_summary())
print(memory_summary(abbreviated=True))
print(memory_stats())
print("done")
`)
	golden.Check(t, "printed_stats", []byte(out))
}

// Loops bind their variable, names interpolate it, phases become
// record_function annotations and Python frames; rebinding a live name
// frees the old tensor after allocating the new one.
func TestLoopsAndPhases(t *testing.T) {
	e, _ := runSource(t, "loop.mem", `let n = 2
phase outer
  repeat n as i
    phase inner
      alloc a{i + 1} i * 1MiB  # 0 bytes, then 1 MiB
      alloc x 2MiB
    end
  end
end
`)
	s := e.Snapshot()
	var ann []string
	for _, a := range s.Annotations {
		ann = append(ann, a.Name+" "+a.Stage)
	}
	if got, want := strings.Join(ann, ", "), "outer START, inner START, inner END, inner START, inner END, outer END"; got != want {
		t.Errorf("annotations: %s\nwant %s", got, want)
	}
	var allocs []string
	for _, te := range s.Trace(0).All() {
		if te.Action != snapshot.ActionAlloc && te.Action != snapshot.ActionFreeRequested {
			continue
		}
		var fr []string
		for _, f := range s.Stacks.Frames(te.Stack) {
			fr = append(fr, fmt.Sprintf("%s:%d:%s", f.Filename, f.Line, f.Name))
		}
		allocs = append(allocs, fmt.Sprintf("%s %d [%s]", te.Action, te.Size, strings.Join(fr, " ")))
	}
	want := []string{
		"alloc 2097152 [loop.mem:6:inner loop.mem:4:outer loop.mem:2:<module>]",          // x (a1 has 0 bytes: no allocation)
		"alloc 1048576 [loop.mem:5:inner loop.mem:4:outer loop.mem:2:<module>]",          // a2
		"alloc 2097152 [loop.mem:6:inner loop.mem:4:outer loop.mem:2:<module>]",          // the new x
		"free_requested 2097152 [loop.mem:6:inner loop.mem:4:outer loop.mem:2:<module>]", // the old x
	}
	if strings.Join(allocs, "\n") != strings.Join(want, "\n") {
		t.Errorf("trace:\n%s\nwant\n%s", strings.Join(allocs, "\n"), strings.Join(want, "\n"))
	}
	if n := e.Allocator().Stats().Allocation[allocator.PoolAll].Current; n != 2 {
		t.Errorf("%d live allocations, want 2 (a2 and x)", n)
	}
}

// Streams, record_stream and synchronize: the freed block waits for the
// stream it was used on.
func TestStreams(t *testing.T) {
	e, out := runSource(t, "s.mem", `stream 7
  alloc p 64MiB
end
record_stream p 0
free p
print(memory_allocated())
alloc q 64MiB
synchronize()
free q
alloc r 64MiB
print(memory_reserved())
`)
	if out != "0\n134217728\n" {
		t.Errorf("output %q", out)
	}
	segs := e.Snapshot().Segments
	if len(segs) != 2 || segs[0].Stream != 7 || segs[1].Stream != 0 {
		t.Errorf("segments: %+v", segs)
	}
}

// The torch.cuda calls reach the allocator.
func TestCalls(t *testing.T) {
	e, out := runSource(t, "c.mem", `alloc a 100MiB
free a
reset_peak_memory_stats()
print(max_memory_allocated())
empty_cache()
print(memory_reserved())
set_per_process_memory_fraction(0.5)
_set_allocator_settings("expandable_segments:True")
_record_memory_history(enabled=None)
alloc b 100MiB
_record_memory_history(max_entries=3)
alloc c 1MiB
alloc d 1MiB
`)
	if out != "0\n0\n" {
		t.Errorf("output %q", out)
	}
	a := e.Allocator()
	if !a.Config().ExpandableSegments || a.MemoryFraction() != 0.5 {
		t.Errorf("settings not applied: %v, fraction %v", a.Config().ExpandableSegments, a.MemoryFraction())
	}
	if n := e.Snapshot().Trace(0).Len(); n != 3 {
		t.Errorf("%d trace entries after max_entries=3", n)
	}
}

// Mistakes are reported with the file and line, before anything runs.
func TestFileErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"free x", `bad.mem:1: unknown tensor "x"`},
		{"alloc x 4MiB\nfree x\n\nfree x", `bad.mem:4: unknown tensor "x"`},
		{"repeat 2 as i\n  alloc a{i} 1MiB\nend\nfree a2", `bad.mem:4: unknown tensor "a2"`},
		{"alloc x", `bad.mem:1: alloc x: missing size (e.g. 4MiB, or [1024, 1024] bf16)`},
		{"alloc x [4, 4]", `bad.mem:1: alloc x: the shape needs a dtype (e.g. bf16, float32)`},
		{"alloc x [4, 4] bfloat17", `bad.mem:1: unknown dtype "bfloat17" (want e.g. float32, bfloat16, float16, int64, bool)`},
		{"alloc x 4 parsecs", `bad.mem:1: unexpected "parsecs"`},
		{"alloc x 4XB", `bad.mem:1: bad number or size "4XB" (want e.g. 4096, 4MiB, 1.5GiB)`},
		{"alloc x -4", `bad.mem:1: size -4 is negative`},
		{"let a = b + 1", `bad.mem:1: unknown variable "b"`},
		{"let a = 1 // 0", `bad.mem:1: division by zero`},
		{"# ok\nrepeat 3\n  alloc a 1MiB\n", `bad.mem:2: "repeat" block is never closed (no matching "end")`},
		{"phase p\nend\nend", `bad.mem:3: "end" without a repeat, phase, stream, graph or pool block to close`},
		{"frobnicate()", `bad.mem:1: unknown statement "frobnicate": expected a statement (let, alloc, free, repeat, phase, stream, end, print, record_stream) or a torch.cuda call`},
		{"set_per_process_memory_fraction(1.5)", `bad.mem:1: Invalid fraction value: 1.5. Allowed range: 0~1`},
		{"empty_cache(1)", `bad.mem:1: empty_cache() takes at most 0 positional arguments`},
		{`_record_memory_history(enabled="sometimes")`, `bad.mem:1: _record_memory_history(): enabled must be None or one of ["state" "all"], not "sometimes"`},
		{`_record_memory_history(max_entrys=5)`, `bad.mem:1: _record_memory_history() got an unexpected keyword argument "max_entrys"`},
		{"print(memory_summary(abbreviated=1))", `bad.mem:1: memory_summary(): abbreviated must be True or False, not 1`},
		{"print(memory_allocated(device=1))", `bad.mem:1: memory_allocated(): only device 0 is simulated`},
		{"print(memory_used())", `bad.mem:1: unknown statement "memory_used": expected a string or one of memory_allocated(), memory_reserved(), max_memory_allocated(), max_memory_reserved(), memory_stats(), memory_summary()`},
		{`print("unterminated)`, `bad.mem:1: unterminated string`},
		{"alloc let 4", `bad.mem:1: "let" is a keyword, not a tensor name`},
		{"repeat -1\nend", `bad.mem:1: repeat count -1 is negative`},
		{"record_stream x 1", `bad.mem:1: unknown tensor "x"`},
	} {
		f, err := ParseFile("bad.mem", tc.src)
		if err == nil {
			err = f.Check()
		}
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got %v\nwant %s", tc.src, err, tc.want)
		}
	}
}

// A file that runs out of memory stops there, like the Python script
// would: later statements do not run.
func TestFileOOM(t *testing.T) {
	f, _ := ParseFile("oom.mem", "alloc a 60GiB\nalloc b 30GiB\nprint(\"unreachable\")")
	var out bytes.Buffer
	e, _ := NewEnv(Options{Config: allocator.DefaultConfig(allocator.Latest), DeviceMemory: 80 << 30, Out: &out})
	f.Run(e)
	if e.OOM() == nil {
		t.Fatalf("no OOM (err %v)", e.Err())
	}
	if out.Len() != 0 {
		t.Errorf("printed %q after the OOM", out.String())
	}
	trace := e.Snapshot().Trace(0)
	if last := trace.Last(); last.Action != snapshot.ActionOOM || last.Size != 30<<30 {
		t.Errorf("last entry %+v, want an oom of 30 GiB", last)
	}
}
