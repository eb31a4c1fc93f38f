package snapshot

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
)

// streamedAll streams fn's entries into one slice per device.
func streamedAll(t *testing.T, fn string) (*Streamed, [][]StreamedEntry) {
	t.Helper()
	var got [][]StreamedEntry
	st, err := Stream(fn, func(e *StreamedEntry) error {
		for len(got) <= e.Device {
			got = append(got, nil)
		}
		if e.Index != len(got[e.Device]) {
			t.Fatalf("device %d: entry handed on as index %d after %d entries", e.Device, e.Index, len(got[e.Device]))
		}
		got[e.Device] = append(got[e.Device], *e)
		return nil
	})
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	return st, got
}

// TestStreamMatchesLoad: on every published snapshot (and JSON and gzip
// forms of one), Stream hands on each entry Load keeps, in order, as
// its device's, with the same fields, and returns the same segments and
// features without the entries.
func TestStreamMatchesLoad(t *testing.T) {
	files := realdata.Files(t)
	dir := t.TempDir()
	if len(files) > 0 {
		// The gzip form of a file with a trace (the published files hold
		// a JSON one).
		s, err := Load(realdata.File(t, "bcrafton"))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if err := Write(zw, s); err != nil {
			t.Fatal(err)
		}
		zw.Close()
		fn := filepath.Join(dir, "bcrafton.pickle.gz")
		if err := os.WriteFile(fn, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, fn)
	}
	for _, fn := range files {
		t.Run(filepath.Base(fn), func(t *testing.T) {
			want, err := Load(fn)
			if err != nil {
				t.Skipf("Load refuses it too: %v", err)
			}
			st, got := streamedAll(t, fn)
			s := st.Snapshot
			if len(s.Segments) != len(want.Segments) || s.Features != want.Features || len(s.Traces) != len(want.Traces) {
				t.Fatalf("segments %d/%d, traces %d/%d, features %+v / %+v", len(s.Segments), len(want.Segments), len(s.Traces), len(want.Traces), s.Features, want.Features)
			}
			for d := range want.Traces {
				tr := want.Trace(d)
				var dev []StreamedEntry
				if d < len(got) {
					dev = got[d]
				}
				if len(dev) != tr.Len() || st.Entries[d] != tr.Len() || s.Trace(d).Len() != 0 {
					t.Fatalf("device %d: %d entries handed on, Entries says %d, Load has %d", d, len(dev), st.Entries[d], tr.Len())
				}
				for i := range dev {
					w := tr.At(i)
					g := dev[i]
					wc := want.Context(&w)
					w.Context, g.Entry.Context = 0, 0
					if g.Entry != w || g.Context != wc {
						t.Fatalf("device %d entry %d: streamed %+v %+v, loaded %+v %+v", d, i, g.Entry, g.Context, w, wc)
					}
					if w.Stack != NoStack && !framesEqual(g.Stacks.Frames(w.Stack), want.Stacks.Frames(w.Stack)) {
						t.Fatalf("device %d entry %d: the stacks differ", d, i)
					}
				}
			}
			for d := len(want.Traces); d < len(got); d++ {
				if len(got[d]) > 0 {
					t.Fatalf("%d entries handed on as device %d, which the file lacks", len(got[d]), d)
				}
			}
		})
	}
}

func framesEqual(a, b []Frame) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestStreamStops: the callback's error ends the reading and comes back
// as it is, after the entries before it.
func TestStreamStops(t *testing.T) {
	fn := realdata.File(t, "bcrafton")
	stop := errors.New("closed pipe")
	n := 0
	_, err := Stream(fn, func(*StreamedEntry) error {
		if n++; n == 10 {
			return stop
		}
		return nil
	})
	if err != stop || n != 10 {
		t.Fatalf("err %v after %d entries, want the callback's after 10", err, n)
	}
}

// TestStreamRefusesWhatLoadRefuses: a file that is not a snapshot, or
// whose entries are not in device_traces' lists, is one error naming it.
func TestStreamRefuses(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"empty.pickle":   "",
		"text.pickle":    "hello\n",
		"entries.json":   `{"segments": [], "other": [[{"action": "alloc", "addr": 1, "size": 2, "stream": 0}]], "device_traces": []}`,
		"truncated.json": `{"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 2, "stream": 0}, `,
	} {
		fn := filepath.Join(dir, name)
		if err := os.WriteFile(fn, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		n := 0
		_, err := Stream(fn, func(*StreamedEntry) error { n++; return nil })
		var ie *InputError
		if !errors.As(err, &ie) || ie.File != fn || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line naming the file", name, err)
		}
		if n > 1 {
			t.Errorf("%s: %d entries handed on", name, n)
		}
	}
}

// TestStreamDevices: the device of each entry is the index of its list in
// device_traces whatever shape the pickler gave the lists (one item:
// APPEND; several: MARK ... APPENDS; protocols 0 and 1 from CPython), with
// empty lists before and between, and device_traces before segments.
func TestStreamDevices(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH; skipping the CPython-written pickles")
	}
	dir := t.TempDir()
	script := `
import pickle, sys
def e(i): return {"action": "alloc", "addr": 4096*(i+1), "size": 512*(i+1), "stream": 0, "time_us": 1000+i}
traces = [[], [e(0)], [], [e(i) for i in range(1, 2500)], [e(3000), e(3001)]]
for proto in range(6):
    snap = {"device_traces": traces, "segments": []} if proto % 2 else {"segments": [], "device_traces": traces}
    with open(sys.argv[1] + "/p%d.pickle" % proto, "wb") as f:
        pickle.dump(snap, f, protocol=proto)
`
	if out, err := exec.Command(py, "-c", script, dir).CombinedOutput(); err != nil {
		t.Fatalf("python3: %v: %s", err, out)
	}
	for proto := range 6 {
		fn := filepath.Join(dir, fmt.Sprintf("p%d.pickle", proto))
		st, got := streamedAll(t, fn)
		want := []int{0, 1, 0, 2499, 2}
		if len(st.Entries) != len(want) {
			t.Fatalf("protocol %d: %d devices", proto, len(st.Entries))
		}
		for d, n := range want {
			var dev []StreamedEntry
			if d < len(got) {
				dev = got[d]
			}
			if st.Entries[d] != n || len(dev) != n {
				t.Fatalf("protocol %d: device %d: %d handed on, Entries %d, want %d", proto, d, len(dev), st.Entries[d], n)
			}
		}
		if got[4][1].Entry.Addr != 4096*3002 || got[3][0].Entry.Size != 1024 {
			t.Fatalf("protocol %d: entries out of place", proto)
		}
	}
}
