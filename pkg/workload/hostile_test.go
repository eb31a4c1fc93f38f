package workload

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/memstat/memstat/pkg/allocator"
)

// allocatedBy returns the bytes fn allocates (runtime.MemStats.TotalAlloc:
// all allocations, so a bound on it bounds peak memory too), which does not
// depend on the machine's load as time does.
func allocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// The workload budget (issue 18): a 40-byte file cannot make memstat run
// forever, fill the memory or the disk. Each limit fails in Check, before
// anything runs, with a message naming it; the work done before that is
// bounded by the limit, not by the file's loop counts.
func TestWorkloadBudget(t *testing.T) {
	defer func(a, b, c int) { maxStatements, maxAllocatorCalls, maxPrintBytes = a, b, c }(maxStatements, maxAllocatorCalls, maxPrintBytes)
	maxStatements, maxAllocatorCalls, maxPrintBytes = 100_000, 10_000, 1<<20
	for _, tc := range []struct{ src, want string }{
		// An empty loop: no statement inside to count, the iterations count.
		{"repeat 10**15\nend", "big.mem:1: more than 100000 statements and loop iterations executed (the workload budget)"},
		{"repeat 19999990\n  let x = 1\nend", "big.mem:1: more than 100000 statements and loop iterations executed (the workload budget)"},
		{"repeat 19999990\n  alloc x 1\nend", "big.mem:2: more than 10000 allocator calls (alloc, free, torch.cuda.*) executed (the workload budget)"},
		{"repeat 19999990\n  empty_cache()\nend", "big.mem:2: more than 10000 allocator calls"},
		{"repeat 19999990\n  print(memory_summary())\nend", "big.mem:2: more than 1048576 bytes printed (the workload budget)"},
		{"repeat 19999990\n  print(\"" + strings.Repeat("x", 1000) + "\")\nend", "big.mem:2: more than 1048576 bytes printed (the workload budget)"},
	} {
		f, err := ParseFile("big.mem", tc.src)
		if err != nil {
			t.Fatal(err)
		}
		var cerr error
		n := allocatedBy(func() { cerr = f.Check() })
		if cerr == nil || !strings.HasPrefix(cerr.Error(), tc.want) {
			t.Errorf("%.30q: got %v, want %s...", tc.src, cerr, tc.want)
		}
		// Checking is bounded by the budget: at most 100 bytes per
		// statement of the budget.
		if n > uint64(maxStatements)*100 {
			t.Errorf("%.30q: checking allocated %d bytes, more than 100 per budgeted statement", tc.src, n)
		}
	}

	// Running right up to the budget costs a constant per allocator call:
	// the recording's trace entries and stacks (measured ~500 B; asserted
	// within 2 KiB).
	maxAllocatorCalls = 10_000
	f, err := ParseFile("loop.mem", "repeat 9990\n  alloc x 1\nend")
	if err != nil {
		t.Fatal(err)
	}
	n := allocatedBy(func() {
		e, err := NewEnv(Options{Config: allocator.DefaultConfig(allocator.Latest), DeviceMemory: 80 << 30})
		if err != nil {
			t.Fatal(err)
		}
		f.Run(e)
		if e.Err() != nil {
			t.Fatal(e.Err())
		}
		e.Snapshot()
	})
	if per := n / 9990; per > 2048 {
		t.Errorf("running 9990 allocations allocated %d bytes, %d per call, more than 2 KiB", n, per)
	}
}

// Nesting is limited in blocks and expressions (issue 18: a deeply nested
// file crashed the Go runtime with a stack overflow), with the line named.
func TestWorkloadNesting(t *testing.T) {
	deep := 1_000_000
	for _, tc := range []struct{ name, src, want string }{
		{"blocks", strings.Repeat("repeat 1\n", deep) + strings.Repeat("end\n", deep), "deep.mem:101: blocks nested more than 100 deep"},
		{"phases", strings.Repeat("phase p\n", 200), "deep.mem:101: blocks nested more than 100 deep"},
		{"parentheses", "let x = " + strings.Repeat("(", 2000) + "1" + strings.Repeat(")", 2000), "deep.mem:1: more than 1000 tokens on one line"},
		{"parentheses in a line", "let x = " + strings.Repeat("(", 400) + "1" + strings.Repeat(")", 400), "deep.mem:1: expression nested more than 100 deep"},
		{"minus", "let x = " + strings.Repeat("-", 400) + "1", "deep.mem:1: expression nested more than 100 deep"},
		{"power", "let x = 1" + strings.Repeat("**1", 400), "deep.mem:1: expression nested more than 100 deep"},
		{"name", "alloc t{" + strings.Repeat("(", 400) + "1" + strings.Repeat(")", 400) + "} 1", "deep.mem:1: expression nested more than 100 deep"},
		{"long line", "let x = 1" + strings.Repeat("+1", 10<<20), "deep.mem:1: line longer than 4096 bytes"},
	} {
		_, err := ParseFile("deep.mem", tc.src)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: got %v, want %s", tc.name, err, tc.want)
		}
	}
	// A long chain of + within the limits parses and evaluates.
	f, err := ParseFile("chain.mem", "let x = 1"+strings.Repeat("+1", 490)+"\nalloc t{x} 1")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Check(); err != nil {
		t.Fatal(err)
	}
}

// Long text is cut in messages: one short line whatever the file holds.
func TestWorkloadErrorsCutLongText(t *testing.T) {
	long := strings.Repeat("x", 4000)
	for _, src := range []string{
		"free " + long,
		"alloc t 4 " + long,
		"alloc t [4] " + long,
		long + "()",
		"print(" + long + ")",
		"_record_memory_history(enabled=" + long + ")",
	} {
		f, err := ParseFile("long.mem", src)
		if err == nil {
			err = f.Check()
		}
		if err == nil {
			t.Errorf("%.20q: no error", src)
			continue
		}
		if len(err.Error()) > 300 {
			t.Errorf("%.20q: error of %d bytes: %.100s...", src, len(err.Error()), err)
		}
	}
}

// Workload files: a FIFO or a device is refused before it is opened (a
// FIFO blocked forever, /dev/zero grew without end); a file over 1 MiB is
// refused naming the limit.
func TestReadFileRefusesNonRegularAndLarge(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "w.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFO here (%v); skipping", err)
	}
	big := filepath.Join(dir, "big.mem")
	os.WriteFile(big, []byte(strings.Repeat("# comment\n", 200_000)), 0o644)
	for path, want := range map[string]string{
		fifo:        fifo + ": not a regular file (a workload file is read from a regular file, not a FIFO)",
		"/dev/zero": "/dev/zero: not a regular file (a workload file is read from a regular file, not a device)",
		dir:         dir + ": not a regular file (a workload file is read from a regular file, not a folder)",
		big:         big + ": larger than 1048576 bytes, the limit for a workload file",
	} {
		if _, err := ReadFile(path); err == nil || err.Error() != want {
			t.Errorf("got %v, want %s", err, want)
		}
	}
}

// FuzzWorkloadFile parses, checks and runs fuzzed workload files under a
// small budget: no panic, no stack overflow, errors name the file.
func FuzzWorkloadFile(f *testing.F) {
	for _, p := range []string{"fragmentation.mem", "side_stream.mem", "training_loop.mem"} {
		if b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "workloads", p)); err == nil {
			f.Add(string(b))
		}
	}
	f.Add("repeat 3 as i\n  phase p{i}\n    alloc t{i} [2, 3] bf16\n  end\nend\nfree t0\nprint(memory_summary())\n")
	f.Fuzz(func(t *testing.T, src string) {
		defer func(a, b, c int) { maxStatements, maxAllocatorCalls, maxPrintBytes = a, b, c }(maxStatements, maxAllocatorCalls, maxPrintBytes)
		maxStatements, maxAllocatorCalls, maxPrintBytes = 10_000, 1_000, 1<<16
		wf, err := ParseFile("f.mem", src)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.mem:") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		e, err := NewEnv(Options{Config: allocator.DefaultConfig(allocator.Latest), DeviceMemory: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		wf.Run(e)
	})
}
