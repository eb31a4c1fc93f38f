package workload

import (
	"github.com/memstat/memstat/pkg/allocator"
	"strings"
	"testing"
)

// The stated time model prints its figures as numbers (a %d of a float
// constant would print "%!d(float64=400)").
func TestTimeModelText(t *testing.T) {
	for _, want := range []string{"400 TFLOP/s", "fp32 60 TFLOP/s", "2 TB/s", "6 µs", "25 GB/s"} {
		if !strings.Contains(TimeModelBuiltin, want) {
			t.Errorf("TimeModelBuiltin = %q, want it to say %q", TimeModelBuiltin, want)
		}
	}
	if strings.Contains(TimeModelBuiltin, "%!") {
		t.Errorf("TimeModelBuiltin has a formatting error: %q", TimeModelBuiltin)
	}
}

// elapse moves the trace clock by its duration; without it allocator calls
// are 1 µs apart.
func TestElapse(t *testing.T) {
	e, _ := runSource(t, "elapse.mem", `
alloc a 1MiB
elapse 5ms
alloc b 1MiB
elapse 250us
elapse 1.5s
free a
`)
	tr := e.Snapshot().Trace(0)
	var allocs []int64
	for _, en := range tr.All() {
		allocs = append(allocs, en.TimeUS)
	}
	if len(allocs) < 3 {
		t.Fatalf("trace has %d entries, want at least 3", len(allocs))
	}
	first, last := allocs[0], allocs[len(allocs)-1]
	// 5 ms + 250 µs + 1.5 s of elapse, plus 1 µs per call in between.
	want := int64(5000 + 250 + 1500000)
	if got := last - first; got < want || got > want+10 {
		t.Errorf("trace spans %d µs, want %d (+ a few µs of calls)", got, want)
	}
}

func TestElapseErrors(t *testing.T) {
	for src, want := range map[string]string{
		"elapse 5":        "bad duration",
		"elapse 5min":     "bad duration",
		"elapse":          "expected a duration",
		"elapse 2000000s": "more than a day",
		"let elapse = 1":  "keyword",
	} {
		_, err := ParseFile("bad.mem", src)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one saying %q", src, err, want)
		}
	}
}

// A built-in training step takes about its FLOPs at the stated rate: a
// 6.7B-parameter model on 2048 tokens does 6·N·T ≈ 8.3e13 FLOPs per step,
// about 0.2 s at 400 TFLOP/s; the trace must span that order, not
// microseconds.
func TestBuiltinStepDuration(t *testing.T) {
	b, err := Lookup("train")
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.New(map[string]string{"layers": "8", "hidden": "4096", "heads": "32", "seq": "2048", "batch": "1", "steps": "2"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEnv(Options{Config: allocator.DefaultConfig(allocator.Latest), DeviceMemory: 80 << 30})
	if err != nil {
		t.Fatal(err)
	}
	w.Run(e)
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	tr := e.Snapshot().Trace(0)
	span := tr.Last().TimeUS - tr.First().TimeUS
	tr0 := w.(*Train)
	params := tr0.Model.Weights()
	var n int64
	for _, p := range params {
		n += p.Numel()
	}
	flops := 6 * n * 2048 * 2 // two steps
	lo := flops / halfFLOPsPerUS
	if span < lo || span > 4*lo {
		t.Errorf("two steps of %d parameters span %d µs; their matmuls alone take %d µs at 400 TFLOP/s", n, span, lo)
	}
}
