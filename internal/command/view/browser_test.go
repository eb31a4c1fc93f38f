package view

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/internal/testsnap"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/snapshot"
)

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

// artifacts is where screenshots go: $MEMSTAT_ARTIFACTS when set (CI
// keeps them), else a folder of the test's.
func artifacts(t *testing.T) string {
	dir := os.Getenv("MEMSTAT_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser is headless Chromium driven over the DevTools protocol, with
// the flags of the report's browser test: no background networking and a
// fresh profile. It records console errors, exceptions and every request
// the page makes.
type browser struct {
	ctx      context.Context
	mu       sync.Mutex
	errors   []string
	requests []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	bin := chromiumPath(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-extensions", true), chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-quic", true), chromedp.Flag("no-pings", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1100),
	}
	b := &browser{}
	listen := func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var parts []string
				for _, a := range ev.Args {
					parts = append(parts, fmt.Sprint(a.Value, a.Description))
				}
				b.errors = append(b.errors, "console.error: "+strings.Join(parts, " "))
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			b.errors = append(b.errors, fmt.Sprintf("exception at %d:%d: %s", d.LineNumber, d.ColumnNumber, msg))
		case *network.EventRequestWillBeSent:
			b.requests = append(b.requests, ev.Request.URL)
		}
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx, chromedp.WithListener(listen))
	t.Cleanup(func() { cancelC(); cancelA() })
	b.ctx = ctx
	return b
}

func (b *browser) do(t *testing.T, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

// eval evaluates JavaScript (awaiting a promise) and decodes its value.
func eval[T any](t *testing.T, b *browser, js string) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}

// waitFor polls a JavaScript condition.
func (b *browser) waitFor(t *testing.T, what, js string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](js)); err == nil && ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	tip, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`memstat.tipText()`))
	b.mu.Lock()
	t.Fatalf("timed out waiting for %s (%s); errors: %v; tooltip: %q", what, js, b.errors, tip)
}

func (b *browser) shot(t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(artifacts(t), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", path)
}

// check: no console error, no exception, and every request went to the
// view's own server.
func (b *browser) check(t *testing.T, base string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errors {
		t.Error(e)
	}
	for _, r := range b.requests {
		if !strings.HasPrefix(r, base+"/") && !strings.HasPrefix(r, "data:") {
			t.Errorf("the page made an outside request: %s", r)
		}
	}
	if len(b.requests) < 3 {
		t.Errorf("the page made %d requests to its server; the recorder sees nothing?", len(b.requests))
	}
}

// TestViewInChromium opens memstat view on the fixture (and a published
// snapshot when present) in headless Chromium: the page loads with no
// console error and no outside request, hovering the peak allocation shows
// its stack, the wheel zooms, and clicking the peak draws the segments
// `segments --at N` computes, the arrow key the next entry's; a state of
// more segments than the pane shows comes in parts as it scrolls (the
// published snapshot's 126, a recorded workload's 2,500).
func TestViewInChromium(t *testing.T) {
	chromiumPath(t)
	t.Run("fixture", func(t *testing.T) {
		fx := testsnap.Build(t)
		path := filepath.Join(t.TempDir(), "fixture.pickle")
		if err := snapshot.WriteFile(path, fx.Snapshot); err != nil {
			t.Fatal(err)
		}
		checkView(t, path, "model.py:50 attention", "view-fixture")
	})
	t.Run("real", func(t *testing.T) {
		checkView(t, realdata.File(t, "Nesta-gitU"), "", "view-real")
	})
	t.Run("many segments", func(t *testing.T) {
		path, _ := fixture.RecordFile(t, "many_segments.mem", "many.pickle", "--device-memory", "40GiB")
		checkManySegments(t, path)
	})
}

// checkManySegments: a state of 2,500 segments, more than one answer
// summarizes (webview.SummaryAround on either side of the rows asked
// for), comes in parts as the pane scrolls: at the top, in the middle,
// past the first answer's summary rows, and at the bottom, every row on
// screen is the segment `segments --at N` lists there, block for block.
func checkManySegments(t *testing.T, path string) {
	last, m := segmentsAt(t, path, -1)
	if len(m.Segments) != 2500 || m.Total.Free == 0 || m.Total.Allocated == 0 {
		t.Fatalf("the workload left %d segments (%d B allocated, %d B free), want 2500, some of each", len(m.Segments), m.Total.Allocated, m.Total.Free)
	}
	u := serve(t, path)
	b := newBrowser(t)
	b.do(t, chromedp.Navigate(u.String()+fmt.Sprintf("#entry=%d", last)))
	b.waitFor(t, "the page to load", `window.memstat && memstat.ready && document.getElementById('error').hidden`)
	checkDrawnSegments(t, b, last, m)
	for _, row := range []int{1200, 2400, 2499, 0} {
		b.do(t, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.getElementById('segmentsBox').scrollTop = %d * 14`, row)))
		b.waitFor(t, fmt.Sprintf("row %d on screen", row), fmt.Sprintf(`(() => { const v = memstat.stateView(); return v.first <= %d && v.last >= %d; })()`, row, row))
		checkDrawnSegments(t, b, last, m)
	}
	b.shot(t, "view-many-segments.png")
	summaries := 0
	b.mu.Lock()
	for _, r := range b.requests {
		if strings.Contains(r, "/api/state?") && !strings.Contains(r, "summary=0") {
			summaries++
		}
	}
	b.mu.Unlock()
	if summaries < 2 {
		t.Errorf("%d state requests asked for summary rows; the rows past the first answer's need a second", summaries)
	}
	b.check(t, "http://"+u.Host)
}

func checkView(t *testing.T, path, peakSite, name string) {
	u := serve(t, path)
	base := "http://" + u.Host
	b := newBrowser(t)
	b.do(t, chromedp.Navigate(u.String()))
	b.waitFor(t, "the page to load", `window.memstat && memstat.ready && document.getElementById('error').hidden`)
	b.shot(t, name+"-load.png")
	// The #peak link opens the view zoomed at the peak.
	b.do(t, chromedp.Evaluate[chromedp.Void](`location.hash = 'peak'`))

	// Hover the peak allocation: the tooltip shows its stack.
	var ov struct {
		Entries int `json:"entries"`
		Marks   struct {
			PeakAllocation int `json:"peak_allocation"`
			PeakAllocated  struct {
				Index int `json:"index"`
			} `json:"peak_allocated"`
		} `json:"marks"`
	}
	getJSON(t, base+"/api/overview?device=0&token="+u.Query().Get("token"), &ov)
	b.waitFor(t, "the view at the peak", fmt.Sprintf(`memstat.selected() === %d && memstat.range()[1] - memstat.range()[0] < %d`, ov.Marks.PeakAllocated.Index, ov.Entries-1))
	b.waitFor(t, "the peak allocation's band", fmt.Sprintf(`!memstat.busy() && memstat.bandPoint(%d) !== null`, ov.Marks.PeakAllocation))
	type point struct{ X, Y float64 }
	pt := eval[point](t, b, fmt.Sprintf(`memstat.bandPoint(%d) || {}`, ov.Marks.PeakAllocation))
	if pt.X == 0 {
		t.Fatalf("the peak allocation %d is not drawn", ov.Marks.PeakAllocation)
	}
	b.do(t, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, pt.X, pt.Y))
	want := peakSite
	if want == "" {
		var a struct {
			Site string `json:"site"`
		}
		getJSON(t, fmt.Sprintf("%s/api/alloc?device=0&id=%d&token=%s", base, ov.Marks.PeakAllocation, u.Query().Get("token")), &a)
		want = a.Site
	}
	b.waitFor(t, "the tooltip to show the stack", fmt.Sprintf(`memstat.tipText().includes(%q) && document.querySelector('#tip pre') !== null && document.querySelector('#tip pre').textContent.length > 0`, want))
	b.shot(t, name+"-hover.png")

	// The wheel zooms in around the pointer: the visible range narrows.
	before := eval[[2]int](t, b, `memstat.range()`)
	b.do(t, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseWheel, pt.X, pt.Y, func(p *input.DispatchMouseEventParams) {
		// Chromium wants both deltas, and a zero one is left out of the message.
		p.DeltaX, p.DeltaY = 0.01, -300
	}))
	b.waitFor(t, "the zoom", fmt.Sprintf(`(() => { const r = memstat.range(); return r[1] - r[0] < %d; })()`, before[1]-before[0]))
	after := eval[[2]int](t, b, `memstat.range()`)
	if after[0] > ov.Marks.PeakAllocated.Index+1 || after[1] < ov.Marks.PeakAllocated.Index-1 {
		t.Errorf("zoomed at the peak (%d) to %v", ov.Marks.PeakAllocated.Index, after)
	}

	// Click the peak: the state pane draws the segments of segments --at N.
	b.waitFor(t, "the zoomed window", `!memstat.busy() && memstat.bandPoint(`+fmt.Sprint(ov.Marks.PeakAllocation)+`) !== null`)
	pt = eval[point](t, b, fmt.Sprintf(`memstat.bandPoint(%d)`, ov.Marks.PeakAllocation))
	b.do(t, chromedp.MouseClickXY(pt.X, pt.Y))
	b.waitFor(t, "the segments", `memstat.selected() >= 0 && memstat.drawnSegments().length > 0`)
	sel := eval[int](t, b, `memstat.selected()`)
	_, m := segmentsAt(t, path, sel)
	b.waitFor(t, "the state of the selected entry", `document.getElementById('stateTitle').textContent === 'after entry ' + memstat.selected()`)
	checkDrawnSegments(t, b, sel, m)
	// A state of more segments than the pane shows comes in parts: the
	// rows scrolled into view get their blocks from a second request.
	if v := eval[stateView](t, b, `memstat.stateView()`); v.Count > v.Last+1 {
		b.do(t, chromedp.Evaluate[chromedp.Void](`document.getElementById('segmentsBox').scrollTop = 1e9`))
		b.waitFor(t, "the last rows' blocks", fmt.Sprintf(`(() => { const v = memstat.stateView(); return v.last === %d && v.missing === 0; })()`, v.Count-1))
		checkDrawnSegments(t, b, sel, m)
		b.shot(t, name+"-state-scrolled.png")
		parts := 0
		b.mu.Lock()
		for _, r := range b.requests {
			if strings.Contains(r, "/api/state?") && strings.Contains(r, fmt.Sprintf("at=%d&", sel)) {
				parts++
			}
		}
		b.mu.Unlock()
		if parts < 2 {
			t.Errorf("the state after entry %d (%d segments, %d rows on screen) came in %d request(s), want it in parts", sel, v.Count, v.Last-v.First+1, parts)
		}
		b.do(t, chromedp.Evaluate[chromedp.Void](`document.getElementById('segmentsBox').scrollTop = 0`))
	} else {
		t.Logf("the state after entry %d has %d segments: all on screen, one request", sel, v.Count)
	}
	// The arrow key steps to the next event.
	b.do(t, chromedp.KeyEvent(kb.ArrowRight))
	next := min(sel+1, ov.Entries-1)
	b.waitFor(t, "the next event", fmt.Sprintf(`memstat.selected() === %d`, next))
	b.waitFor(t, "the next event's state", fmt.Sprintf(`(() => { const v = memstat.stateView(); return v.at === %d && v.missing === 0; })()`, next))
	_, m = segmentsAt(t, path, next)
	checkDrawnSegments(t, b, next, m)
	b.shot(t, name+"-state.png")
	b.check(t, base)
}

// stateView is the page's memstat.stateView(): the state shown and its
// rows on screen.
type stateView struct {
	At      int `json:"at"`
	Count   int `json:"count"`
	First   int `json:"first"`
	Last    int `json:"last"`
	Missing int `json:"missing"`
}

// checkDrawnSegments: the rows the state pane shows are on screen with
// their blocks, and each is the segment `segments --at N` lists at that

// segmentsAt is what `segments --at N` lists for device 0 of the file
// after entry at (the last entry when at < 0), and that entry.
func segmentsAt(t *testing.T, path string, at int) (int, *analysis.SegmentMap) {
	t.Helper()
	s, err := snapshot.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rp, err := analysis.Replay(s, 0)
	if err != nil {
		t.Fatal(err)
	}
	if at < 0 {
		at = s.Trace(0).Len() - 1
	}
	m, err := analysis.Segments(rp, analysis.NewFrames(s.Stacks, false), at, analysis.SegmentFilter{}, analysis.SortByAddress)
	if err != nil {
		t.Fatal(err)
	}
	return at, m
}

// row (address order), block for block.
func checkDrawnSegments(t *testing.T, b *browser, at int, m *analysis.SegmentMap) {
	t.Helper()
	b.waitFor(t, "every row on screen with its blocks", fmt.Sprintf(`(() => { const v = memstat.stateView(); return v.at === %d && v.missing === 0; })()`, at))
	type seg struct {
		Index   int      `json:"index"`
		Address uint64   `json:"address"`
		Size    int64    `json:"size"`
		Blocks  []string `json:"blocks"`
	}
	v := eval[stateView](t, b, `memstat.stateView()`)
	drawn := eval[[]seg](t, b, `memstat.drawnSegments()`)
	if v.Count != len(m.Segments) || len(drawn) == 0 || len(drawn) != v.Last-v.First+1 {
		t.Fatalf("after entry %d: the pane has %d segments and drew %d rows (%d-%d); segments --at has %d", at, v.Count, len(drawn), v.First, v.Last, len(m.Segments))
	}
	for k, d := range drawn {
		if d.Index != v.First+k {
			t.Fatalf("after entry %d: row %d drawn as row %d", at, v.First+k, d.Index)
		}
		w := m.Segments[d.Index]
		var blocks []string
		for _, bl := range w.Blocks {
			blocks = append(blocks, fmt.Sprintf("%s:%d", bl.State, bl.Size))
		}
		if d.Address != w.Address || d.Size != w.Size || strings.Join(d.Blocks, ",") != strings.Join(blocks, ",") {
			t.Errorf("segment %d after entry %d: drew %+v, segments --at has %#x %d %v", d.Index, at, d, w.Address, w.Size, blocks)
		}
	}
}

func getJSON(t *testing.T, u string, out any) {
	t.Helper()
	r, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", u, r.Status)
	}
	if err := json.NewDecoder(r.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}
