package pprof

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/internal/testsnap"
	"github.com/memstat/memstat/pkg/live"
	"github.com/memstat/memstat/pkg/snapshot"
)

func TestFixtureProfile(t *testing.T) {
	fx := testsnap.Build(t)
	st, err := live.At(fx.Snapshot, 0, live.Moment{Kind: live.Peak})
	if err != nil {
		t.Fatal(err)
	}
	// By default PyTorch's own frames (torch/...) are dropped, as peak
	// drops them: the leaves are the program's; with AllFrames they stay.
	for _, c := range []struct {
		all   bool
		leaf  map[string]int64
		spike string
	}{
		{false, map[string]int64{"attention": testsnap.Spike, "forward": testsnap.Activations, "__init__": testsnap.Weights}, "attention forward step main"},
		{true, map[string]int64{"matmul": testsnap.Spike, "linear": testsnap.Activations, "empty": testsnap.Weights}, "matmul attention forward step main"},
	} {
		var buf bytes.Buffer
		if err := Write(&buf, st, Options{AllFrames: c.all, Comments: []string{"fixture at peak"}}); err != nil {
			t.Fatal(err)
		}
		p, err := profile.Parse(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.SampleType) != 2 || p.SampleType[0].Type != "inuse_objects" || p.SampleType[1].Type != "inuse_space" || p.DefaultSampleType != "inuse_space" {
			t.Fatalf("sample types %v", p.SampleType)
		}
		var objects, space int64
		leaf := map[string]int64{}
		for _, s := range p.Sample {
			objects += s.Value[0]
			space += s.Value[1]
			leaf[s.Location[0].Line[0].Function.Name] += s.Value[1]
		}
		if space != testsnap.PeakAllocated || objects != testsnap.WeightCount+5+1 {
			t.Errorf("all %v: profile holds %d bytes in %d objects, want %d in %d", c.all, space, objects, testsnap.PeakAllocated, testsnap.WeightCount+6)
		}
		if !maps.Equal(leaf, c.leaf) {
			t.Errorf("all %v: bytes by leaf function %v, want %v", c.all, leaf, c.leaf)
		}
		// One location per unique frame kept: main (train.py:8) is shared
		// by the activation and spike stacks, forward differs by line.
		frames := map[string]bool{}
		for _, fs := range [][]snapshot.Frame{testsnap.WeightFrames, testsnap.ActivationFrames, testsnap.SpikeFrames} {
			for _, f := range fs {
				if c.all || !strings.HasPrefix(f.Filename, "torch/") {
					frames[f.Filename+":"+f.Name+":"+strconv.FormatInt(f.Line, 10)] = true
				}
			}
		}
		if len(p.Location) != len(frames) {
			t.Errorf("all %v: %d locations, want one per unique frame (%d)", c.all, len(p.Location), len(frames))
		}
		// Leaf first.
		for _, s := range p.Sample {
			if s.Value[1] != testsnap.Spike {
				continue
			}
			var names []string
			for _, l := range s.Location {
				names = append(names, l.Line[0].Function.Name)
			}
			if got := strings.Join(names, " "); got != c.spike {
				t.Errorf("all %v: spike stack %q, want %q", c.all, got, c.spike)
			}
		}
	}
}

// TestGoToolPprof: `go tool pprof -top` reads the profiles of real
// snapshots, and its total is the replay's allocated bytes at that moment.
func TestGoToolPprof(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not on PATH; skipping the go tool pprof check")
	}
	for _, name := range []string{"sidsoc12", "bcrafton"} {
		s, err := snapshot.Load(realdata.File(t, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []live.Moment{{Kind: live.Peak}, {Kind: live.End}, {Kind: live.Event, Index: 1000}} {
			st, err := live.At(s, 0, m)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "live.pb.gz")
			var buf bytes.Buffer
			if err := Write(&buf, st, Options{}); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(goBin, "tool", "pprof", "-top", "-unit=B", "-sample_index=inuse_space", path).CombinedOutput()
			if err != nil {
				t.Fatalf("go tool pprof: %v\n%s", err, out)
			}
			total := pprofTotal(t, string(out))
			if total != st.Allocated {
				t.Errorf("%s %s: pprof total %d B, replay allocated %d B\n%s", name, m, total, st.Allocated, out)
			}
		}
	}
}

// pprofTotal reads the total from pprof -top's header: "Showing nodes
// accounting for X, Y% of TOTAL total".
func pprofTotal(t *testing.T, out string) int64 {
	t.Helper()
	m := regexp.MustCompile(`of (\d+)B total`).FindStringSubmatch(out)
	if m == nil {
		// Everything shown: "Showing nodes accounting for NB, 100% of NB total"
		t.Fatalf("no total in pprof output:\n%s", out)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
