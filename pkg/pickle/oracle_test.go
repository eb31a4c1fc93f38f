package pickle

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	gopickle "github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"

	"github.com/memstat/memstat/internal/realdata"
)

// canonGo writes a gopickle value in the same canonical form.
func canonGo(v any, b *strings.Builder) {
	switch x := v.(type) {
	case nil:
		b.WriteString("N")
	case bool:
		if x {
			b.WriteString("T")
		} else {
			b.WriteString("F")
		}
	case int:
		fmt.Fprintf(b, "i%d", x)
	case *big.Int:
		fmt.Fprintf(b, "i%s", x.String())
	case float64:
		var w [8]byte
		binary.BigEndian.PutUint64(w[:], math.Float64bits(x))
		b.WriteString("f" + hex.EncodeToString(w[:]))
	case string:
		b.WriteString("s" + hex.EncodeToString([]byte(x)))
	case []byte:
		b.WriteString("b" + hex.EncodeToString(x))
	case *types.List:
		b.WriteString("[")
		for i, e := range *x {
			if i > 0 {
				b.WriteString(",")
			}
			canonGo(e, b)
		}
		b.WriteString("]")
	case *types.Tuple:
		b.WriteString("(")
		for i, e := range *x {
			if i > 0 {
				b.WriteString(",")
			}
			canonGo(e, b)
		}
		b.WriteString(")")
	case *types.Dict:
		b.WriteString("{")
		for i, e := range *x {
			if i > 0 {
				b.WriteString(",")
			}
			canonGo(e.Key, b)
			b.WriteString(":")
			canonGo(e.Value, b)
		}
		b.WriteString("}")
	default:
		fmt.Fprintf(b, "?%T", v)
	}
}

func decodeCanon(t *testing.T, data []byte) string {
	t.Helper()
	v, vs, err := Loads(data)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return Canonical(vs, v)
}

func python(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH; skipping the CPython differential test")
	}
	return p
}

func pythonCanon(t *testing.T, py, file string) string {
	t.Helper()
	out, err := exec.Command(py, "testdata/canon.py", file).Output()
	if err != nil {
		t.Fatalf("canon.py %s: %v", file, err)
	}
	return string(out)
}

// TestAgreesWithCPythonOnEveryProtocol decodes pickles that CPython writes
// in protocols 0-5 (every data opcode CPython emits for builtins) and
// compares the values with what CPython itself reads.
func TestAgreesWithCPythonOnEveryProtocol(t *testing.T) {
	py := python(t)
	dir := t.TempDir()
	if out, err := exec.Command(py, "testdata/canon.py", "--make", dir).CombinedOutput(); err != nil {
		t.Fatalf("making samples: %v\n%s", err, out)
	}
	for proto := 0; proto <= 5; proto++ {
		t.Run(fmt.Sprintf("protocol%d", proto), func(t *testing.T) {
			file := filepath.Join(dir, fmt.Sprintf("proto%d.pickle", proto))
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			want := pythonCanon(t, py, file)
			got := decodeCanon(t, data)
			if got != want {
				t.Errorf("decoded value differs from CPython's\n got: %.300s\nwant: %.300s", got, want)
			}
			// The same bytes streamed through a reader give the same value.
			d := NewDecoder(&oneByteReader{data: data}, nil, nil)
			v, err := d.Decode()
			if err != nil {
				t.Fatalf("streamed decode: %v", err)
			}
			if Canonical(d.Values(), v) != want {
				t.Errorf("streamed decode differs from CPython's")
			}
		})
	}
}

// oneByteReader hands out one byte per Read, the worst case for the
// decoder's buffering.
type oneByteReader struct {
	data []byte
	pos  int
}

func (r *oneByteReader) Read(p []byte) (int, error) {
	if r.pos >= len(r.data) {
		return 0, io.EOF
	}
	p[0] = r.data[r.pos]
	r.pos++
	return 1, nil
}

// TestAgreesWithCPythonAndGopickleOnRealSnapshots decodes every real
// snapshot and compares the whole value with CPython's and gopickle's.
func TestAgreesWithCPythonAndGopickleOnRealSnapshots(t *testing.T) {
	files := realdata.Files(t)
	py, pyErr := exec.LookPath("python3")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			v, vs, err := Loads(data)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			got := Digest(vs, v)

			u := gopickle.NewUnpickler(bytes.NewReader(data))
			u.FindClass = func(module, name string) (any, error) {
				return nil, fmt.Errorf("refused %s.%s", module, name)
			}
			gv, err := u.Load()
			if err != nil {
				t.Fatalf("gopickle: %v", err)
			}
			if want := digestGo(gv, map[any]string{}); got != want {
				t.Errorf("value differs from gopickle's (digest %s, gopickle %s)", got, want)
			}
			if pyErr == nil {
				out, err := exec.Command(py, "testdata/canon.py", "--digest", f).Output()
				if err != nil {
					t.Fatalf("canon.py --digest: %v", err)
				}
				if want := string(out); got != want {
					t.Errorf("value differs from CPython's (digest %s, CPython %s)", got, want)
				}
			}
		})
	}
}

// digestGo hashes a gopickle value the same way (cache by container
// pointer).
func digestGo(v any, cache map[any]string) string {
	var key any
	switch x := v.(type) {
	case *types.List, *types.Tuple, *types.Dict:
		key = x
	default:
		var b strings.Builder
		canonGo(v, &b)
		return sha256Hex(b.String())
	}
	if h, ok := cache[key]; ok {
		return h
	}
	var text string
	switch x := v.(type) {
	case *types.List:
		var parts []string
		for _, e := range *x {
			parts = append(parts, digestGo(e, cache))
		}
		text = "[" + strings.Join(parts, ",") + "]"
	case *types.Tuple:
		var parts []string
		for _, e := range *x {
			parts = append(parts, digestGo(e, cache))
		}
		text = "(" + strings.Join(parts, ",") + ")"
	case *types.Dict:
		var parts []string
		for _, e := range *x {
			parts = append(parts, digestGo(e.Key, cache)+":"+digestGo(e.Value, cache))
		}
		text = "{" + strings.Join(parts, ",") + "}"
	}
	h := sha256Hex(text)
	cache[key] = h
	return h
}
