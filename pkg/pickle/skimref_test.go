package pickle

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand"
	"os"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
)

// runRef is the skim's walk as it was before run kept its stack in
// registers and walked runs of memo references in a loop of their own
// (one opcode a turn, every slot through the methods): the oracle run is
// held to.
func (s *skimmer) runRef() (*Skim, error) {
	// buf and pos are s.buf and s.pos, kept in registers; s.pos is
	// written back before anything that reads it.
	buf, pos := s.buf, s.pos
	for {
		if len(buf)-pos < 16 {
			s.pos = pos
			if ok, err := s.fill(16); err != nil {
				return nil, err
			} else if !ok {
				if ok, err = s.fill(1); err != nil || !ok {
					if err == nil {
						err = ErrSkim
					}
					return nil, err
				}
			}
			buf, pos = s.buf, s.pos
			if s.base+int64(pos) >= math.MaxUint32-(1<<20) {
				return nil, ErrSkim
			}
			if len(buf)-pos < 16 {
				// The input's last bytes: pad them so that every
				// fixed-size argument reads within buf (a real end of
				// the input ends the walk: no STOP, no key).
				return nil, ErrSkim
			}
		}
		at := uint32(s.base + int64(pos))
		op := buf[pos]
		switch op {
		case opBinGet:
			if uint64(buf[pos+1]) >= uint64(s.span.count()) && !s.storedBefore(uint64(buf[pos+1])) {
				return nil, ErrSkim
			}
			s.stack = append(s.stack, skimSlot{start: at, info: slotGot})
			pos += 2
		case opLongBinGet:
			if i := uint64(binary.LittleEndian.Uint32(buf[pos+1:])); i >= uint64(s.span.count()) && !s.storedBefore(i) {
				return nil, ErrSkim
			}
			s.stack = append(s.stack, skimSlot{start: at, info: slotGot})
			pos += 5
		case opMemoize:
			pos++
			if !s.memoize(at + 1) {
				return nil, ErrSkim
			}
		case opBinPut, opLongBinPut:
			i := uint64(buf[pos+1])
			pos += 2
			if op == opLongBinPut {
				i = uint64(binary.LittleEndian.Uint32(buf[pos-1:]))
				pos += 3
			}
			if i != uint64(s.span.count()) || s.piece != nil || !s.memoize(uint32(s.base+int64(pos))) {
				return nil, ErrSkim
			}
		case opMark:
			s.marks = append(s.marks, skimMark{at: len(s.stack), start: at})
			pos++
		case opEmptyDict:
			s.stack = append(s.stack, skimSlot{start: at, info: slotDict})
			pos++
		case opEmptyList:
			s.stack = append(s.stack, skimSlot{start: at, info: slotList})
			pos++
		case opNone, opNewTrue, opNewFalse, opEmptyTuple:
			s.stack = append(s.stack, skimSlot{start: at})
			pos++
		case opBinInt1, opBinInt2, opBinInt, opBinFloat:
			n := uint32(2)
			switch op {
			case opBinInt2:
				n = 3
			case opBinInt:
				n = 5
			case opBinFloat:
				n = 9
			}
			s.stack = append(s.stack, skimSlot{start: at})
			pos += int(n)
		case opFrame:
			if int64(at) >= s.limit {
				s.pos, s.stopped = pos, int64(at)
				return nil, errSkimLimit
			}
			if s.piece != nil && s.piece.cancelled() {
				return nil, errSkimCancel
			}
			pos += 9
		case opAppend, opSetItem:
			pos++
			n, k := 1, slotList
			if op == opSetItem {
				n, k = 2, slotDict
			}
			if !s.pop(n) || !s.target(k, at+1) {
				return nil, ErrSkim
			}
		case opAppends, opSetItems:
			pos++
			k := slotList
			if op == opSetItems {
				k = slotDict
				if len(s.marks) == 0 && s.piece != nil {
					// The mark is before the piece.
					s.piece.log = append(s.piece.log, skimLogOp{op: logParity, n: uint32(len(s.stack))})
				} else if len(s.marks) == 0 || (len(s.stack)-s.marks[len(s.marks)-1].at)%2 != 0 {
					return nil, ErrSkim
				}
			}
			if _, ok := s.popMark(); !ok || !s.target(k, at+1) {
				return nil, ErrSkim
			}
		case opShortBinUnicode, opBinUnicode, opBinUnicode8, opLong1, opLong4,
			opShortBinBytes, opBinBytes, opBinBytes8, opShortBinString, opBinString:
			var n uint64
			w := 1
			switch op {
			case opLong4, opBinUnicode, opBinBytes, opBinString:
				w = 4
				n = uint64(binary.LittleEndian.Uint32(buf[pos+1:]))
			case opBinUnicode8, opBinBytes8:
				w = 8
				n = binary.LittleEndian.Uint64(buf[pos+1:])
			default:
				n = uint64(buf[pos+1])
			}
			pos += 1 + w
			if n == uint64(len(s.key)) && op != opLong1 && op != opLong4 && s.atKey() {
				isStr := op == opShortBinUnicode || op == opBinUnicode || op == opBinUnicode8
				s.pos = pos
				if ok, err := s.fill(int(n)); err != nil {
					return nil, err
				} else if ok && isStr && string(s.buf[s.pos:s.pos+int(n)]) == s.key {
					if s.piece != nil {
						s.stopped = int64(at)
						return nil, errSkimKey
					}
					return s.result(int64(at)), nil
				}
				buf, pos = s.buf, s.pos
			}
			if n <= uint64(len(buf)-pos) {
				pos += int(n)
			} else {
				s.pos = pos
				if ok, err := s.skip(n); err != nil || !ok {
					if err == nil {
						err = ErrSkim
					}
					return nil, err
				}
				buf, pos = s.buf, s.pos
			}
			s.stack = append(s.stack, skimSlot{start: at})
		case opTuple1, opTuple2, opTuple3:
			pos++
			n := int(op-opTuple1) + 1
			if len(s.stack) < n {
				if s.piece == nil || len(s.marks) != 0 {
					return nil, ErrSkim
				}
				// Its first item is before the piece.
				f := s.piece.fixup()
				s.piece.log = append(s.piece.log, skimLogOp{op: logTuple, n: f, end: uint32(n - len(s.stack))})
				s.stack = append(s.stack[:0], skimSlot{start: f, info: slotFix})
				break
			}
			first := s.stack[len(s.stack)-n]
			if !s.pop(n) {
				return nil, ErrSkim
			}
			s.stack = append(s.stack, skimSlot{start: first.start, info: first.info & slotFix})
		case opTuple, opList, opDict:
			pos++
			m, ok := s.popMark()
			if !ok {
				return nil, ErrSkim
			}
			kind := slotOther
			switch op {
			case opList:
				kind = slotList
			case opDict:
				kind = slotDict
			}
			if m.fix {
				kind |= slotFix
			}
			s.stack = append(s.stack, skimSlot{start: m.start, info: kind})
		case opPop:
			pos++
			if !s.pop(1) {
				return nil, ErrSkim
			}
		case opProto:
			if at != 0 || buf[pos+1] < 2 || buf[pos+1] > 5 {
				return nil, ErrSkim
			}
			s.proto = int(buf[pos+1])
			pos += 2
		default:
			// STOP (no key), objects, text opcodes, sets, DUP, POP_MARK,
			// buffers: decoded from the start.
			return nil, ErrSkim
		}
	}
}

// skimRefAfter is the key's value and the end: the skim stops short of
// the input's last 16 bytes.
const skimRefAfter = "]\x94(K\x01K\x02K\x03K\x04K\x05K\x06K\x07K\x08eu."

// skimRef skims data with runRef, reading it bufSize bytes at a time.
func skimRef(data []byte, key string, bufSize int) (*Skim, error) {
	s := newSkimmer(bytes.NewReader(data), key, 1<<20, bufSize)
	return s.runRef()
}

// checkSkimRef fails the test unless run finds what runRef finds in data,
// read in one buffer and in buffers a little over the 16 bytes an opcode
// needs (a run of memo references then meets the buffer's end).
func checkSkimRef(t testing.TB, name string, data []byte, key string) (found bool) {
	t.Helper()
	for _, bufSize := range []int{skimChunk + 64, 40, 83} {
		want, werr := skimRef(data, key, bufSize)
		s := newSkimmer(bytes.NewReader(data), key, 1<<20, bufSize)
		got, gerr := s.run()
		skimsMatch(t, fmt.Sprintf("%s (buffer %d)", name, bufSize), want, werr, got, gerr)
		found = werr == nil
	}
	return found
}

// TestSkimRunMatchesRef: run walks as runRef did, on the hand-made
// pickles (framed every few opcodes or not), the published snapshots,
// runs of BINGET and LONG_BINGET mixed, one referring past the memo, and
// random programs of every opcode put before the key.
func TestSkimRunMatchesRef(t *testing.T) {
	inputs := map[string][]byte{
		"skimPickle(3)":      skimPickle(3),
		"skimPickle(30_000)": skimPickle(30_000),
		"tuples":             tuplePickle(),
	}
	for name, data := range inputs {
		for _, every := range []int{1, 3} {
			inputs[fmt.Sprintf("%s framed every %d", name, every)] = reframe(data, every)
		}
	}
	// {"a": [], ("b", 1): "c"}: a MARK right after a list's MEMOIZE that
	// begins a tuple, not the list's items (the tuple starts at the MARK).
	inputs["a tuple from a MARK after a fresh list"] = []byte("\x80\x04}\x94(\x8c\x01a\x94]\x94(\x8c\x01b\x94K\x01t\x94" +
		"\x8c\x01c\x94u\x8c\x03key\x94" + skimRefAfter)
	r := rand.New(rand.NewSource(3))
	for _, bad := range []int{-1, 0, 7, 19} {
		// {"a": "b", "c": "d", "e": "f", "g": [x0, ..., x29]} with x
		// the strings of memo 1..7, by BINGET or LONG_BINGET at random;
		// bad's refers to memo 200.
		var b bytes.Buffer
		b.WriteString("\x80\x04}\x94(")
		for i := range 7 {
			fmt.Fprintf(&b, "\x8c\x01%c\x94", 'a'+i)
		}
		b.WriteString("]\x94(")
		for i := range 30 {
			m := uint32(1 + r.Intn(7))
			if i == bad {
				m = 200
			}
			if r.Intn(2) == 0 && m < 256 {
				b.Write([]byte{opBinGet, byte(m)})
			} else {
				b.WriteByte(opLongBinGet)
				binary.Write(&b, binary.LittleEndian, m)
			}
		}
		b.WriteString("e\x8c\x03key\x94" + skimRefAfter)
		inputs[fmt.Sprintf("memo references, bad at %d", bad)] = b.Bytes()
	}
	for i := range 300 {
		prog := genProgram(r, 32<<(i%8), false)
		if len(prog) > 2 && prog[0] == opProto {
			prog = prog[2:]
		}
		if n := len(prog); n > 0 && prog[n-1] == opStop {
			prog = prog[:n-1]
		}
		var b bytes.Buffer
		b.WriteString("\x80\x04}\x94(\x8c\x01a\x94")
		b.Write(prog)
		b.WriteString("\x8c\x03key\x94" + skimRefAfter)
		inputs[fmt.Sprintf("random program %d", i)] = b.Bytes()
	}
	for _, fn := range realdata.FilesIfPresent() {
		if data, err := readPickleFile(fn); err == nil {
			inputs[fn] = data
		}
	}
	found := map[bool]int{}
	for name, data := range inputs {
		found[checkSkimRef(t, name, data, "key")]++
		found[checkSkimRef(t, name, data, "device_traces")]++
		if strings.HasPrefix(name, "memo references") && checkSkimRef(t, name, data, "key") != strings.HasSuffix(name, "-1") {
			t.Errorf("%s: the key found: %v", name, !strings.HasSuffix(name, "-1"))
		}
	}
	// Both outcomes, many times each: the walks went past many opcodes.
	if found[true] < 20 || found[false] < 50 {
		t.Fatalf("%d inputs skimmed to the key, %d refused: want 20 and 50 or more (20: without the published snapshots)", found[true], found[false])
	}
	t.Logf("%d inputs skimmed to the key, %d refused", found[true], found[false])
}

// readPickleFile reads a published snapshot, gunzipped if it is gzip.
func readPickleFile(fn string) ([]byte, error) {
	data, err := os.ReadFile(fn)
	if err != nil {
		return nil, err
	}
	if zr, err := gzip.NewReader(bytes.NewReader(data)); err == nil {
		return io.ReadAll(zr)
	}
	return data, nil
}
