package pickle

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
)

// TestSkimMapped: a file skimmed in place (mapped, in pieces on 2 and 3
// goroutines, each piece's pages let go once walked) gives what SkimTo
// gives reading it: the hand-made pickles framed every few opcodes, the
// published snapshots.
func TestSkimMapped(t *testing.T) {
	defer func(m int64) { skimMapMin = m }(skimMapMin)
	skimMapMin = 0
	inputs := map[string][]byte{}
	for _, every := range []int{1, 3, 1000} {
		inputs[fmt.Sprintf("skimPickle(30_000) framed every %d", every)] = reframe(skimPickle(30_000), every)
		inputs[fmt.Sprintf("tuples framed every %d", every)] = reframe(tuplePickle(), every)
	}
	for _, fn := range realdata.FilesIfPresent() {
		if data, err := readPickleFile(fn); err == nil {
			if framed := reframe(data, 97); framed != nil {
				inputs[fn] = framed
			}
		}
	}
	dir := t.TempDir()
	mapped := 0
	for name, data := range inputs {
		path := filepath.Join(dir, "in.pickle")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if mem := mapForSkim(f, int64(len(data))); mem != nil {
			mapped++
			unmapForSkim(mem)
		}
		for _, key := range []string{"key", "device_traces"} {
			want, werr := SkimTo(bytes.NewReader(data), key, 1<<20)
			for _, workers := range []int{2, 3} {
				for _, piece := range []int64{1, 100, 5000} {
					got, gerr := SkimAt(f, int64(len(data)), key, 1<<20, SkimOptions{Workers: workers, PieceBytes: piece})
					skimsMatch(t, fmt.Sprintf("%s, key %q (%d goroutines, pieces from %d bytes)", name, key, workers, piece), want, werr, got, gerr)
				}
			}
		}
		f.Close()
	}
	if mapped == 0 {
		t.Skip("no file mapped here")
	}
}

// TestSkimMappedTruncated: a file cut short after it was mapped faults
// where the walks read past its new end; the skim says ErrSkim and the
// process goes on.
func TestSkimMappedTruncated(t *testing.T) {
	data := reframe(skimPickle(300_000), 1000)
	path := filepath.Join(t.TempDir(), "in.pickle")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size := int64(len(data))
	for _, cut := range []int64{0, 1 << 16, size / 2} {
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		mem := mapForSkim(f, size)
		if mem == nil {
			t.Skip("no file mapped here")
		}
		if err := f.Truncate(cut); err != nil {
			t.Fatal(err)
		}
		for _, workers := range []int{2, 3} {
			sk, err := skimAt(f, size, "key", 1<<20, SkimOptions{Workers: workers, PieceBytes: 4096}, nil, mem)
			if !errors.Is(err, ErrSkim) {
				t.Errorf("cut at %d, %d goroutines: %v (skim %v), want ErrSkim", cut, workers, err, sk != nil)
			}
		}
		unmapForSkim(mem)
	}
}
