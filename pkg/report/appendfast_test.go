package report

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

func sizeByFloat(n int64) string { return string(appendSizeFloat(nil, n)) }

// TestAppendSizeExact: the integer path prints what the float path does,
// on every unit's edges, on exact halves (which round to even) and their
// neighbours, and on random sizes of every magnitude.
func TestAppendSizeExact(t *testing.T) {
	var ns []int64
	for k := uint(10); k <= 52; k += 10 {
		for _, n := range []int64{1 << k, 1<<(k+10) - 1, 1 << (k + 10), 1<<(k+10) - 1<<(k-10)} {
			ns = append(ns, n-1, n, n+1)
		}
		// x*10 = q*2^k + 2^(k-1): a size exactly halfway between two
		// printed tenths.
		for q := int64(10); q < 2000; q++ {
			if x := q<<k + 1<<(k-1); x%10 == 0 {
				ns = append(ns, x/10-1, x/10, x/10+1)
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		ns = append(ns, r.Int64N(1<<r.IntN(54)))
	}
	ns = append(ns, 1<<53-1)
	halves := 0
	for _, n := range ns {
		if n < 1024 || n >= 1<<53 {
			continue
		}
		want := sizeByFloat(n)
		if got := string(appendSizeExact(nil, n)); got != want {
			t.Fatalf("size %d: %q, the float path %q", n, got, want)
		}
		if got := Size(n); got != want {
			t.Fatalf("Size(%d) = %q, want %q", n, got, want)
		}
		if n == 1280 {
			halves++ // 1.25 KiB: "1.2 KiB", half to even
		}
	}
	if halves == 0 || Size(1280) != "1.2 KiB" || Size(1<<53) != sizeByFloat(1<<53) || Size(-1536) != "-1.5 KiB" {
		t.Errorf("Size(1280) = %q, Size(2^53) = %q, Size(-1536) = %q", Size(1280), Size(1<<53), Size(-1536))
	}
}

// TestAppendSeconds: the integer path for whole microseconds prints what
// strconv's fixed six decimals print, on small, large and random times
// and on times that are not whole microseconds.
func TestAppendSeconds(t *testing.T) {
	fs := []float64{0, 1e-6, 0.5e-6, 0.1, 0.999999, 1, 59.9999995, 1773270053.812345, 4e9, 1 << 32, 5e9, 1e300, -1, math.Inf(1), math.NaN()}
	r := rand.New(rand.NewPCG(3, 4))
	for range 200000 {
		us := r.Int64N(1 << r.IntN(53))
		fs = append(fs, float64(us)/1e6, float64(us)/1e6+r.Float64()*1e-6)
	}
	for _, f := range fs {
		want := "+" + strconv.FormatFloat(f, 'f', 6, 64) + "s"
		if got := string(AppendSeconds(nil, f)); got != want {
			t.Fatalf("seconds %v: %q, want %q", f, got, want)
		}
	}
}

// BenchmarkAppendSize: a trace listing's sizes (two a line), by the
// integer path and by the float path it replaces.
func BenchmarkAppendSize(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	ns := make([]int64, 4096)
	for i := range ns {
		ns[i] = r.Int64N(1 << r.IntN(40))
	}
	buf := make([]byte, 0, 64)
	b.Run("exact", func(b *testing.B) {
		for i := range b.N {
			buf = AppendSize(buf[:0], ns[i&4095])
		}
	})
	b.Run("float", func(b *testing.B) {
		for i := range b.N {
			buf = appendSizeFloat(buf[:0], ns[i&4095])
		}
	})
}

// BenchmarkAppendSeconds: a trace listing's times, whole microseconds.
func BenchmarkAppendSeconds(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.Run("exact", func(b *testing.B) {
		for i := range b.N {
			buf = AppendSeconds(buf[:0], float64(i)/1e6)
		}
	})
	b.Run("float", func(b *testing.B) {
		for i := range b.N {
			buf = append(strconv.AppendFloat(append(buf[:0], '+'), float64(i)/1e6, 'f', 6, 64), 's')
		}
	})
}
