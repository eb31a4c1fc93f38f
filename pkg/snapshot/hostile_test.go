package snapshot

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/pickle"
)

// hostileSnapshot is a crafted input for Read and what it must give: an
// error containing want, or success when want is "".
type hostileSnapshot struct {
	name string
	data []byte
	want string
}

// Opcode helpers for hand-made pickles.
func sbu(s string) string { return "\x8c" + string([]byte{byte(len(s))}) + s } // SHORT_BINUNICODE

func binUnicode(s string) string { // BINUNICODE
	return string(binary.LittleEndian.AppendUint32([]byte{'X'}, uint32(len(s)))) + s
}

func binInt(i int) string { // BININT
	return string(binary.LittleEndian.AppendUint32([]byte{'J'}, uint32(i)))
}

// blocks writes b block dicts.
func blocks(b int) string {
	return strings.Repeat("}("+sbu("state")+sbu("active_allocated")+sbu("size")+"K\x01u", b)
}

// repeatedSegments lists one segment of b blocks m times (DUP).
func repeatedSegments(m, b int) string {
	seg := "}(" + sbu("blocks") + "](" + blocks(b) + "eu"
	return "\x80\x04}(" + sbu("segments") + "](" + seg + strings.Repeat("2", m-1) + "eu."
}

// sharedBlocks writes m segments that all hold the one list of b blocks
// (memo index 0).
func sharedBlocks(m, b int) string {
	var s strings.Builder
	s.WriteString("\x80\x02}(" + sbu("segments") + "](")
	s.WriteString("}(" + sbu("blocks") + "]q\x00(" + blocks(b) + "eu")
	for range m - 1 {
		s.WriteString("}(" + sbu("blocks") + "h\x00u")
	}
	s.WriteString("eu.")
	return s.String()
}

// repeatedTraces lists one trace of e entries as m devices' traces.
func repeatedTraces(m, e int) string {
	var entries strings.Builder
	for i := range e {
		entries.WriteString("}(" + sbu("action") + sbu("alloc") + sbu("addr") + binInt(i) + "u")
	}
	return "\x80\x04}(" + sbu("segments") + "]" + sbu("device_traces") +
		"]((" + entries.String() + "l" + strings.Repeat("2", m-1) + "eu."
}

// repeatedEntry lists one trace entry dict m times (DUP) in one trace.
func repeatedEntry(m int) string {
	entry := "}(" + sbu("action") + sbu("alloc") + sbu("addr") + "K\x01u"
	return "\x80\x04}(" + sbu("segments") + "]" + sbu("device_traces") +
		"]((" + entry + strings.Repeat("2", m-1) + "leu."
}

// repeatedSettingsKey repeats the roundup_power2_divisions key d times,
// each holding one dict whose r keys are one long digit string.
func repeatedSettingsKey(d, r, digits int) string {
	rd := "}q\x01(" + binUnicode(strings.Repeat("9", digits)) + "q\x02K\x01" + strings.Repeat("h\x02K\x01", r-1) + "u"
	return "\x80\x02}(" + sbu("segments") + "]" + sbu("allocator_settings") + "}(" +
		sbu("roundup_power2_divisions") + "q\x00" + rd + strings.Repeat("h\x00h\x01", d-1) + "uu."
}

// repeatedAnnotation lists one dict of d unknown keys m times as the
// external annotations.
func repeatedAnnotation(m, d int) string {
	return "\x80\x02}(" + sbu("segments") + "]" + sbu("external_annotations") + "](}(" +
		sbu("junk") + "q\x00K\x01" + strings.Repeat("h\x00K\x01", d-1) + "u" + strings.Repeat("2", m) + "eu."
}

// framesSharingALongName writes one trace entry whose stack has n frame
// dicts, each with its own line but all with the same name of size bytes.
func framesSharingALongName(n, size int) string {
	var s strings.Builder
	s.WriteString("\x80\x02(" + binUnicode(strings.Repeat("n", size)) + "q\x00" + sbu("name") + "q\x01" +
		sbu("filename") + "q\x02" + sbu("f.py") + "q\x03" + sbu("line") + "q\x041")
	s.WriteString("}(" + sbu("segments") + "]" + sbu("device_traces") + "]((}(" + sbu("action") + sbu("alloc") + sbu("frames") + "](")
	for i := range n {
		s.WriteString("}(h\x01h\x00h\x02h\x03h\x04" + binInt(i) + "u")
	}
	s.WriteString("euleu.")
	return s.String()
}

// gzipMembers concatenates gzip members: a snapshot-sized stream for the
// price of compressing one chunk.
func gzipMembers(parts ...string) []byte {
	var out bytes.Buffer
	cache := map[string][]byte{}
	for _, p := range parts {
		z, ok := cache[p]
		if !ok {
			var b bytes.Buffer
			w, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
			w.Write([]byte(p))
			w.Close()
			z = b.Bytes()
			cache[p] = z
		}
		out.Write(z)
	}
	return out.Bytes()
}

// gzipBomb is about size bytes of gzip that expand about 1000 times into a
// pickle that keeps decoding: PROTO, then NONE POP pairs.
func gzipBomb(size int) []byte {
	chunk := strings.Repeat("N0", 1<<19)
	parts := []string{"\x80\x02"}
	one := len(gzipMembers(chunk))
	for range size / one {
		parts = append(parts, chunk)
	}
	return gzipMembers(append(parts, "N.")...)
}

// hostileSnapshots are crafted inputs of at most a few MiB.
func hostileSnapshots() []hostileSnapshot {
	c := func(name string, data, want string) hostileSnapshot { return hostileSnapshot{name, []byte(data), want} }
	long := strings.Repeat("\x01é", 1<<20)
	return []hostileSnapshot{
		// Shared references that the model would copy once per reference.
		c("one segment listed 3000 times", repeatedSegments(3000, 3000), "segments[1] repeats a segment"),
		c("one segment listed twice", repeatedSegments(2, 1), "segments[1] repeats a segment"),
		c("3000 segments share 3000 blocks", sharedBlocks(3000, 3000), "block dict is listed twice"),
		c("one block listed twice", "\x80\x04}("+sbu("segments")+"](}("+sbu("blocks")+"]("+blocks(1)+"2eueu.", "block dict is listed twice"),
		c("one trace listed as 1000 devices", repeatedTraces(1000, 3000), "device_traces[1] is the same list as device_traces[0]"),
		c("one trace listed as 3000 devices", repeatedTraces(3000, 3000), "\"device_traces\" lists 3000 devices, more than the limit of 1024"),
		c("one entry listed 1000000 times", repeatedEntry(1_000_000), "device_traces[0][1] repeats a trace entry dict"),
		c("one empty trace listed as 3 devices", "\x80\x04}("+sbu("segments")+"]"+sbu("device_traces")+"](]22eu.", ""),
		c("roundup_power2_divisions repeated", repeatedSettingsKey(200, 200, 1<<16), ""),
		c("one annotation of 200000 keys listed 200000 times", repeatedAnnotation(200000, 200000), ""),
		c("20000 frames share a 16 MiB name", framesSharingALongName(20000, 16<<20), ""),

		// Error messages quote at most a short prefix of the input.
		c("a block state of 3 MiB", "\x80\x02}("+sbu("segments")+"](}("+sbu("blocks")+"](}("+sbu("state")+binUnicode(long)+sbu("size")+"K\x01ueueu.", "unknown state"),
		c("a segment_type of 3 MiB", "\x80\x02}("+sbu("segments")+"](}("+sbu("blocks")+"]"+sbu("segment_type")+binUnicode(long)+"ueu.", "unknown segment_type"),
		c("keys of 3 MiB", "\x80\x02}("+binUnicode(long)+"K\x01"+binUnicode(long+"x")+"K\x02u.", "expected \"segments\""),

		// Changing a dict after the compactor made a frame of it.
		c("frame dict changed after use", "\x80\x04}\x94("+sbu("name")+sbu("f")+sbu("filename")+sbu("g")+sbu("line")+"K\x01u](h\x00e0(K\x01K\x02u.", "modifies a dict after it was used"),
		c("compactor error", "\x80\x04}("+sbu("segments")+"](}("+sbu("blocks")+"]"+sbu("device")+"J\x00\x00\x00\x7fueu.", "device 2130706432 is out of range"),
		c("frames not a list of frames", "\x80\x04}("+sbu("segments")+"]"+sbu("device_traces")+"]((}("+sbu("action")+sbu("alloc")+sbu("frames")+"K\x01uleu.", "is not a list of frames"),

		// JSON.
		c("JSON nested 10 million deep", `{"segments": `+strings.Repeat("[", 10_000_000), "JSON nests deeper than 512 levels"),
		c("JSON objects nested 1 million deep", strings.Repeat(`{"a":`, 1_000_000), "JSON nests deeper than 512 levels"),
		c("JSON number of a million digits", `{"segments": [], "x": `+strings.Repeat("7", 1_000_000)+`}`, "JSON number of 1000000 characters"),
		c("JSON number too large for a float", `{"segments": [], "x": 1e99999999}`, "bad JSON number"),
		c("JSON number with a long fraction", `{"segments": [], "x": 1.`+strings.Repeat("5", 100_000)+`}`, "JSON number of 100002 characters"),
		c("JSON string of 4 MiB", `{"segments": [], "x": "`+strings.Repeat("s", 4<<20)+`"}`, ""),
		c("JSON garbage after", `{"segments": []} x`, "data after the top-level value"),
		c("JSON truncated", `{"segments": [`, "truncated"),

		// Nesting through the compactor.
		c("1 million nested lists", strings.Repeat("]", 1_000_000)+strings.Repeat("a", 999_999)+".", "more than the limit of 32 bytes per byte decoded"),
		c("200000 nested lists", strings.Repeat("]", 200_000)+strings.Repeat("a", 199_999)+".", "segments[0] is not a segment dict"),

		// gzip.
		c("gzip bomb", string(gzipBomb(100_000)), "compression bomb"),
		c("gzip truncated", string(gzipMembers("\x80\x02}.")[:12]), "unexpected EOF"),
		c("gzip with a bad checksum", func() string { z := gzipMembers("\x80\x02}(N"); z[len(z)-8] ^= 1; return string(z) }(), "invalid checksum"),
		c("gzip of nothing", string(gzipMembers("")), "gzip file holds no data"),
	}
}

// TestHostileSnapshots reads crafted inputs: each gives its one-line error
// (or a model), never panics, and allocates within the linear bound.
func TestHostileSnapshots(t *testing.T) {
	for _, c := range hostileSnapshots() {
		t.Run(c.name, func(t *testing.T) {
			_, err := checkRead(t, c.data)
			if c.want == "" {
				if err != nil {
					t.Fatalf("want a snapshot, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want an error saying %q, got none", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
		})
	}
}

// TestGzipBombRefusedEarly: a bomb is refused after a few MiB of output,
// whatever its size and whether the size is known, so that what the
// decoder allocates stays bounded by the compressed size.
func TestGzipBombRefusedEarly(t *testing.T) {
	soup := strings.Repeat("]", 1<<20)
	for _, bomb := range [][]byte{gzipBomb(1 << 20), gzipMembers(soup, soup, soup, soup, soup, soup, soup, soup)} {
		for _, size := range []int64{int64(len(bomb)), -1} {
			var err error
			alloc := allocatedBy(func() { _, err = Read(bytes.NewReader(bomb), size) })
			if err == nil || !strings.Contains(err.Error(), "compression bomb") {
				t.Fatalf("got %v", err)
			}
			checkReadError(t, err)
			t.Logf("%d bytes: %v (allocated %d bytes)", len(bomb), err, alloc)
			if limit := readAllocPerByte*(gzipFloor+maxGzipRatio*uint64(len(bomb))) + readAllocSlack; alloc > limit {
				t.Errorf("refusing a %d-byte bomb allocated %d bytes, over %d", len(bomb), alloc, limit)
			}
		}
	}
}

// TestReadMemoryIsLinearInInputSize bounds what Read allocates for N input
// bytes (decompressed, for gzip) by readAllocPerByte*N + readAllocSlack:
// the decoder's bound (see pkg/pickle's TestMemoryIsLinearInInputSize: 64
// bytes of live state per input byte at most, times Go's slice growth)
// plus the model, which is smaller than the values it replaces (a 48-byte
// trace entry per entry dict of 20 or more bytes, 32 bytes per block dict,
// 4 bytes per stack frame). Synthesized big snapshots of every version and
// encoding, real snapshots whole and cut, and the crafted inputs are
// measured; the figures are logged.
func TestReadMemoryIsLinearInInputSize(t *testing.T) {
	type input struct {
		name string
		data []byte
	}
	var inputs []input
	r := rand.New(rand.NewSource(9))
	for _, ver := range []string{"1.13", "2.0", "2.1", "2.10"} {
		sh := snapShape{version: ver, segments: 300, blocks: 20, entries: 30000, devices: 2, depth: 20, stacks: 500}
		tree := synthSnapshot(r, sh)
		for _, st := range []ptStyle{{proto: 2}, {proto: 4}, {proto: 2, cpp: true}} {
			inputs = append(inputs, input{fmt.Sprintf("synthesized %s protocol %d cpp=%v", ver, st.proto, st.cpp), encodeTree(st, tree)})
		}
		if ver != "1.13" {
			inputs = append(inputs, input{"synthesized " + ver + " JSON", treeJSON(tree)})
		}
	}
	for _, f := range realdata.FilesIfPresent() {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Base(f)
		inputs = append(inputs, input{base, data}, input{base + " (first half)", data[:len(data)/2]})
	}
	for _, c := range hostileSnapshots() {
		inputs = append(inputs, input{c.name, c.data})
	}
	for _, soup := range []string{"]", "}", "(", "\x85"} {
		inputs = append(inputs, input{fmt.Sprintf("%q soup", soup), []byte("N" + strings.Repeat(soup, 1<<20) + ".")})
	}
	worst := 0.0
	for _, in := range inputs {
		t.Run(in.name, func(t *testing.T) {
			n := len(in.data)
			if len(in.data) > 2 && in.data[0] == 0x1f {
				n = max(n, int(gunzippedSize(in.data)))
			}
			runtime.GC()
			var err error
			alloc := allocatedBy(func() { _, err = Read(bytes.NewReader(in.data), int64(len(in.data))) })
			if limit := readAllocPerByte*uint64(n) + readAllocSlack; alloc > limit {
				t.Errorf("reading %d bytes allocated %d (%.0f per byte), over the %d-byte bound", n, alloc, float64(alloc)/float64(n), limit)
			}
			ratio := float64(alloc) / float64(n)
			if n >= 1<<20 {
				worst = max(worst, ratio)
			}
			t.Logf("%9d bytes: %6.1f allocated per byte (%v)", n, ratio, err)
		})
	}
	t.Logf("worst: %.1f bytes allocated per input byte (bound %d)", worst, readAllocPerByte)
}

// TestReadWorkIsLinear doubles snapshots (trace entries, segments, frames
// sharing one long name, repeated annotation references) and checks that
// the bytes allocated grow like the input, within 1.6x per doubling.
func TestReadWorkIsLinear(t *testing.T) {
	inputs := map[string]func(k int) []byte{
		"trace entries": func(k int) []byte {
			sh := snapShape{version: "2.10", segments: 20, blocks: 10, entries: 2000 * k, devices: 1, depth: 20, stacks: 200}
			return encodeTree(ptStyle{proto: 4}, synthSnapshot(rand.New(rand.NewSource(1)), sh))
		},
		"segments": func(k int) []byte {
			sh := snapShape{version: "2.1", segments: 50 * k, blocks: 10, entries: 10, devices: 1, depth: 5, stacks: 100}
			return encodeTree(ptStyle{proto: 2, cpp: true}, synthSnapshot(rand.New(rand.NewSource(1)), sh))
		},
		"frames": func(k int) []byte { return []byte(framesSharingALongName(1000*k, 1<<20)) },
	}
	for name, gen := range inputs {
		t.Run(name, func(t *testing.T) {
			var prevAlloc uint64
			prevLen := 0
			for k := 1; k <= 16; k *= 2 {
				data := gen(k)
				runtime.GC()
				var err error
				alloc := allocatedBy(func() { _, err = Read(bytes.NewReader(data), int64(len(data))) })
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("k=%2d: %9d bytes in, %10d allocated", k, len(data), alloc)
				if prevLen > 0 {
					grow := float64(len(data)) / float64(prevLen)
					if r := float64(alloc) / float64(prevAlloc); r > 1.6*grow {
						t.Errorf("k=%d: input grew %.2fx, bytes allocated %.2fx", k, grow, r)
					}
				}
				prevAlloc, prevLen = alloc, len(data)
			}
		})
	}
}

// TestCompactorErrorsStopJSONToo: a compactor error from the JSON reader
// is one line and stops the read.
func TestCompactorErrorsStopJSONToo(t *testing.T) {
	_, err := Read(strings.NewReader(`{"segments": [{"blocks": [{"state": "weird", "size": 1}]}]}`), -1)
	if err == nil || !strings.Contains(err.Error(), `unknown state "weird"`) {
		t.Fatalf("got %v", err)
	}
	var pe *pickle.Error
	if errors.As(err, &pe) {
		t.Fatalf("JSON error wrapped as a pickle error: %v", err)
	}
}
