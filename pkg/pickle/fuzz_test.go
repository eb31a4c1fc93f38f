package pickle

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/chunkread"
	"github.com/memstat/memstat/internal/realdata"
)

// FuzzDecode decodes arbitrary bytes twice, from memory (Loads) and
// streamed through a reader that hands out small chunks of random size,
// and checks that neither panics, that both agree on success or failure,
// on the error text and on every value they stored, that errors are one
// short line of type *Error, and that the bytes allocated stay within the
// linear bound of TestMemoryIsLinearInInputSize; then with a compactor,
// that the flat-dict path changes nothing it sees (checkFlatDicts).
//
// Run it with
//
//	go test -run='^$' -fuzz='^FuzzDecode$' -fuzztime=30s ./pkg/pickle
//
// Seeds: testdata/fuzz/FuzzDecode (small synthesized pickles and short
// prefixes of real snapshots), every crafted hostile input of
// hostile_test.go, random valid programs, and when ../shared/testdata/real
// is present, prefixes of every real snapshot and the smallest ones whole.
func FuzzDecode(f *testing.F) {
	for _, c := range hostileCases() {
		if len(c.data) <= 4096 {
			f.Add(c.data)
		}
	}
	r := rand.New(rand.NewSource(1))
	for i := range 40 {
		f.Add(genProgram(r, 16<<(i%6), i%2 == 0))
	}
	for _, file := range realdata.FilesIfPresent() {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, n := range []int{64, 512, 4096} {
			f.Add(data[:min(n, len(data))])
		}
		if len(data) <= 16<<10 {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
		checkFlatDicts(t, "input", data)
	})
}

// Memory bound of every decode: allocBytesPerInputByte bytes allocated
// (runtime TotalAlloc, garbage included) per input byte, plus
// allocSlackBytes. TestMemoryIsLinearInInputSize explains the figures.
const (
	allocBytesPerInputByte = 512
	allocSlackBytes        = 1 << 20
	maxErrorLen            = 400
)

// allocatedBy returns the bytes f allocated on the heap (TotalAlloc, which
// counts garbage too, so it bounds the work of the garbage collector as well
// as the peak heap).
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// checkDecode is the property FuzzDecode checks for one input; it returns
// the error of the in-memory decode.
func checkDecode(t *testing.T, data []byte) error {
	t.Helper()
	var (
		v1, v2     Value
		vs1        *Values
		d          *Decoder
		err1, err2 error
	)
	alloc := allocatedBy(func() {
		v1, vs1, err1 = Loads(data)
		d = NewDecoder(chunkread.New(data), nil, nil)
		v2, err2 = d.Decode()
	})
	if limit := 2*allocBytesPerInputByte*uint64(len(data)) + allocSlackBytes; alloc > limit {
		t.Errorf("decoding %d bytes allocated %d bytes, over the %d-byte bound", len(data), alloc, limit)
	}
	if (err1 == nil) != (err2 == nil) {
		t.Fatalf("in-memory and streamed decodes disagree:\n  memory: %v\nstreamed: %v", err1, err2)
	}
	if err1 != nil {
		checkErrorText(t, err1)
		if err1.Error() != err2.Error() {
			t.Fatalf("in-memory and streamed errors differ:\n  memory: %v\nstreamed: %v", err1, err2)
		}
		return err1
	}
	if v1 != v2 || !reflect.DeepEqual(vs1, d.Values()) {
		t.Fatalf("in-memory and streamed decodes stored different values (%v, %v)", v1, v2)
	}
	if d.Offset() > int64(len(data)) {
		t.Fatalf("decoder offset %d is past the %d-byte input", d.Offset(), len(data))
	}
	return nil
}

// checkErrorText checks that a decoding error is a *Error whose message is
// one short line.
func checkErrorText(t *testing.T, err error) {
	t.Helper()
	var pe *Error
	if !errors.As(err, &pe) {
		t.Errorf("error %q (%T) is not a *pickle.Error", err, err)
	}
	msg := err.Error()
	if strings.ContainsAny(msg, "\n\r") {
		t.Errorf("error is not one line: %q", msg)
	}
	if len(msg) > maxErrorLen {
		t.Errorf("error is %d bytes long, over %d: %.200q...", len(msg), maxErrorLen, msg)
	}
	if !strings.HasPrefix(msg, "pickle: ") {
		t.Errorf("error does not start with \"pickle: \": %q", msg)
	}
}

// TestRandomProgramsAgreeWithCPython decodes random valid pickles (every
// data opcode, memo gaps, no-op noise; see progGen) with this package and
// with CPython's C unpickler (testdata/canon.py) and compares the values.
func TestRandomProgramsAgreeWithCPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH; skipping the CPython differential test")
	}
	dir := t.TempDir()
	r := rand.New(rand.NewSource(11))
	const n = 400
	var want []string
	for i := range n {
		data := genProgram(r, 32<<(i%9), true)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%04d.pickle", i)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		v, vs, err := Loads(data)
		if err != nil {
			t.Fatalf("program %d: %v", i, err)
		}
		want = append(want, Digest(vs, v))
	}
	const script = `
import glob, sys
sys.path.insert(0, "testdata")
import canon
for f in sorted(glob.glob(sys.argv[1] + "/*.pickle")):
    try:
        with open(f, "rb") as fh:
            print(canon.digest(canon.NoGlobals(fh).load(), {}))
    except Exception as e:
        print("ERR %s: %s" % (type(e).__name__, e))
`
	out, err := exec.Command(py, "-c", script, dir).Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	got := strings.Fields(strings.ReplaceAll(string(out), "ERR ", "ERR_"))
	if len(got) != n {
		t.Fatalf("python printed %d digests for %d programs:\n%s", len(got), n, out)
	}
	for i := range n {
		if got[i] != want[i] {
			data, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%04d.pickle", i)))
			t.Errorf("program %d (%d bytes) decodes differently from CPython (%s): %.200q", i, len(data), got[i], data)
		}
	}
}

// TestWriteFuzzSeeds writes the committed seed corpus (small random valid
// programs and 1 KiB prefixes of a few real snapshots) when
// MEMSTAT_WRITE_FUZZ_SEEDS is set.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("MEMSTAT_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set MEMSTAT_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz/FuzzDecode")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) {
		if len(data) > 4096 {
			t.Fatalf("seed %s is %d bytes, over 4 KiB", name, len(data))
		}
		text := "go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := rand.New(rand.NewSource(2))
	for i := 0; i < 12; {
		p := genProgram(r, 64<<(i%5), i%2 == 0)
		if len(p) < 32 || len(p) > 4096 {
			continue
		}
		write(fmt.Sprintf("program-%02d", i), p)
		i++
	}
	for _, f := range realdata.FilesIfPresent() {
		base := filepath.Base(f)
		if strings.Contains(base, "nishi951") || strings.Contains(base, "Yiyi") || strings.Contains(base, "drisspg") {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			write("real-prefix-"+strings.SplitN(base, "__", 2)[0], data[:1024])
		}
	}
}

// progGen writes random pickles that are valid and that CPython reads to
// the same value as this package: every data opcode of protocols 0-5 in
// every encoding, explicit memo indices with small gaps, MEMOIZE after
// gaps, memo references to finished values (so the value graph is a DAG,
// never a cycle), and no-op noise (DUP POP, MARK POP_MARK, MARK POP, FRAME
// hints). Dict keys and set items are fresh, distinct and hashable, since
// CPython merges duplicates where the Values store keeps both.
type progGen struct {
	r    *rand.Rand
	b    []byte
	size int // stop growing containers past this many bytes
	// cpython keeps to what CPython's C unpickler reads: FRAME lengths
	// that the data after them covers.
	cpython bool
	// memo slots: what CPython's memo holds at each index.
	memo    []memoSlot
	memoLen int // defined slots: the index CPython's MEMOIZE uses
	fresh   int // counter for unique keys
	owner   int // container ids, to mark memo slots finished
	slotsOf map[int][]int
}

type memoSlot struct {
	defined  bool
	finished bool // safe to reference: not a container still being built
	hashable bool
	owner    int
}

// genProgram returns a random valid pickle of about size bytes (at least
// a few dozen); cpython restricts it to what CPython reads identically.
func genProgram(r *rand.Rand, size int, cpython bool) []byte {
	g := &progGen{r: r, size: size, cpython: cpython, slotsOf: map[int][]int{}}
	if r.Intn(4) != 0 {
		g.op(opProto, byte(r.Intn(6)))
	}
	g.noise()
	if r.Intn(8) == 0 {
		g.value(0)
	} else {
		g.list(0)
	}
	g.noise()
	g.op(opStop)
	return g.b
}

func (g *progGen) op(b ...byte)      { g.b = append(g.b, b...) }
func (g *progGen) raw(s string)      { g.b = append(g.b, s...) }
func (g *progGen) full() bool        { return len(g.b) >= g.size }
func (g *progGen) chance(n int) bool { return g.r.Intn(n) == 0 }
func (g *progGen) u32(op byte, v uint32) {
	g.op(op)
	g.b = binary.LittleEndian.AppendUint32(g.b, v)
}
func (g *progGen) u64(op byte, v uint64) {
	g.op(op)
	g.b = binary.LittleEndian.AppendUint64(g.b, v)
}

// noise emits opcodes with no net effect on the stack.
func (g *progGen) noise() {
	for g.chance(3) {
		switch g.r.Intn(6) {
		case 0:
			g.op(opMark, opPopMark)
		case 1:
			g.op(opMark, opPop) // POP right after MARK drops the mark
		case 2:
			g.op(opNone, opDup, opPop, opPop)
		case 3:
			// A framing hint. CPython wants the claimed bytes to exist
			// (a STOP always follows); this decoder ignores the length.
			n := uint64(g.r.Intn(2))
			if !g.cpython {
				n = g.r.Uint64() >> uint(g.r.Intn(64))
			}
			g.u64(opFrame, n)
		case 4:
			g.op(opMark)
			g.scalar()
			g.op(opPopMark)
		case 5:
			g.scalar()
			g.op(opPop)
		}
	}
}

// memoize stores the top of the stack under a memo index, in one of the
// four encodings, possibly leaving a gap or overwriting an index.
func (g *progGen) memoize(owner int, finished, hashable bool) {
	var idx int
	switch g.r.Intn(4) {
	case 0:
		idx = g.memoLen
		g.op(opMemoize)
	default:
		switch {
		case g.chance(8) && len(g.memo) > 0:
			idx = g.r.Intn(len(g.memo)) // overwrite
		case g.chance(6):
			idx = len(g.memo) + g.r.Intn(maxMemoGap+1) // a gap
		default:
			idx = len(g.memo)
		}
		switch {
		case idx < 256 && g.chance(2):
			g.op(opBinPut, byte(idx))
		case g.chance(2):
			g.u32(opLongBinPut, uint32(idx))
		default:
			g.raw("p" + strconv.Itoa(idx) + "\n")
		}
	}
	for len(g.memo) <= idx {
		g.memo = append(g.memo, memoSlot{})
	}
	if !g.memo[idx].defined {
		g.memoLen++
	}
	g.memo[idx] = memoSlot{defined: true, finished: finished, hashable: hashable, owner: owner}
	if !finished {
		g.slotsOf[owner] = append(g.slotsOf[owner], idx)
	}
}

// finish marks the memo slots of a finished container safe to reference.
func (g *progGen) finish(owner int, hashable bool) {
	for _, i := range g.slotsOf[owner] {
		if g.memo[i].owner == owner {
			g.memo[i].finished, g.memo[i].hashable = true, hashable
		}
	}
	delete(g.slotsOf, owner)
}

// memoRef pushes a finished memo entry (hashable if asked); false if none.
func (g *progGen) memoRef(hashable bool) bool {
	if len(g.memo) == 0 {
		return false
	}
	for try := 0; try < 4; try++ {
		i := g.r.Intn(len(g.memo))
		s := g.memo[i]
		if !s.defined || !s.finished || (hashable && !s.hashable) {
			continue
		}
		switch {
		case i < 256 && g.chance(2):
			g.op(opBinGet, byte(i))
		case g.chance(2):
			g.u32(opLongBinGet, uint32(i))
		default:
			g.raw("g" + strconv.Itoa(i) + "\n")
		}
		return true
	}
	return false
}

// value pushes one value; it reports whether the value is hashable.
func (g *progGen) value(depth int) bool {
	g.noise()
	if g.chance(6) && g.memoRef(false) {
		return false // a reference: hashability not tracked
	}
	if depth > 8 || (g.full() && depth > 0) || g.chance(3) {
		h := g.scalar()
		if g.chance(5) {
			g.memoize(-1, true, h)
		}
		return h
	}
	switch g.r.Intn(9) {
	case 0, 1, 2:
		return g.list(depth)
	case 3, 4:
		return g.dict(depth)
	case 5, 6:
		return g.tuple(depth)
	case 7:
		return g.set(depth)
	default:
		return g.scalar()
	}
}

func (g *progGen) newOwner() int { g.owner++; return g.owner }

// items pushes n values and reports whether all are hashable.
func (g *progGen) items(depth, n int) bool {
	h := true
	for range n {
		if !g.value(depth + 1) {
			h = false
		}
	}
	return h
}

func (g *progGen) count() int {
	if g.full() {
		return g.r.Intn(2)
	}
	if g.chance(20) {
		return g.r.Intn(2000) // more than one APPENDS batch
	}
	return g.r.Intn(6)
}

func (g *progGen) list(depth int) bool {
	id := g.newOwner()
	if g.chance(4) {
		g.op(opMark)
		g.items(depth, g.count())
		g.op(opList)
		if g.chance(3) {
			g.memoize(id, true, false)
		}
		return false
	}
	g.op(opEmptyList)
	if g.chance(2) {
		g.memoize(id, false, false)
	}
	for batches := g.r.Intn(4); batches > 0; batches-- {
		if g.chance(2) {
			g.value(depth + 1)
			g.op(opAppend)
			continue
		}
		g.op(opMark)
		g.items(depth, g.count())
		g.op(opAppends)
	}
	for !g.full() && depth == 0 {
		g.op(opMark)
		g.items(depth, 1+g.r.Intn(1000))
		g.op(opAppends)
	}
	g.finish(id, false)
	return false
}

// key pushes a fresh hashable scalar no other key of the dict has.
func (g *progGen) key() {
	g.fresh++
	switch g.r.Intn(4) {
	case 0:
		// distinct for distinct counters below 2^20
		g.int(int64(g.fresh) * []int64{1, -1, 1 << 20, -1 << 40}[g.r.Intn(4)])
	case 1:
		g.str(fmt.Sprintf("k%d", g.fresh))
	case 2:
		g.str(fmt.Sprintf("%s#%d", g.text(), g.fresh)) // text has no '#'

	default:
		g.op(opMark)
		g.int(int64(g.fresh))
		g.str("t")
		g.op(opTuple) // a tuple key
	}
}

func (g *progGen) pairs(depth, n int) {
	for range n {
		g.key()
		g.value(depth + 1)
	}
}

func (g *progGen) dict(depth int) bool {
	id := g.newOwner()
	if g.chance(4) {
		g.op(opMark)
		g.pairs(depth, g.count())
		g.op(opDict)
		if g.chance(3) {
			g.memoize(id, true, false)
		}
		return false
	}
	g.op(opEmptyDict)
	if g.chance(2) {
		g.memoize(id, false, false)
	}
	for batches := g.r.Intn(4); batches > 0; batches-- {
		if g.chance(2) {
			g.pairs(depth, 1)
			g.op(opSetItem)
			continue
		}
		g.op(opMark)
		g.pairs(depth, g.count())
		g.op(opSetItems)
	}
	g.finish(id, false)
	return false
}

func (g *progGen) tuple(depth int) bool {
	id := g.newOwner()
	var h bool
	switch n := g.r.Intn(5); n {
	case 0:
		g.op(opEmptyTuple)
		h = true
	case 1, 2, 3:
		h = g.items(depth, n)
		g.op(opTuple1 + byte(n-1))
	default:
		g.op(opMark)
		h = g.items(depth, g.count())
		g.op(opTuple)
	}
	if g.chance(3) {
		g.memoize(id, true, h)
	}
	return h
}

func (g *progGen) set(depth int) bool {
	id := g.newOwner()
	members := func(n int) {
		for range n {
			g.key()
		}
	}
	if g.chance(3) {
		g.op(opMark)
		members(g.count())
		g.op(opFrozenSet)
		if g.chance(3) {
			g.memoize(id, true, true)
		}
		return true
	}
	g.op(opEmptySet)
	if g.chance(2) {
		g.memoize(id, false, false)
	}
	for batches := g.r.Intn(3); batches > 0; batches-- {
		g.op(opMark)
		members(g.count())
		g.op(opAddItems)
	}
	g.finish(id, false)
	return false
}

func (g *progGen) text() string {
	const alphabet = "abcxyz _-./\\'\"\n\t\x00\x7f"
	runes := []string{"é", "日本", "\U0001F600", "ß"}
	var s []byte
	for n := g.r.Intn(12); n > 0; n-- {
		if g.chance(6) {
			s = append(s, runes[g.r.Intn(len(runes))]...)
		} else {
			s = append(s, alphabet[g.r.Intn(len(alphabet))])
		}
	}
	if g.chance(40) {
		s = append(s, make([]byte, 300)...) // a long string: BINUNICODE
	}
	return string(s)
}

func (g *progGen) ascii() string {
	s := []byte(g.text())
	for i, c := range s {
		if c >= 0x80 {
			s[i] = 'q'
		}
	}
	return string(s)
}

// str pushes a str in one of its encodings.
func (g *progGen) str(s string) {
	switch g.r.Intn(5) {
	case 0:
		if len(s) < 256 {
			g.op(opShortBinUnicode, byte(len(s)))
			g.raw(s)
			return
		}
		fallthrough
	case 1:
		g.u32(opBinUnicode, uint32(len(s)))
		g.raw(s)
	case 2:
		g.u64(opBinUnicode8, uint64(len(s)))
		g.raw(s)
	case 3:
		// raw-unicode-escape: \u escapes for everything outside Latin-1
		// printable text, as CPython writes it.
		var out []byte
		for _, r := range s {
			if r < 0x80 && r != '\\' && r != '\n' && r != '\r' && r != 0 {
				out = append(out, byte(r))
			} else if r <= 0xffff {
				out = fmt.Appendf(out, "\\u%04x", r)
			} else {
				out = fmt.Appendf(out, "\\U%08x", r)
			}
		}
		g.raw("V" + string(out) + "\n")
	default:
		// Python 2 str forms, which Python 3 reads as ASCII str.
		a := []byte(s)
		ok := true
		for _, c := range a {
			if c >= 0x80 {
				ok = false
			}
		}
		if !ok {
			g.u32(opBinUnicode, uint32(len(s)))
			g.raw(s)
			return
		}
		switch g.r.Intn(3) {
		case 0:
			if len(a) < 256 {
				g.op(opShortBinString, byte(len(a)))
				g.raw(s)
				return
			}
			fallthrough
		case 1:
			g.u32(opBinString, uint32(len(a)))
			g.raw(s)
		default:
			g.raw("S" + pyRepr(s) + "\n")
		}
	}
}

// pyRepr writes s as Python 2's repr of a str does.
func pyRepr(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' || c == '\\':
			out = append(out, '\\', c)
		case c == '\n':
			out = append(out, '\\', 'n')
		case c == '\t':
			out = append(out, '\\', 't')
		case c == '\r':
			out = append(out, '\\', 'r')
		case c < 0x20 || c >= 0x7f:
			out = fmt.Appendf(out, "\\x%02x", c)
		default:
			out = append(out, c)
		}
	}
	return string(append(out, '\''))
}

// int pushes an int in one of its encodings.
func (g *progGen) int(v int64) {
	switch {
	case v >= 0 && v < 256 && g.chance(2):
		g.op(opBinInt1, byte(v))
	case v >= 0 && v < 65536 && g.chance(2):
		g.op(opBinInt2, byte(v), byte(v>>8))
	case v == int64(int32(v)) && g.chance(2):
		g.u32(opBinInt, uint32(v))
	case g.chance(3):
		g.raw("I" + strconv.FormatInt(v, 10) + "\n")
	case g.chance(3):
		g.raw("L" + strconv.FormatInt(v, 10) + "L\n")
	default:
		g.long(v, g.chance(2))
	}
}

// long pushes v as LONG1 (or LONG4) in minimal or padded two's complement.
func (g *progGen) long(v int64, four bool) {
	var b [9]byte
	binary.LittleEndian.PutUint64(b[:], uint64(v))
	if v < 0 {
		b[8] = 0xff
	}
	n := 9
	for n > 1 && ((b[n-1] == 0 && b[n-2]&0x80 == 0) || (b[n-1] == 0xff && b[n-2]&0x80 != 0)) {
		n--
	}
	if v == 0 && g.chance(2) {
		n = 0
	}
	if four {
		g.u32(opLong4, uint32(n))
	} else {
		g.op(opLong1, byte(n))
	}
	g.op(b[:n]...)
}

// scalar pushes a random scalar; it reports whether it is hashable.
func (g *progGen) scalar() bool {
	switch g.r.Intn(12) {
	case 0:
		g.op([]byte{opNone, opNewTrue, opNewFalse}[g.r.Intn(3)])
	case 1:
		if g.chance(2) {
			g.raw("I00\n")
		} else {
			g.raw("I01\n")
		}
	case 2, 3:
		v := g.r.Int63() >> uint(g.r.Intn(63))
		if g.chance(2) {
			v = -v
		}
		g.int(v)
	case 4:
		// A big int: LONG1/LONG4 past 8 bytes, or text.
		n := 9 + g.r.Intn(30)
		buf := make([]byte, n)
		g.r.Read(buf)
		if g.chance(3) {
			g.u32(opLong4, uint32(n))
		} else {
			g.op(opLong1, byte(n))
		}
		g.op(buf...)
	case 5:
		f := []float64{0, math.Copysign(0, -1), 1.5, -2.25, 1e300, math.Inf(1), math.Inf(-1), g.r.NormFloat64()}[g.r.Intn(8)]
		if g.chance(2) {
			g.op(opBinFloat)
			g.b = binary.BigEndian.AppendUint64(g.b, math.Float64bits(f))
		} else {
			g.raw("F" + strconv.FormatFloat(f, 'g', -1, 64) + "\n")
		}
	case 6, 7, 8:
		g.str(g.text())
	case 9:
		s := g.text()
		switch g.r.Intn(3) {
		case 0:
			if len(s) < 256 {
				g.op(opShortBinBytes, byte(len(s)))
				g.raw(s)
				break
			}
			fallthrough
		case 1:
			g.u32(opBinBytes, uint32(len(s)))
			g.raw(s)
		default:
			g.u64(opBinBytes8, uint64(len(s)))
			g.raw(s)
		}
	case 10:
		s := g.text()
		g.u64(opByteArray8, uint64(len(s)))
		g.raw(s)
		return false
	default:
		g.str(g.ascii())
	}
	return true
}
