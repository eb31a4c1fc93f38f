package root

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// runMain runs memstat with args through Main, as the binary does.
func runMain(args ...string) (code int, stdout, stderr string) {
	ios, _, out, errOut := iostreams.Test()
	code = Main(&command.Factory{IO: ios, Getenv: func(string) string { return "" }}, args)
	return code, out.String(), errOut.String()
}

// goodSnapshot writes a small snapshot recorded on the simulator.
func goodSnapshot(t testing.TB, dir string) (string, []byte) {
	t.Helper()
	a, err := allocator.New(allocator.DefaultConfig(allocator.Latest), allocator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a.RecordHistory(allocator.HistoryOptions{Enabled: allocator.HistoryAll, Context: allocator.ContextAll})
	var live []uint64
	for i := range 50 {
		addr, err := a.Malloc(int64(1000+i*300000), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, addr)
		if i%3 == 2 {
			a.Free(live[i-1], 0)
		}
	}
	var buf bytes.Buffer
	if err := snapshot.Write(&buf, a.Snapshot()); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "good.pickle")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p, buf.Bytes()
}

// TestBadInputIsOneLineAndExit2: for every kind of file that is not a
// snapshot, `memstat stats` and `memstat replay` print nothing on stdout,
// exactly one line on stderr naming the file, and exit with status 2.
func TestBadInputIsOneLineAndExit2(t *testing.T) {
	dir := t.TempDir()
	good, data := goodSnapshot(t, dir)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := []struct{ path, says string }{
		{filepath.Join(dir, "missing.pickle"), "no such file"},
		{write("empty.pickle", nil), "empty"},
		{write("truncated.pickle", data[:len(data)/2]), "trunc"},
		{write("checkpoint.pt", append([]byte("PK\x03\x04"), make([]byte, 200)...)), "zip"},
		// pickle.dumps(os.system, protocol=4): a global.
		{write("global.pickle", []byte("\x80\x04\x95\x11\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94.")), "Python object"},
		{write("notes.txt", []byte("memory notes\nnot a pickle\n")), "text file"},
		// pickle.dumps({"a": 1}, protocol=4)
		{write("dict.pickle", []byte("\x80\x04\x95\n\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94K\x01s.")), "not a memory snapshot"},
		{dir, "directory"},
	}
	for _, cmd := range [][]string{{"stats"}, {"stats", "--json"}, {"replay"}, {"replay", "--json"}} {
		for _, b := range bad {
			args := append(append([]string{}, cmd...), b.path)
			code, out, errOut := runMain(args...)
			if code != command.ExitError || out != "" {
				t.Errorf("%v: exit %d, stdout %q", args, code, out)
			}
			if strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "memstat: "+b.path+": ") || !strings.Contains(errOut, b.says) {
				t.Errorf("%v: stderr %q, want one line naming the file and saying %q", args, errOut, b.says)
			}
		}
	}
	// A bad file among good ones: still nothing on stdout.
	code, out, errOut := runMain("stats", good, bad[1].path)
	if code != command.ExitError || out != "" || strings.Count(errOut, "\n") != 1 {
		t.Errorf("good then bad: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, cmd := range [][]string{{"stats"}, {"stats", "--json"}, {"stats", "--format", "markdown"}, {"replay"}, {"replay", "--json"}, {"replay", "--what-if"}} {
		args := append(append([]string{}, cmd...), good)
		code, out, errOut := runMain(args...)
		if code != command.ExitOK || out == "" || errOut != "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// TestRealSnapshotsExit0 runs both commands on every published snapshot.
func TestRealSnapshotsExit0(t *testing.T) {
	for _, fn := range realdata.Files(t) {
		for _, cmd := range []string{"stats", "replay"} {
			code, out, errOut := runMain(cmd, fn)
			if code != command.ExitOK || out == "" || errOut != "" {
				t.Errorf("%s %s: exit %d, stderr %q", cmd, filepath.Base(fn), code, errOut)
			}
		}
	}
}

// TestUsageErrors: a usage mistake exits 2 and points at --help.
func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"stats"}, {"replay"}, {"replay", "x.pickle", "--device-memory", "much"}, {"stats", "--nope", "x"}} {
		code, out, errOut := runMain(args...)
		if code != command.ExitError || out != "" || !strings.Contains(errOut, "--help") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

// panicWriter panics on every write: a stand-in for any bug that panics
// inside a command.
type panicWriter struct{}

func (panicWriter) Write([]byte) (int, error) { panic("boom") }

// A panic anywhere in a command is one line, "memstat: internal error:
// ...", and exit 2; the stack only with MEMSTAT_TRACEBACK set.
func TestPanicIsOneLineAndExit2(t *testing.T) {
	for _, traceback := range []string{"", "1"} {
		ios, _, _, errOut := iostreams.Test()
		ios.Out = panicWriter{}
		f := &command.Factory{IO: ios, Getenv: func(k string) string {
			if k == "MEMSTAT_TRACEBACK" {
				return traceback
			}
			return ""
		}}
		code := Main(f, []string{"--version"})
		if code != command.ExitError {
			t.Errorf("exit %d, want %d", code, command.ExitError)
		}
		msg := errOut.String()
		first, rest, _ := strings.Cut(msg, "\n")
		if !strings.HasPrefix(first, "memstat: internal error: boom (a bug in memstat") {
			t.Errorf("first line %q", first)
		}
		if hasStack := strings.Contains(rest, "goroutine") || strings.Contains(rest, ".go:"); hasStack != (traceback != "") {
			t.Errorf("MEMSTAT_TRACEBACK=%q: stack printed = %v:\n%s", traceback, hasStack, msg)
		}
	}
}
