// Package chunkread gives tests a reader that hands out its data in small,
// uneven chunks, the way pipes, gzip readers and network streams do, so
// that a decoder's tests cover reads that stop anywhere. It imports nothing
// of memstat's, so that every layer's tests can use it.
package chunkread

import (
	"hash/fnv"
	"io"
	"math/rand"
)

// Reader hands out its data in chunks of 0 to 19 bytes (sizes drawn from a
// generator seeded by the data, so a failing input fails again the same
// way), sometimes with io.EOF on the last chunk.
type Reader struct {
	data []byte
	r    *rand.Rand
}

// New returns a Reader of data.
func New(data []byte) *Reader {
	h := fnv.New64a()
	h.Write(data)
	return &Reader{data: data, r: rand.New(rand.NewSource(int64(h.Sum64())))}
}

func (c *Reader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(c.r.Intn(20), len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	if len(c.data) == 0 && c.r.Intn(2) == 0 {
		return n, io.EOF
	}
	return n, nil
}
