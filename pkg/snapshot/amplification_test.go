package snapshot

import (
	"bytes"
	"compress/gzip"
	"math/rand"
	"runtime"
	"strings"
	"testing"
)

// What reading any input may allocate (TotalAlloc, garbage included): per
// byte of the file (compressed, for a gzip) and a constant. The memory the
// decoder holds is bounded by the budget (MemoryPerFileByte,
// MemoryPerDecodedByte, MemoryFloor); what it allocates on the way is
// about four times that (slices grow by doubling, and the budget is
// checked every 32 KiB of opcodes) plus the 1 MiB read buffers.
const (
	allocPerFileByte = 4 * MemoryPerFileByte
	allocFileSlack   = 8 * MemoryFloor
)

// amplifier is a crafted input of one amplification class and what Read
// must do with it: refuse it with an error naming the limit (want; one of
// |-separated texts), or read it (want "") within the bound.
type amplifier struct {
	class, name string
	data        []byte
	want        string
}

// gzipOf compresses s at the best level.
func gzipOf(s string) []byte {
	var b bytes.Buffer
	w, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	w.Write([]byte(s))
	w.Close()
	return b.Bytes()
}

// soupGzip is a gzip of about n bytes of pickle: PROTO, then opcodes drawn
// from ops with one in every `every` bytes random, so that the compression
// ratio is about what `every` makes it.
func soupGzip(n, every int, ops string) []byte {
	r := rand.New(rand.NewSource(int64(every)))
	b := make([]byte, n)
	for i := range b {
		b[i] = ops[0]
		if i%every == 0 {
			b[i] = ops[r.Intn(len(ops))]
		}
	}
	return gzipOf("\x80\x02" + string(b) + "N.")
}

// framesShared writes e trace entries that all list one stack of f frames
// (memo index 0): what 1,000 x 1,000 memo-shared entries look like.
func framesShared(e, f int) string {
	var s strings.Builder
	s.WriteString("\x80\x02}(" + sbu("segments") + "]" + sbu("device_traces") + "]((")
	s.WriteString("}(" + sbu("action") + sbu("alloc") + sbu("addr") + binInt(0) + sbu("frames") + "]q\x00(")
	for i := range f {
		s.WriteString("}(" + sbu("name") + sbu("f") + sbu("filename") + sbu("a.py") + sbu("line") + binInt(i) + "u")
	}
	s.WriteString("eu")
	for i := 1; i < e; i++ {
		s.WriteString("}(" + sbu("action") + sbu("alloc") + sbu("addr") + binInt(i) + sbu("frames") + "h\x00u")
	}
	s.WriteString("leu.")
	return s.String()
}

// manySegments writes n segments of one block each on device 0.
func manySegments(n int) string {
	seg := "}(" + sbu("blocks") + "](" + blocks(1) + "eu"
	return "\x80\x02}(" + sbu("segments") + "](" + strings.Repeat(seg, n) + "eu."
}

// manyEntries writes n distinct trace entries on one device.
func manyEntries(n int) string {
	var s strings.Builder
	s.WriteString("\x80\x02}(" + sbu("segments") + "]" + sbu("device_traces") + "]((")
	for i := range n {
		s.WriteString("}(" + sbu("action") + sbu("alloc") + sbu("addr") + binInt(i) + "u")
	}
	s.WriteString("leu.")
	return s.String()
}

// deepStack writes one entry whose stack has n distinct frames.
func deepStack(n int) string {
	var s strings.Builder
	s.WriteString("\x80\x02}(" + sbu("segments") + "]" + sbu("device_traces") + "]((}(" + sbu("action") + sbu("alloc") + sbu("frames") + "](")
	for i := range n {
		s.WriteString("}(" + sbu("name") + sbu("f") + sbu("filename") + sbu("a.py") + sbu("line") + binInt(i) + "u")
	}
	s.WriteString("euleu.")
	return s.String()
}

// devices writes n empty device traces.
func devices(n int) string {
	return "\x80\x02}(" + sbu("segments") + "]" + sbu("device_traces") + "](" + strings.Repeat("]", n) + "eu."
}

func amplifiers() []amplifier {
	a := func(class, name string, data []byte, want string) amplifier {
		return amplifier{class, name, data, want}
	}
	s := func(class, name, data, want string) amplifier { return amplifier{class, name, []byte(data), want} }
	mib := 1 << 20
	return []amplifier{
		// gzip: 8 MiB of container opcodes at ratios from 15x to over
		// 1000x; the budget stops each after a few MiB of output.
		a("gzip ratio", "empty lists, about 15x", soupGzip(8*mib, 6, "]}N)"), "memory budget"),
		a("gzip ratio", "empty lists, about 190x", soupGzip(8*mib, 200, "]}N)"), "memory budget"),
		a("gzip ratio", "empty lists, over 1000x", soupGzip(8*mib, 1<<30, "]"), "memory budget"),
		a("gzip ratio", "marks and dicts, about 190x", soupGzip(8*mib, 200, "(}"), "memory budget"),
		a("gzip ratio", "NONE POP, 1000x", gzipBomb(64<<10), "compression bomb"),
		a("gzip ratio", "20000 trace entries", gzipOf(manyEntries(20000)), ""),
		// memo sharing: references cost 2 bytes; what they refer to is
		// shared, never copied, or refused when PyTorch never writes it.
		s("memo sharing", "1000 entries x 1000 shared frames", framesShared(1000, 1000), ""),
		s("memo sharing", "50000 entries x 100 shared frames", framesShared(50000, 100), ""),
		s("memo sharing", "one entry listed 300000 times", repeatedEntry(300_000), "repeats a trace entry dict"),
		s("memo sharing", "one segment listed 3000 times", repeatedSegments(3000, 3000), "repeats a segment"),
		s("memo sharing", "3000 segments share 3000 blocks", sharedBlocks(3000, 3000), "block dict is listed twice"),
		s("memo sharing", "one annotation listed 200000 times", repeatedAnnotation(200000, 2000), ""),
		// nesting: every container counts in the budget; those that
		// hold less than it allows are read (and found no snapshot).
		s("nesting", "1 MiB of nested tuples", "\x80\x02)"+strings.Repeat("\x85", mib)+".", "memory budget"),
		s("nesting", "1 MiB of nested lists", strings.Repeat("]", mib/2)+strings.Repeat("a", mib/2-1)+".", "segments[0] is not a segment dict|memory budget"),
		s("nesting", "1 MiB of marks", "\x80\x02"+strings.Repeat("(", mib)+"N.", "the pickle holds a None|memory budget"),
		s("nesting", "1 MiB of dicts", "\x80\x02"+strings.Repeat("}N", mib/2)+".", "the pickle holds a None|memory budget"),
		s("nesting", "1 MiB of nested pairs", "\x80\x02N"+strings.Repeat("N\x86", mib/2)+".", "segments[0] is not a segment dict|memory budget"),
		// devices.
		s("devices", "1024 empty device traces", devices(MaxDevices), ""),
		s("devices", "65536 empty device traces", devices(65536), "more than the limit of 1024"),
		s("devices", "a segment on device 2^31", "\x80\x04}("+sbu("segments")+"](}("+sbu("blocks")+"]"+sbu("device")+"J\x00\x00\x00\x7fueu.", "out of range"),
		// segments, frames and entries: linear, and capped.
		s("segments", "20000 segments", manySegments(20_000), ""),
		s("frames", "5000 frames sharing a 4 MiB name", framesSharingALongName(5000, 4<<20), ""),
		s("frames", "a stack of 70000 frames", deepStack(70_000), "more than the limit of 65536 (MaxStackDepth)"),
		s("entries", "100000 entries", manyEntries(100_000), ""),
	}
}

// TestAmplificationBounded reads a crafted input of every amplification
// class: each is refused with an error naming the limit or read, and what
// it allocated stays within allocPerFileByte per byte of the file plus
// allocFileSlack (and, for plain pickles, readAllocPerByte per byte plus
// readAllocSlack). Bytes allocated, not time: a unit test cannot time.
func TestAmplificationBounded(t *testing.T) {
	for _, c := range amplifiers() {
		t.Run(c.class+"/"+c.name, func(t *testing.T) {
			runtime.GC()
			var err error
			alloc := allocatedBy(func() { _, err = Read(bytes.NewReader(c.data), int64(len(c.data))) })
			n := uint64(len(c.data))
			limit := allocPerFileByte*n + allocFileSlack
			if c.data[0] != 0x1f {
				limit = min(limit, readAllocPerByte*n+readAllocSlack)
			}
			t.Logf("%9d bytes: allocated %10d (%.0f per byte; bound %d): %v", n, alloc, float64(alloc)/float64(n), limit, err)
			if alloc > limit {
				t.Errorf("allocated %d bytes for %d of input, over the bound of %d", alloc, n, limit)
			}
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("want a snapshot, got %v", err)
			case c.want != "" && err == nil:
				t.Fatalf("want an error saying %q, got none", c.want)
			case c.want != "" && !saysOneOf(err.Error(), c.want):
				t.Fatalf("error %q does not say %q", err, c.want)
			}
			if err != nil {
				checkReadError(t, err)
			}
		})
	}
}

// saysOneOf reports whether msg contains one of the |-separated wants.
func saysOneOf(msg, wants string) bool {
	for _, w := range strings.Split(wants, "|") {
		if strings.Contains(msg, w) {
			return true
		}
	}
	return false
}

// TestCapsNamedInErrors: a snapshot listing more segments, blocks, trace
// entries or distinct frames than the caps is refused with the cap named.
// The caps are lowered here (a real cap is millions of records).
func TestCapsNamedInErrors(t *testing.T) {
	saved := caps
	defer func() { caps = saved }()
	caps.segments, caps.blocks, caps.entries, caps.frames = 100, 150, 100, 100
	for _, c := range []struct{ name, data, want string }{
		{"segments", manySegments(101), "more than 100 segments, the limit (MaxSegments)"},
		{"blocks", "\x80\x02}(" + sbu("segments") + "](}(" + sbu("blocks") + "](" + blocks(151) + "eueu.", "more than 150 blocks, the limit (MaxBlocks)"},
		{"entries", manyEntries(101), "more than 100 trace entries, the limit (MaxTraceEntries)"},
		{"frames", deepStack(101), "more than 100 distinct stack frames, the limit (MaxFrames)"},
	} {
		_, err := Read(strings.NewReader(c.data), -1)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error saying %q", c.name, err, c.want)
		}
		caps = saved
		if _, err := Read(strings.NewReader(c.data), -1); err != nil {
			t.Errorf("%s: under the real caps: %v", c.name, err)
		}
		caps.segments, caps.blocks, caps.entries, caps.frames = 100, 150, 100, 100
	}
}
