package snapshot

import (
	"bytes"
	"compress/gzip"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/memstat/memstat/internal/realdata"
)

// readSink reads data with the entry sink on or off, and returns what
// TraceGrown was handed.
func readSink(data []byte, on bool) (*Snapshot, []*Trace, error) {
	defer func(n int64) { entrySinkMin = n }(entrySinkMin)
	entrySinkMin = math.MaxInt64
	if on {
		entrySinkMin = 0
	}
	var grown []*Trace
	s, err := ReadWith(bytes.NewReader(data), int64(len(data)), LoadOptions{TraceGrown: func(p *Trace) { grown = append(grown, p) }})
	return s, grown, err
}

// checkEntrySink reads data with the entry sink (the trace appended on
// another goroutine) and without: the same snapshot or error, and the
// same closed prefixes handed to TraceGrown, each of which the device
// trace that starts the file extends.
func checkEntrySink(t *testing.T, name string, data []byte) {
	t.Helper()
	want, wantGrown, wantErr := readSink(data, false)
	got, gotGrown, err := readSink(data, true)
	if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
		t.Fatalf("%s: with the sink: %v; without: %v", name, err, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: the sink reads a different snapshot", name)
	}
	// The sink hands on the closed chunks after each batch: the same
	// prefixes or fewer, up to the same last one.
	if len(gotGrown) > len(wantGrown) || len(wantGrown) > 0 && (len(gotGrown) == 0 || gotGrown[len(gotGrown)-1].Len() != wantGrown[len(wantGrown)-1].Len()) {
		t.Fatalf("%s: TraceGrown handed %d prefixes with the sink, %d without, or a different last one", name, len(gotGrown), len(wantGrown))
	}
	var all []TraceEntry
	if len(wantGrown) > 0 {
		all = wantGrown[len(wantGrown)-1].Entries()
	}
	last := 0
	for _, p := range gotGrown {
		if p.Len() <= last || !reflect.DeepEqual(p.Entries(), all[:p.Len()]) {
			t.Fatalf("%s: TraceGrown's prefix of %d entries (after %d) differs with the sink", name, p.Len(), last)
		}
		last = p.Len()
		if err == nil && len(got.Traces) > 0 && got.Traces[0].Len() >= p.Len() && !got.Traces[0].Extends(p) {
			t.Fatalf("%s: device 0's trace does not extend the prefix of %d entries", name, p.Len())
		}
	}
}

// TestEntrySinkSameSnapshot: the published snapshots, generated ones of
// several shapes (torch, fresh, PyTorch 2.0's), one gzipped, and cut
// files read the same with the entry sink as without. Run it with -race.
func TestEntrySinkSameSnapshot(t *testing.T) {
	var inputs []struct {
		name string
		data []byte
	}
	add := func(name string, data []byte) {
		inputs = append(inputs, struct {
			name string
			data []byte
		}{name, data})
	}
	for _, p := range realdata.ReadIfPresent(t, "generated ones only") {
		add(filepath.Base(p.Path), p.Data)
	}
	gen := filepath.Join("..", "..", "..", "shared", "tools", "gen_snapshot.py")
	py, err := exec.LookPath("python3")
	if _, serr := os.Stat(gen); err != nil || serr != nil {
		t.Log("python3 or ../shared/tools/gen_snapshot.py missing: no generated snapshots")
	} else {
		for _, mode := range []string{"torch", "fresh", "py20"} {
			out := filepath.Join(t.TempDir(), mode+".pickle")
			cmd := exec.Command(py, gen, "--entries", "30000", "--segments", "200", "--seed", "5", "--mode", mode, out)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("gen_snapshot.py: %v\n%s", err, b)
			}
			data, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			add(mode, data)
			if mode == "torch" {
				var z bytes.Buffer
				zw := gzip.NewWriter(&z)
				zw.Write(data)
				zw.Close()
				add(mode+" gzip", z.Bytes())
				for _, cut := range []int{len(data) / 2, len(data) * 9 / 10, len(data) - 3} {
					add(mode+" cut", data[:cut])
				}
			}
		}
	}
	if len(inputs) == 0 {
		t.Skip("no published snapshots and no python3: nothing to read")
	}
	before := runtime.NumGoroutine()
	for _, in := range inputs {
		checkEntrySink(t, in.name, in.data)
	}
	// A reading that fails ends its sink's goroutine too.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines after the readings, %d before", n, before)
	}
}
