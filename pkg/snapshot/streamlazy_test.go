package snapshot

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
)

// streamRows streams path with the lazy reading on or off and returns the
// entries handed on as text (device, index, fields, context, frames),
// the end's model and the error; lazy reports whether the lazy reading
// took the file.
func streamRows(t *testing.T, path string, on bool, piece int64) (rows, model string, err error, lazy bool) {
	rows, model, err, lazy, _ = streamRowsPieces(t, path, on, piece)
	return
}

// streamRowsPieces is streamRows that says how many pieces the skim
// joined too.
func streamRowsPieces(t *testing.T, path string, on bool, piece int64) (rows, model string, err error, lazy bool, pieces int) {
	t.Helper()
	oldOff, oldMin, oldStats, oldPiece := lazyStreamOff, lazyStreamMin, lazyStats, lazySkimPiece
	defer func() { lazyStreamOff, lazyStreamMin, lazyStats, lazySkimPiece = oldOff, oldMin, oldStats, oldPiece }()
	lazyStreamOff, lazyStreamMin, lazySkimPiece = !on, 0, piece
	lazyStats = func(_, p int) { lazy, pieces = true, p }
	var b strings.Builder
	st, err := Stream(path, func(e *StreamedEntry) error {
		// Stack ids are the decoder's own (the lazy one meets the stacks
		// in another order): the frames are what the entries say.
		ent := e.Entry
		ent.Stack = 0
		fmt.Fprintf(&b, "%d %d %+v %+v %v", e.Device, e.Index, ent, e.Context, e.Entry.Stack == NoStack)
		for _, f := range e.Stacks.Frames(e.Entry.Stack) {
			fmt.Fprintf(&b, " %s:%d:%s", f.Filename, f.Line, f.Name)
		}
		b.WriteByte('\n')
		return nil
	})
	if err == nil {
		// Frame ids are the builder's own too: drop them.
		model = fmt.Sprintf("%v %s", st.Entries, frameID.ReplaceAllString(modelSummary(t, st.Snapshot), " $1"))
	}
	return b.String(), model, err, lazy, pieces
}

// frameID matches a frame of modelSummary: its id, then its name's and
// file's lengths and its line.
var frameID = regexp.MustCompile(` \d+:(\d+:\d+:-?\d+)`)

// checkLazyStream: the lazy reading of path hands on the entries the
// ordinary one does, in order, and ends with the same model; or both
// fail. It reports whether the lazy reading took the file.
func checkLazyStream(t *testing.T, path string) (took bool) {
	took, _ = checkLazyStreamPieces(t, path)
	return took
}

// checkLazyStreamPieces is checkLazyStream that says whether the skim in
// pieces of a frame joined some.
func checkLazyStreamPieces(t *testing.T, path string) (took, split bool) {
	t.Helper()
	want, wantModel, wantErr, _ := streamRows(t, path, false, 0)
	// The skim in pieces of its default size, and of a frame each.
	for _, piece := range []int64{0, 1} {
		got, gotModel, gotErr, lazy, pieces := streamRowsPieces(t, path, true, piece)
		split = split || pieces > 0
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("%s: the ordinary reading says %v, the lazy one (pieces %d) %v", path, wantErr, piece, gotErr)
		}
		if wantErr != nil {
			if gotErr.Error() != wantErr.Error() && !lazy {
				t.Fatalf("%s: errors differ without the lazy reading:\n%v\n%v", path, wantErr, gotErr)
			}
			took = took || lazy
			continue
		}
		if got != want {
			t.Fatalf("%s: the lazy reading (pieces %d) hands on other entries:\n%s\nordinary:\n%s", path, piece, got, want)
		}
		if gotModel != wantModel {
			t.Fatalf("%s: the lazy reading (pieces %d) ends with another model:\n%s\nordinary:\n%s", path, piece, gotModel, wantModel)
		}
		took = took || lazy
	}
	return took, split
}

// TestStreamLazyMatches: the lazy reading (a skim of the segments, the
// objects the trace refers to decoded on demand) hands on the same
// entries and ends with the same snapshot as the ordinary one, on every
// published snapshot, the synthesized snapshots of every version and
// encoding, and snapshots gen_snapshot.py makes; and it takes the files
// that write their segments first.
func TestStreamLazyMatches(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for _, s := range seedSnapshots() {
		fn := filepath.Join(dir, s.name+".pickle")
		if err := os.WriteFile(fn, s.data, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, fn)
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Log("skipping gen_snapshot.py's snapshots: no python3")
	} else if tool := filepath.Join(filepath.Join("..", "..", "..", "shared"), "tools", "gen_snapshot.py"); fileExists(tool) {
		for _, mode := range []string{"torch", "fresh", "py20"} {
			for _, proto := range []string{"2", "4"} {
				fn := filepath.Join(dir, "gen-"+mode+"-p"+proto+".pickle")
				out, err := exec.Command("python3", tool, "--mode", mode, "--entries", "3000", "--segments", "40",
					"--depth", "8", "--protocol", proto, fn).CombinedOutput()
				if err != nil {
					t.Fatalf("gen_snapshot.py: %v\n%s", err, out)
				}
				files = append(files, fn)
			}
		}
	} else {
		t.Log("skipping gen_snapshot.py's snapshots: no ../shared/tools")
	}
	files = append(files, realdata.FilesIfPresent()...)
	if len(realdata.FilesIfPresent()) == 0 {
		t.Log("skipping the published snapshots: ../shared/testdata/real is absent")
	}
	took, split := 0, 0
	for _, fn := range files {
		lazy, pieces := checkLazyStreamPieces(t, fn)
		if lazy {
			took++
		}
		if pieces {
			split++
		}
	}
	if split < took/5 {
		t.Fatalf("the skim in pieces of a frame joined some in %d of the %d files the lazy reading took", split, took)
	}
	t.Logf("the skim in pieces of a frame joined some in %d of %d files", split, took)
	if took < len(files)/3 {
		t.Fatalf("the lazy reading took %d of %d files", took, len(files))
	}
	t.Logf("the lazy reading took %d of %d files", took, len(files))
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// FuzzStreamLazy: on any input, the lazy reading hands on the entries the
// ordinary reading does and ends with the same model, or both fail.
//
//	go test -run='^$' -fuzz='^FuzzStreamLazy$' -fuzztime=30s ./pkg/snapshot
func FuzzStreamLazy(f *testing.F) {
	addSnapshotSeeds(f)
	for _, c := range lazyHostile() {
		f.Add(c.data)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		fn := filepath.Join(dir, "in.pickle")
		if err := os.WriteFile(fn, data, 0o644); err != nil {
			t.Fatal(err)
		}
		checkLazyStream(t, fn)
	})
}

// lazyPickle builds a protocol-4 pickle for the lazy reading's cases,
// counting its memo stores.
type lazyPickle struct {
	b strings.Builder
	n int
}

func (p *lazyPickle) op(s string) *lazyPickle { p.b.WriteString(s); return p }

// memo stores the top and returns its index.
func (p *lazyPickle) memo() int { p.b.WriteByte(0x94); p.n++; return p.n - 1 }

func (p *lazyPickle) str(s string) int { p.op(sbu(s)); return p.memo() }

func (p *lazyPickle) get(i int) *lazyPickle {
	return p.op(string([]byte{'j', byte(i), byte(i >> 8), byte(i >> 16), byte(i >> 24)}))
}

// frame writes a memoized frame dict and returns its index.
func (p *lazyPickle) frame(name string, line int) int {
	p.op("}")
	i := p.memo()
	p.op("(")
	p.str("name")
	p.str(name)
	p.str("filename")
	p.str("a.py")
	p.str("line")
	p.op(binInt(line)).op("u")
	return i
}

// entry writes an alloc entry whose frames are the memo's objects refs.
func (p *lazyPickle) entry(addr int, refs ...int) {
	p.op("}")
	p.memo()
	p.op("(")
	p.str("action")
	p.str("alloc")
	p.str("addr")
	p.op(binInt(addr))
	p.str("size")
	p.op(binInt(512))
	p.str("frames")
	p.op("]")
	p.memo()
	if len(refs) > 0 {
		p.op("(")
		for _, r := range refs {
			p.get(r)
		}
		p.op("e")
	}
	p.op("u")
}

type lazyCase struct {
	name string
	data []byte
}

// lazyHostile are pickles that take the lazy reading's paths: frames
// defined before the trace (an unknown top-level key, which the model
// ignores) and referred to from it, a chain of references deeper than
// the lazy decoding goes, a reference to an object still being built,
// a list that holds itself, an object changed after it was complete.
func lazyHostile() []lazyCase {
	var out []lazyCase
	build := func(name string, defs func(p *lazyPickle) []int, tail string) {
		p := &lazyPickle{}
		p.op("\x80\x04}")
		p.memo()
		p.op("(")
		p.str("segments")
		p.op("]")
		p.memo()
		p.str("x_frames")
		p.op("]")
		p.memo()
		p.op("(")
		refs := defs(p)
		p.op("e")
		p.str("device_traces")
		p.op("]")
		p.memo()
		p.op("(]")
		p.memo()
		p.op("(")
		for i := range refs {
			p.entry(4096*(i+1), refs[i:]...)
		}
		p.op("ee")
		p.op(tail)
		p.op("u.")
		out = append(out, lazyCase{name, []byte(p.b.String())})
	}
	build("frames before the trace", func(p *lazyPickle) []int {
		return []int{p.frame("f", 1), p.frame("g", 2), p.frame("h", 3)}
	}, "")
	build("a chain of 40 references", func(p *lazyPickle) []int {
		prev := p.str("s")
		for range 40 {
			p.op("(").get(prev).op("t")
			prev = p.memo()
		}
		p.op("}")
		i := p.memo()
		p.op("(")
		p.str("name")
		p.str("deep")
		p.str("filename")
		p.str("b.py")
		p.str("line")
		p.op(binInt(9))
		p.str("chain")
		p.get(prev)
		p.op("u")
		return []int{p.frame("f", 1), i}
	}, "")
	build("a reference to the dict being built", func(p *lazyPickle) []int {
		return []int{0}
	}, "")
	build("a list that holds itself", func(p *lazyPickle) []int {
		p.op("]")
		i := p.memo()
		p.op("(").get(i).op("e")
		return []int{p.frame("f", 1), i}
	}, "")
	build("a list changed after it was complete", func(p *lazyPickle) []int {
		p.op("]")
		i := p.memo()
		f := p.frame("f", 1)
		p.op("a")
		p.get(i)
		p.get(f)
		p.op("a0")
		return []int{f}
	}, "")
	build("400 nested lists referred to innermost first", func(p *lazyPickle) []int {
		// Each reference would decode all the lists inside it again.
		var idx []int
		for range 400 {
			p.op("]")
			idx = append(idx, p.memo())
			p.op("(")
		}
		f := p.frame("f", 1)
		for range 400 {
			p.op("e")
		}
		p.op("0")
		slices.Reverse(idx)
		return append([]int{f}, idx...)
	}, "")
	build("a frame referred to after the trace", func(p *lazyPickle) []int {
		return []int{p.frame("f", 1)}
	}, sbu("x_after")+"j\x03\x00\x00\x00")
	// Truncated in the trace, and a bad opcode there.
	whole := out[0].data
	out = append(out, lazyCase{"truncated in the trace", whole[:len(whole)-20]})
	bad := append([]byte(nil), whole...)
	bad[len(bad)-30] = 0xff
	out = append(out, lazyCase{"a bad opcode in the trace", bad})
	return out
}

// TestStreamLazyHostile: the crafted cases read the same with the lazy
// reading on and off, the first ones without error.
func TestStreamLazyHostile(t *testing.T) {
	dir := t.TempDir()
	for i, c := range lazyHostile() {
		fn := filepath.Join(dir, fmt.Sprintf("case%d.pickle", i))
		if err := os.WriteFile(fn, c.data, 0o644); err != nil {
			t.Fatal(err)
		}
		rows, _, err, lazy := streamRows(t, fn, true, 1)
		t.Logf("%s: lazy %v, %d rows, error %v", c.name, lazy, strings.Count(rows, "\n"), err)
		if i < 2 && (err != nil || !lazy || strings.Count(rows, "\n") == 0) {
			t.Fatalf("%s: lazy %v, rows %q, error %v", c.name, lazy, rows, err)
		}
		checkLazyStream(t, fn)
	}
}
