package report

import (
	"bufio"
	"context"
	"image/png"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/internal/testsnap"
	"github.com/memstat/memstat/pkg/snapshot"
)

func execReport(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ios, _, out, errOut := iostreams.Test()
	cmd := NewCmdReport(&command.Factory{IO: ios}, nil)
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

// fixtureFile writes the test snapshot (an OOM, annotated steps) to a file.
func fixtureFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fixture.pickle")
	if err := snapshot.WriteFile(path, testsnap.Build(t).Snapshot); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeReport(t *testing.T, in string) (string, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "report.html")
	if _, stderr, err := execReport(t, in, "-o", out); err != nil {
		t.Fatalf("memstat report: %v\n%s", err, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return out, string(data)
}

var sections = []string{"d0-headline", "d0-timeline", "d0-peak", "d0-oom", "d0-stats", "d0-segments"}

func TestReportContent(t *testing.T) {
	_, page := writeReport(t, fixtureFile(t))
	for _, id := range sections {
		if !strings.Contains(page, `id="`+id+`"`) {
			t.Errorf("no section %s", id)
		}
	}
	for _, want := range []string{
		"peak allocated 1.7 GiB", // headline
		"<svg",                   // the timeline, inline
		"OOM: 8.0 GiB requested", // marked in the picture
		"model.py:50 attention",  // the spike's site, live at the peak
		"CUDA out of memory.",    // the OOM message
		"Allocated memory",       // the memory_stats table
		`class="track"`,          // the segment map
		`id="memstat-data"`,      // the interactive timeline's data
		`<canvas id="timeline"`,  // and its canvas
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	checkSelfContained(t, page)
}

// checkSelfContained fails on anything in the page that would load a
// resource: scripts from elsewhere, links, imports, remote URLs in
// attributes or CSS, and any request the inline script could make.
func checkSelfContained(t *testing.T, page string) {
	t.Helper()
	for _, tag := range regexp.MustCompile(`(?i)<script[^>]*>`).FindAllString(page, -1) {
		if tag != "<script>" && tag != `<script type="application/json" id="memstat-data">` {
			t.Errorf("page has a script element %s", tag)
		}
	}
	for _, bad := range []string{"XMLHttpRequest", "WebSocket", "import(", "EventSource", "sendBeacon"} {
		if strings.Contains(page, bad) {
			t.Errorf("page contains %s", bad)
		}
	}
	for _, bad := range []string{"<link", "@import", "<iframe", "<img", "<object", "<embed", "@font-face"} {
		if strings.Contains(strings.ToLower(page), bad) {
			t.Errorf("page contains %s", bad)
		}
	}
	// Attribute URLs may only be fragments; xmlns namespace names are
	// identifiers, never fetched.
	for _, m := range regexp.MustCompile(`(?i)\b(src|href|xlink:href|action|poster|data)\s*=\s*"([^"]*)"`).FindAllStringSubmatch(page, -1) {
		if !strings.HasPrefix(m[2], "#") {
			t.Errorf("page refers to %s=%q", m[1], m[2])
		}
	}
	if m := regexp.MustCompile(`(?i)url\(\s*['"]?([^)'"]*)`).FindAllStringSubmatch(page, -1); len(m) > 0 {
		for _, u := range m {
			if !strings.HasPrefix(u[1], "#") {
				t.Errorf("page CSS loads %q", u[1])
			}
		}
	}
}

func TestReportErrors(t *testing.T) {
	if _, _, err := execReport(t, "x.pickle"); err == nil || !strings.Contains(err.Error(), "-o") {
		t.Errorf("no -o: %v", err)
	}
	out := filepath.Join(t.TempDir(), "r.html")
	if _, _, err := execReport(t, filepath.Join(t.TempDir(), "missing.pickle"), "-o", out); err == nil {
		t.Error("a missing file gave no error")
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Error("a failed report left a file")
	}
	if _, _, err := execReport(t, fixtureFile(t), "-o", out, "--device", "5"); err == nil || !strings.Contains(err.Error(), "device 5") {
		t.Errorf("--device 5: %v", err)
	}
}

// ---- headless Chromium ----

func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium not found; skipping the browser test (apt-get install chromium)")
	return ""
}

// proxyRecorder is an HTTP proxy that answers nothing: it records the
// first line of every request the browser sends through it, so a test
// sees every network request a page makes, and the page gets none.
type proxyRecorder struct {
	ln    net.Listener
	mu    sync.Mutex
	lines []string
	wg    sync.WaitGroup
}

func newProxyRecorder(t *testing.T) *proxyRecorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxyRecorder{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			p.mu.Lock()
			p.lines = append(p.lines, strings.TrimSpace(line))
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *proxyRecorder) addr() string { return p.ln.Addr().String() }

// pageRequests are the recorded requests that are not Chromium's own
// background services (time, component updates, sign-in), which go out
// whatever the page is.
func (p *proxyRecorder) pageRequests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	own := regexp.MustCompile(`^(GET|POST|CONNECT) (https?://)?(clients\d*\.google\.com|update\.googleapis\.com|accounts\.google\.com|[a-z0-9-]+\.gvt1\.com|safebrowsing[a-z0-9.-]*\.googleapis\.com|optimizationguide-pa\.googleapis\.com|content-autofill\.googleapis\.com|redirector\.gvt1\.com)[:/ ]`)
	var out []string
	for _, l := range p.lines {
		if l != "" && !own.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// chromium runs headless Chromium on a file with every network request
// sent to the recorder.
func chromium(t *testing.T, bin string, proxy *proxyRecorder, file string, extra ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--disable-default-apps", "--no-pings",
		"--user-data-dir=" + t.TempDir(), "--proxy-server=" + proxy.addr(), "--proxy-bypass-list=<-loopback>"}
	args = append(args, extra...)
	args = append(args, "file://"+file)
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	return out
}

// TestReportInChromium opens reports in headless Chromium with the network
// replaced by a proxy that answers nothing: the DOM must have every
// section and the picture, the screenshot must show a page, and the page
// must make no request at all. A control page with one remote image proves
// that the recorder sees requests.
func TestReportInChromium(t *testing.T) {
	bin := chromiumPath(t)
	proxy := newProxyRecorder(t)

	control := filepath.Join(t.TempDir(), "control.html")
	if err := os.WriteFile(control, []byte(`<!DOCTYPE html><p>control<img src="http://memstat-control.invalid/x.png"></p>`), 0o644); err != nil {
		t.Fatal(err)
	}
	chromium(t, bin, proxy, control, "--dump-dom")
	if reqs := proxy.pageRequests(); len(reqs) != 1 || !strings.Contains(reqs[0], "memstat-control.invalid") {
		t.Fatalf("the control page's request was not seen: %v", reqs)
	}
	proxy.mu.Lock()
	proxy.lines = nil
	proxy.mu.Unlock()

	t.Run("fixture", func(t *testing.T) {
		path, _ := writeReport(t, fixtureFile(t))
		checkInBrowser(t, bin, proxy, path)
	})
	t.Run("real", func(t *testing.T) {
		path, _ := writeReport(t, realdata.File(t, "Nesta-gitU"))
		checkInBrowser(t, bin, proxy, path)
	})
}

func checkInBrowser(t *testing.T, bin string, proxy *proxyRecorder, path string) {
	t.Helper()
	dom := string(chromium(t, bin, proxy, path, "--dump-dom", "--virtual-time-budget=10000"))
	for _, id := range sections {
		if !strings.Contains(dom, `id="`+id+`"`) {
			t.Errorf("the DOM has no section %s", id)
		}
	}
	// The interactive timeline ran: it filled in the file name and the
	// device picker, and showed no error.
	if !regexp.MustCompile(`<span id="file">[^<]+</span>`).MatchString(dom) || !strings.Contains(dom, "entries)</option>") {
		t.Error("the interactive timeline did not start")
	}
	if m := regexp.MustCompile(`<div id="error"[^>]*>([^<]*)<`).FindStringSubmatch(dom); m == nil || strings.TrimSpace(m[1]) != "" {
		t.Errorf("the interactive timeline shows an error: %v", m)
	}
	for _, want := range []string{"<svg", "<details", "peak allocated", "out of memory", `class="track"`, "</html>"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the DOM lacks %q", want)
		}
	}
	shot := filepath.Join(t.TempDir(), "shot.png")
	chromium(t, bin, proxy, path, "--screenshot="+shot, "--window-size=1280,1600", "--hide-scrollbars")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	colours := map[uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[r>>8<<16|g>>8<<8|bl>>8] = true
		}
	}
	if b.Dx() != 1280 || len(colours) < 50 {
		t.Errorf("screenshot %dx%d with %d colours: not a rendered page", b.Dx(), b.Dy(), len(colours))
	}
	if reqs := proxy.pageRequests(); len(reqs) > 0 {
		t.Errorf("the report made network requests: %v", reqs)
	}
}

// TestPrivatePoolBand: the report of a recording with CUDA graphs
// (`memstat record -w inference --cuda-graphs`) shows the memory reserved
// in private pools as a band of its own in the picture and in the
// interactive timeline, each named in its legend; a file without pools
// shows neither.
func TestPrivatePoolBand(t *testing.T) {
	in, _ := fixture.RecordArgs(t, "graphs.pickle", "-w", "inference", "--cuda-graphs", "--new-tokens", "8")
	_, page := writeReport(t, in)
	for _, want := range []string{
		"reserved in private pools (CUDA graphs, MemPool)</text>", // the picture's legend
		`"private_reserved":[`, // the interactive timeline's band
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	_, plain := writeReport(t, fixtureFile(t))
	if strings.Contains(plain, `"private_reserved":[`) || strings.Contains(plain, "reserved in private pools (CUDA graphs, MemPool)</text>") {
		t.Error("the report of a file without pools shows a private-pool band")
	}
}
