package view

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/testsnap"
	"github.com/memstat/memstat/pkg/snapshot"
)

// fixtureFile writes the test snapshot (an OOM, annotated steps, a spike
// at the peak) to a file.
func fixtureFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fixture.pickle")
	if err := snapshot.WriteFile(path, testsnap.Build(t).Snapshot); err != nil {
		t.Fatal(err)
	}
	return path
}

// serve runs `memstat view --no-open` on a file until the test ends and
// returns the URL it printed.
func serve(t *testing.T, file string, args ...string) *url.URL {
	t.Helper()
	ios, _, out, errOut := iostreams.Test()
	// Buffered as a real process's stdout is: the URL must reach the user
	// while the server runs.
	ios.Out = bufio.NewWriterSize(out, 64<<10)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	cmd := NewCmdView(&command.Factory{IO: ios}, func(o *Options) error {
		o.Context, o.Ready = ctx, func(u string) { ready <- u }
		return runView(o)
	})
	cmd.SetArgs(append([]string{file, "--no-open"}, args...))
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	go func() { done <- cmd.Execute() }()
	var raw string
	select {
	case raw = <-ready:
	case err := <-done:
		t.Fatalf("memstat view: %v\n%s", err, errOut)
	case <-time.After(60 * time.Second):
		t.Fatal("memstat view did not start")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("memstat view did not stop cleanly: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("memstat view did not stop")
		}
	})
	if !strings.Contains(out.String(), raw) {
		t.Errorf("the URL %s is not printed (or still buffered): %q", raw, out.String())
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func status(t *testing.T, u string) (int, string) {
	t.Helper()
	r, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

func TestToken(t *testing.T) {
	u := serve(t, fixtureFile(t))
	tok := u.Query().Get("token")
	if len(tok) < 32 {
		t.Fatalf("token %q: too short to be unguessable", tok)
	}
	base := "http://" + u.Host
	for _, path := range []string{"/", "/api/info", "/api/window?device=0", "/api/state?device=0&at=3"} {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		for _, bad := range []string{"", sep + "token=", sep + "token=" + strings.Repeat("0", len(tok)), sep + "token=" + tok[:len(tok)-1]} {
			if code, _ := status(t, base+path+bad); code != http.StatusForbidden {
				t.Errorf("%s%s: status %d, want 403", path, bad, code)
			}
		}
		if code, body := status(t, base+path+sep+"token="+tok); code != http.StatusOK {
			t.Errorf("%s with the token: status %d: %s", path, code, body)
		}
	}
	if _, body := status(t, u.String()); !strings.Contains(body, "<canvas id=\"timeline\"") || strings.Contains(body, "http://") || strings.Contains(body, "https://") {
		t.Errorf("the page is not the view, or names an outside URL")
	}
}

// TestLoopbackOnly: the server listens on 127.0.0.1, and no other address
// of this machine reaches it.
func TestLoopbackOnly(t *testing.T) {
	u := serve(t, fixtureFile(t))
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Fatalf("the server listens on %s, not the loopback interface", host)
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	tried := 0
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		tried++
		c, err := net.DialTimeout("tcp", net.JoinHostPort(ipn.IP.String(), port), 2*time.Second)
		if err == nil {
			c.Close()
			t.Errorf("the server answers on %s", ipn.IP)
		}
	}
	if tried == 0 {
		t.Log("this machine has no address but loopback; only the listening address was checked")
	}
}

func TestFlags(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{}, "want one snapshot"},
		{[]string{"x.pickle", "--port", "-1"}, "--port"},
		{[]string{"x.pickle", "--port", "70000"}, "--port"},
		{[]string{"x.pickle", "--at", "soon"}, "--at"},
	} {
		cmd := NewCmdView(&command.Factory{IO: ios}, func(*Options) error { return nil })
		cmd.SetArgs(c.args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	var got *Options
	cmd := NewCmdView(&command.Factory{IO: ios}, func(o *Options) error { got = o; return nil })
	cmd.SetArgs([]string{"x.pickle", "--port", "8765", "--no-open", "--all-frames"})
	if err := cmd.Execute(); err != nil || got.Port != 8765 || !got.NoOpen || !got.AllFrames || got.File != "x.pickle" {
		t.Errorf("parsed %+v, %v", got, err)
	}
	for at, want := range map[string]string{"": "", "peak": "#peak", "oom": "#oom", "12": "#entry=12"} {
		if got, err := fragment(at); err != nil || got != want {
			t.Errorf("--at %q: %q, %v; want %q", at, got, err, want)
		}
	}
	// A missing file is a one-line error naming it, before any server.
	ios, _, _, _ = iostreams.Test()
	err := runView(&Options{IO: ios, File: filepath.Join(t.TempDir(), "missing.pickle"), NoOpen: true})
	if err == nil || !strings.Contains(err.Error(), "missing.pickle") {
		t.Errorf("missing file: %v", err)
	}
}
