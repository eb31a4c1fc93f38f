package snapshot

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/pickle"
)

// oneLine checks that an error message is a single line naming the file.
func oneLine(t *testing.T, err error, file string) string {
	t.Helper()
	if err == nil {
		t.Fatal("want an error, got none")
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("error is not one line: %q", msg)
	}
	if !strings.HasPrefix(msg, file+": ") {
		t.Errorf("error does not start with the file name %q: %q", file, msg)
	}
	return msg
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBadInputGivesOneClearLine(t *testing.T) {
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"empty.pickle", nil, "empty file"},
		{"checkpoint.pt", append([]byte("PK\x03\x04"), make([]byte, 100)...), "torch.save checkpoint"},
		// pickle.dumps(os.system) in protocol 4: a global.
		{"global.pickle", []byte("\x80\x04\x95\x11\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94."), "names or builds a Python object"},
		{"notes.txt", []byte("Hello, this is a text file.\nNot a pickle.\n"), "text file"},
		// pickle.dumps([1, 2, 3], protocol=4)
		{"list.pickle", []byte("\x80\x04\x95\x0b\x00\x00\x00\x00\x00\x00\x00]\x94(K\x01K\x02K\x03e."), "not a memory snapshot"},
		// pickle.dumps({"a": 1}, protocol=4)
		{"dict.pickle", []byte("\x80\x04\x95\n\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94K\x01s."), "expected \"segments\""},
		{"frame.pickle", []byte("\x80\x04\x95\xff\xff\xff\xff\xff\x00\x00\x00."), ""},
		{"bad.json", []byte(`{"segments": [`), "truncated"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, c.name, c.data)
			_, err := Load(p)
			msg := oneLine(t, err, p)
			if !strings.Contains(msg, c.want) {
				t.Errorf("error %q does not say %q", msg, c.want)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "nope.pickle")
		_, err := Load(p)
		msg := oneLine(t, err, p)
		if !strings.Contains(msg, "no such file") {
			t.Errorf("error %q does not say the file is missing", msg)
		}
	})
}

// TestEveryCutPointOfARealSnapshotIsAnError truncates a small real snapshot
// at every byte and checks that each cut gives a one-line error and never a
// panic or a silently partial snapshot.
func TestEveryCutPointOfARealSnapshotIsAnError(t *testing.T) {
	f := realdata.File(t, "nishi951")
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(data); n++ {
		_, err := Read(bytes.NewReader(data[:n]), int64(n))
		if err == nil {
			t.Fatalf("cut at %d of %d bytes decoded without error", n, len(data))
		}
		if strings.Contains(err.Error(), "\n") {
			t.Fatalf("cut at %d: error is not one line: %q", n, err)
		}
		if n > 0 && !errors.Is(err, pickle.ErrTruncated) {
			t.Fatalf("cut at %d: want a truncation error, got %v", n, err)
		}
	}
	if _, err := Read(bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("whole file: %v", err)
	}
}

func TestGzipAndJSONFormsReadLikeThePickle(t *testing.T) {
	f := realdata.File(t, "silmont2000")
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Read(bytes.NewReader(data), -1)
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write(data)
	w.Close()
	zipped, err := Read(bytes.NewReader(gz.Bytes()), int64(gz.Len()))
	if err != nil {
		t.Fatalf("gzip: %v", err)
	}
	if !zipped.Features.Gzip {
		t.Error("gzip feature not set")
	}
	if modelText(zipped) != modelText(plain) {
		t.Error("gzip form reads differently from the plain pickle")
	}
}
