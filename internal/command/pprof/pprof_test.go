package pprof

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/internal/testsnap"
	"github.com/memstat/memstat/pkg/live"
	"github.com/memstat/memstat/pkg/snapshot"
)

func execPprof(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ios, _, out, errOut := iostreams.Test()
	cmd := NewCmdPprof(&command.Factory{IO: ios}, nil)
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

func TestFlags(t *testing.T) {
	for _, c := range []struct {
		args    []string
		wantErr string
		want    live.Moment
	}{
		{[]string{"a.pickle", "-o", "p.pb.gz"}, "", live.Moment{Kind: live.Peak}},
		{[]string{"a.pickle", "-o", "p.pb.gz", "--at", "end"}, "", live.Moment{Kind: live.End}},
		{[]string{"a.pickle", "-o", "p.pb.gz", "--at", "120"}, "", live.Moment{Kind: live.Event, Index: 120}},
		{[]string{"a.pickle", "-o", "p.pb.gz", "--at", "top"}, "--at", live.Moment{}},
		{[]string{"a.pickle"}, "-o OUT.pb.gz is required", live.Moment{}},
	} {
		var got *Options
		ios, _, _, _ := iostreams.Test()
		cmd := NewCmdPprof(&command.Factory{IO: ios}, func(o *Options) error { got = o; return nil })
		cmd.SetArgs(c.args)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetOut(io.Discard)
		err := cmd.Execute()
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%v: err %v, want %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil || got.moment != c.want {
			t.Errorf("%v: err %v, moment %+v", c.args, err, got)
		}
	}
}

// TestGoToolPprofReadsIt: the written profile is read by `go tool pprof
// -top`, whose total is the allocated bytes at that moment: the peak of the
// real trace (allocated_bytes.all.peak) and the fixture's known figures.
func TestGoToolPprofReadsIt(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not on PATH; skipping the go tool pprof check")
	}
	dir := t.TempDir()
	fx := filepath.Join(dir, "fixture.pickle")
	if err := snapshot.WriteFile(fx, testsnap.Build(t).Snapshot); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		file string
		at   string
		want int64
	}{
		{fx, "peak", testsnap.PeakAllocated},
		{fx, "end", testsnap.FinalAllocated},
	}
	t.Run("fixture", func(t *testing.T) {
		for _, c := range cases {
			checkTotal(t, goBin, c.file, c.at, c.want)
		}
	})
	t.Run("real", func(t *testing.T) {
		in := realdata.File(t, "sidsoc12")
		want, err := liveAt(t, in)
		if err != nil {
			t.Fatal(err)
		}
		checkTotal(t, goBin, in, "peak", want)
	})
}

func checkTotal(t *testing.T, goBin, file, at string, want int64) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "p.pb.gz")
	stdout, _, err := execPprof(t, file, "-o", out, "--at", at)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, "allocated in") {
		t.Errorf("summary %q", stdout)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Comments) != 1 || !strings.Contains(p.Comments[0], filepath.Base(file)) {
		t.Errorf("comments %v", p.Comments)
	}
	top, err := exec.Command(goBin, "tool", "pprof", "-top", "-unit=B", "-sample_index=inuse_space", out).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, top)
	}
	m := regexp.MustCompile(`of (\d+)B total`).FindSubmatch(top)
	if m == nil {
		t.Fatalf("no total in:\n%s", top)
	}
	if got, _ := strconv.ParseInt(string(m[1]), 10, 64); got != want {
		t.Errorf("%s at %s: pprof total %d, want %d", filepath.Base(file), at, got, want)
	}
}

// liveAt is the real file's peak of allocated memory, from the replay.
func liveAt(t *testing.T, file string) (int64, error) {
	s, err := snapshot.Load(file)
	if err != nil {
		return 0, err
	}
	st, err := live.At(s, 0, live.Moment{Kind: live.Peak})
	if err != nil {
		return 0, err
	}
	return st.Allocated, nil
}

func TestNoTraceFallsBackToTheEnd(t *testing.T) {
	dir := t.TempDir()
	s := *testsnap.Build(t).Snapshot
	s.Traces = nil
	in := filepath.Join(dir, "notrace.pickle")
	if err := snapshot.WriteFile(in, &s); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "p.pb.gz")
	stdout, stderr, err := execPprof(t, in, "-o", out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "has no trace; writing its final state") || !strings.Contains(stdout, "at the end") {
		t.Errorf("stdout %q stderr %q", stdout, stderr)
	}
	if _, _, err := execPprof(t, in, "-o", out, "--at", "5"); err == nil || !strings.Contains(err.Error(), "has a trace") {
		t.Errorf("--at 5 without a trace: %v", err)
	}
}

// TestTopStartsAtTheProgram: on the published snapshots recorded with C++
// frames, `go tool pprof -top` lists first a frame of the program, never
// the allocator's or the interpreter's: the user's code where the largest
// stack has Python frames (Nesta-gitU: forward; drisspg: main), a
// backward node's function where it has native frames only (silmont2000).
// With --all-frames every recorded frame is kept: the unwinder (the
// innermost frame PyTorch records) or the allocator's malloc is on top.
func TestTopStartsAtTheProgram(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not on PATH; skipping the go tool pprof check")
	}
	first := func(t *testing.T, in string, extra ...string) string {
		t.Helper()
		out := filepath.Join(t.TempDir(), "p.pb.gz")
		if _, errOut, err := execPprof(t, append([]string{in, "-o", out}, extra...)...); err != nil {
			t.Fatalf("%v: %s", err, errOut)
		}
		top, err := exec.Command(goBin, "tool", "pprof", "-top", "-nodecount=1", "-sample_index=inuse_space", out).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof: %v\n%s", err, top)
		}
		lines := strings.Split(strings.TrimSpace(string(top)), "\n")
		fields := strings.Fields(lines[len(lines)-1])
		if len(fields) < 6 {
			t.Fatalf("-top:\n%s", top)
		}
		return strings.Join(fields[5:], " ")
	}
	for _, c := range []struct{ part, want string }{
		{"Nesta-gitU", "forward"},
		{"drisspg", "main"},
		{"silmont2000", "torch::autograd::generated::details::div_tensor_other_backward"},
	} {
		t.Run(c.part, func(t *testing.T) {
			in := realdata.File(t, c.part)
			if got := first(t, in); got != c.want {
				t.Errorf("-top lists %q first, want %q", got, c.want)
			}
			if got := first(t, in, "--all-frames"); !strings.Contains(got, "CUDACachingAllocator") && !strings.Contains(got, "unwind::unwind") {
				t.Errorf("--all-frames: -top lists %q first, want the unwinder or the allocator's malloc", got)
			}
		})
	}
}
