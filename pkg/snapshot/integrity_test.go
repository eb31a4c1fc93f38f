package snapshot

import (
	"bytes"
	"compress/gzip"
	"math/rand"
	"strings"
	"testing"
)

// A gzip snapshot's trailer is checked as Python's gzip checks it (issue
// 18): a corrupted CRC-32, a missing trailer and a flipped bit inside a
// stored block are one-line errors, not figures.
func TestGzipTrailerIsVerified(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	tree := synthSnapshot(r, snapShape{version: "2.5", segments: 2, blocks: 2, entries: 3, devices: 1, depth: 2, stacks: 3})
	raw := encodeTree(ptStyle{proto: 4}, tree)
	for _, level := range []int{gzip.NoCompression, gzip.DefaultCompression} {
		var gz bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&gz, level)
		zw.Write(raw)
		zw.Close()
		good := gz.Bytes()
		if _, err := Read(bytes.NewReader(good), int64(len(good))); err != nil {
			t.Fatalf("level %d: good gzip: %v", level, err)
		}
		mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
		cases := map[string][]byte{
			"corrupted CRC":   mutate(func(b []byte) []byte { b[len(b)-8] ^= 0xff; return b }),
			"corrupted size":  mutate(func(b []byte) []byte { b[len(b)-4] ^= 0x01; return b }),
			"missing trailer": good[:len(good)-8],
			"half a trailer":  good[:len(good)-3],
		}
		if level == gzip.NoCompression {
			// A stored block: the pickle's bytes are there as they are. Flip
			// a bit of a frame's file name (the decode still succeeds).
			i := bytes.Index(good, []byte(".py"))
			if i < 0 {
				t.Fatal("no .py in the stored data")
			}
			cases["flipped bit in a stored block"] = mutate(func(b []byte) []byte { b[i-1] ^= 0x01; return b })
		}
		for name, data := range cases {
			_, err := Read(bytes.NewReader(data), int64(len(data)))
			if err == nil {
				t.Errorf("level %d, %s: read without error", level, name)
				continue
			}
			if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "gzip") {
				t.Errorf("level %d, %s: %q, want one line about the gzip data", level, name, msg)
			}
		}
	}
}

// Trace entries with an action memstat does not know are counted in one
// warning line, not dropped without a word (issue 18).
func TestUnknownActionsWarnOnce(t *testing.T) {
	s := &Snapshot{Stacks: NewStacks(), Traces: []*Trace{TraceOf(
		TraceEntry{Action: ActionUnknown}, TraceEntry{Action: ActionAlloc, Addr: 512, Size: 512}, TraceEntry{Action: ActionUnknown},
	)}}
	var buf bytes.Buffer
	if err := Write(&buf, s); err != nil {
		t.Fatal(err)
	}
	got, err := Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, w := range got.Warnings {
		if strings.Contains(w, "2 trace entries have an action memstat does not know") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("warnings %q: want one line counting the 2 unknown actions", got.Warnings)
	}
}

// A snapshot listing more devices than any machine has is refused, naming
// the limit: one trace entry listed under 65,536 devices made commands run
// past 300 s (issue 18).
func TestTooManyDevicesRefused(t *testing.T) {
	s := &Snapshot{Stacks: NewStacks(), Traces: make([]*Trace, MaxDevices+1)}
	var buf bytes.Buffer
	if err := Write(&buf, s); err != nil {
		t.Fatal(err)
	}
	_, err := Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err == nil || !strings.Contains(err.Error(), "more than the limit of 1024") {
		t.Errorf("%d devices: %v, want the limit named", MaxDevices+1, err)
	}
	s.Traces = s.Traces[:MaxDevices]
	buf.Reset()
	Write(&buf, s)
	if _, err := Read(bytes.NewReader(buf.Bytes()), int64(buf.Len())); err != nil {
		t.Errorf("%d devices: %v", MaxDevices, err)
	}
}
