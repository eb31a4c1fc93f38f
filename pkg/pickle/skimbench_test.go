package pickle

import (
	"os"
	"testing"
)

// BenchmarkSkimFile skims MEMSTAT_BENCH_FILE (a snapshot pickle) up to its
// device_traces, in order (seq) and in pieces on two goroutines (split):
// the walk trace --stream's first line waits for (profiles; skipped
// without the file).
func BenchmarkSkimFile(b *testing.B) {
	path := os.Getenv("MEMSTAT_BENCH_FILE")
	if path == "" {
		b.Skip("MEMSTAT_BENCH_FILE not set")
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	size := st.Size()
	for _, c := range []struct {
		name    string
		workers int
	}{{"seq", 1}, {"split", 2}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				sk, err := SkimAt(f, size, "device_traces", int(max(1<<16, size/16)), SkimOptions{Workers: c.workers})
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(sk.Stop)
				sk.Release()
			}
		})
	}
}
