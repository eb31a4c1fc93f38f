package parallel

import (
	"compress/gzip"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func currentLimit() int64 { return debug.SetMemoryLimit(-1) }

func TestHeapLimit(t *testing.T) {
	before := currentLimit()
	dir := t.TempDir()
	big := filepath.Join(dir, "big.pickle")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	// A sparse 1 GiB file: only its size matters.
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()

	h := LimitHeapToFile(big, 64<<30)
	if got := currentLimit(); got != 1<<30 {
		t.Errorf("limit while reading a 1 GiB file: %d, want the file's size", got)
	}
	// A snapshot whose replay needs less than the file keeps the file's
	// size; one that needs more gets its need and a tenth.
	h.Loaded(1_000_000, 100_000)
	if got := currentLimit(); got != 1<<30 {
		t.Errorf("limit for a light snapshot: %d, want %d", got, 1<<30)
	}
	h.Loaded(10_000_000, 5_000_000)
	need := int64(10_000_000*heapPerEntry + 5_000_000*heapPerBlock)
	if got := currentLimit(); got != need+need/10 {
		t.Errorf("limit for a heavy snapshot: %d, want %d", got, need+need/10)
	}
	h.Release()
	if got := currentLimit(); got != before {
		t.Errorf("limit after Release: %d, want %d as before", got, before)
	}

	// The budget caps it; small files get the floor.
	h = LimitHeapToFile(big, 512<<20)
	if got := currentLimit(); got != 512<<20 {
		t.Errorf("limit under a 512 MiB budget: %d", got)
	}
	h.Release()
	small := filepath.Join(dir, "small.pickle")
	os.WriteFile(small, []byte{0x80, 0x04, '.'}, 0o644)
	h = LimitHeapToFile(small, 64<<30)
	if got := currentLimit(); got != minHeapLimit {
		t.Errorf("limit for a small file: %d, want %d", got, minHeapLimit)
	}
	// A command that knows its heap sets it below the floor (the view's
	// server), within the budget.
	h.SetTo(100 << 20)
	if got := currentLimit(); got != 100<<20 {
		t.Errorf("limit after SetTo(100 MiB): %d", got)
	}
	h.SetTo(1 << 40)
	if got := currentLimit(); got != 64<<30 {
		t.Errorf("SetTo above the budget: %d, want the budget", got)
	}
	h.Release()
	if got := currentLimit(); got != before {
		t.Errorf("limit after Release: %d, want %d as before", got, before)
	}
	h.SetTo(100 << 20) // released: sets nothing
	if got := currentLimit(); got != before {
		t.Errorf("SetTo after Release set %d", got)
	}

	// Compressed or missing files set nothing.
	gz := filepath.Join(dir, "snap.pickle.gz")
	g, _ := os.Create(gz)
	w := gzip.NewWriter(g)
	w.Write([]byte("x"))
	w.Close()
	g.Close()
	for _, p := range []string{gz, filepath.Join(dir, "missing")} {
		h = LimitHeapToFile(p, 64<<30)
		h.Loaded(1, 1)
		if got := currentLimit(); got != before {
			t.Errorf("%s: limit %d set", filepath.Base(p), got)
		}
		h.Release()
	}
}
