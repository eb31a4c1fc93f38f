package atomicfile

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRefuseInput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "snap.pickle")
	os.WriteFile(in, []byte("x"), 0o644)
	link := filepath.Join(dir, "link.pickle")
	hard := filepath.Join(dir, "hard.pickle")
	other := filepath.Join(dir, "other.csv")
	os.WriteFile(other, []byte("y"), 0o644)
	if err := os.Symlink(in, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(in, hard); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{in, link, hard, filepath.Join(dir, ".", "snap.pickle")} {
		if err := RefuseInput("-o", out, "a.pickle", in); err == nil || !strings.Contains(err.Error(), "refusing to overwrite it") {
			t.Errorf("-o %s: %v, want a refusal", out, err)
		}
	}
	for _, out := range []string{other, filepath.Join(dir, "new.csv"), "-", ""} {
		if err := RefuseInput("-o", out, in, "-"); err != nil {
			t.Errorf("-o %s: %v", out, err)
		}
	}
}

// The child's half of TestSignalRemovesTemporaryFile: write to the file
// named by MEMSTAT_ATOMIC_CHILD, say "ready" once the temporary file has
// data, then wait for the signal.
func TestMain(m *testing.M) {
	if path := os.Getenv("MEMSTAT_ATOMIC_CHILD"); path != "" {
		Write(path, func(w io.Writer) error {
			w.Write(make([]byte, 1<<20)) // past the buffer: on disk
			os.Stdout.WriteString("ready\n")
			time.Sleep(time.Minute)
			return errors.New("not interrupted")
		})
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// SIGINT and SIGTERM during a write leave no temporary file behind and
// exit with 130 and 143 (issue 18: the hidden .NAME.tmp-NNNN stayed).
func TestSignalRemovesTemporaryFile(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "MEMSTAT_ATOMIC_CHILD="+filepath.Join(dir, "out.csv"))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		if line != "ready\n" {
			cmd.Process.Kill()
			t.Fatalf("child said %q", line)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), ".out.csv.tmp-") {
			t.Fatalf("while writing: %v, want the temporary file", ents)
		}
		cmd.Process.Signal(tc.sig)
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != tc.code {
			t.Errorf("%v: %v, want exit %d", tc.sig, err, tc.code)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("%v: left %v behind", tc.sig, ents)
		}
	}
}
