package chunkread

import (
	"bytes"
	"io"
	"slices"
	"testing"
)

// TestReadsEverythingInSmallChunks: the data comes back whole, in chunks
// under 20 bytes, and the same data is cut the same way twice.
func TestReadsEverythingInSmallChunks(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 100)
	cuts := func() []int {
		r := New(data)
		var got []byte
		var sizes []int
		buf := make([]byte, 64)
		for {
			n, err := r.Read(buf)
			if n >= 20 {
				t.Fatalf("a chunk of %d bytes", n)
			}
			got = append(got, buf[:n]...)
			sizes = append(sizes, n)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("read %d bytes, want the %d written", len(got), len(data))
		}
		return sizes
	}
	a, b := cuts(), cuts()
	if len(a) < len(data)/20 {
		t.Errorf("%d reads for %d bytes: chunks too large", len(a), len(data))
	}
	if !slices.Equal(a, b) {
		t.Errorf("the same data was cut differently: %v, then %v", a, b)
	}
}
