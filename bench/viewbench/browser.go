package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/performance"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// browse opens the page in headless Chromium (the browser test's flags:
// a fresh profile, no background networking), waits for the first
// picture, then zooms with the wheel (in, in, out) and pans with drags n
// times,
// waiting for each redraw. It returns the largest JS heap in use it saw
// (MB), the median time of a zoom or pan to its redrawn window and the
// median time the page took to draw it (ms). Then it opens the allocator
// state after entry at and steps through the next steps entries with the
// arrow key: stepMS is the median time from the key to the state drawn.
func browse(bin, url string, n, at, steps int) (heapMB, zoomMS, drawMS, stepMS float64, err error) {
	dir, err := os.MkdirTemp("", "viewbench-chromium")
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer os.RemoveAll(dir)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-extensions", true), chromedp.Flag("disable-default-apps", true),
		chromedp.UserDataDir(dir), chromedp.WindowSize(1400, 1100),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	heap := func() (float64, error) {
		return chromedp.Run(ctx, func(ctx context.Context, t *chromedp.Target) (float64, error) {
			if _, err := cdp.Call(ctx, t, performance.Enable, performance.EnableParams{}); err != nil {
				return 0, err
			}
			res, err := cdp.Call(ctx, t, performance.GetMetrics, cdp.Empty{})
			if err != nil {
				return 0, err
			}
			for _, m := range res.Metrics {
				if m.Name == "JSHeapUsedSize" {
					return m.Value / 1e6, nil
				}
			}
			return 0, fmt.Errorf("no JSHeapUsedSize metric")
		})
	}
	wait := func(what, js string, limit time.Duration) error {
		deadline := time.Now().Add(limit)
		for time.Now().Before(deadline) {
			if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js)); err == nil && ok {
				return nil
			}
			time.Sleep(5 * time.Millisecond)
		}
		page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({selected: memstat.selected(), title: document.getElementById('stateTitle').textContent, error: document.getElementById('error').textContent, hash: location.hash})`))
		return fmt.Errorf("timed out waiting for %s (the page: %s)", what, page)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		return 0, 0, 0, 0, err
	}
	if err := wait("the first picture", `window.memstat && memstat.ready && !memstat.busy() && document.getElementById('error').hidden`, 10*time.Minute); err != nil {
		return 0, 0, 0, 0, err
	}
	if heapMB, err = heap(); err != nil {
		return 0, 0, 0, 0, err
	}
	type box struct{ X, Y, W, H float64 }
	plot, err := chromedp.Run(ctx, chromedp.Evaluate[box](`(() => { const r = document.getElementById('timeline').getBoundingClientRect(); return {X: r.x, Y: r.y, W: r.width, H: r.height}; })()`))
	if err != nil {
		return 0, 0, 0, 0, err
	}
	x, y := plot.X+plot.W*0.55, plot.Y+plot.H*0.6
	var lat, draws []float64
	for i := range n {
		before, err := chromedp.Run(ctx, chromedp.Evaluate[[2]int](`memstat.range()`))
		if err != nil {
			return 0, 0, 0, 0, err
		}
		t := time.Now()
		// In, in, pan, out: deeper and deeper, a zoom level at a time.
		var act chromedp.Action[chromedp.Void]
		if i%4 == 2 {
			// A drag pans.
			act = chromedp.Steps(
				chromedp.MouseEvent(input.DispatchMouseEventTypeMousePressed, x, y, func(p *input.DispatchMouseEventParams) { p.Button, p.ClickCount = input.MouseButtonLeft, 1 }),
				chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, x-plot.W*0.2, y, func(p *input.DispatchMouseEventParams) { p.Button = input.MouseButtonLeft }),
				chromedp.MouseEvent(input.DispatchMouseEventTypeMouseReleased, x-plot.W*0.2, y, func(p *input.DispatchMouseEventParams) { p.Button, p.ClickCount = input.MouseButtonLeft, 1 }),
			)
		} else {
			dy := -300.0
			if i%4 == 3 {
				dy = 300
			}
			act = chromedp.MouseEvent(input.DispatchMouseEventTypeMouseWheel, x, y, func(p *input.DispatchMouseEventParams) {
				p.DeltaX, p.DeltaY = 0.01, dy // Chromium leaves a zero delta out
			})
		}
		if err := chromedp.Do(ctx, act); err != nil {
			return 0, 0, 0, 0, err
		}
		moved := fmt.Sprintf(`(() => { const r = memstat.range(); return (r[0] !== %d || r[1] !== %d) && !memstat.busy(); })()`, before[0], before[1])
		if err := wait("the redraw", moved, 30*time.Second); err != nil {
			// At the deepest zoom the range stops changing.
			continue
		}
		lat = append(lat, float64(time.Since(t).Microseconds())/1000)
		d, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`memstat.drawMS()`))
		if err != nil {
			return 0, 0, 0, 0, err
		}
		draws = append(draws, d)
		if os.Getenv("VIEWBENCH_DEBUG") != "" {
			fmt.Fprintf(os.Stderr, "browser step %d: %.0f ms, drawing %.1f ms\n", i, lat[len(lat)-1], d)
		}
		h, err := heap()
		if err != nil {
			return 0, 0, 0, 0, err
		}
		heapMB = max(heapMB, h)
	}
	median := func(v []float64) float64 {
		if len(v) == 0 {
			return -1
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	// The state pane: open entry at (#entry=N), then step with the
	// arrow key; the title changes once the state is drawn (the page
	// draws it in the same task).
	drawn := func(i int) string {
		return fmt.Sprintf(`document.getElementById('stateTitle').textContent === 'after entry %d'`, i)
	}
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = 'entry=%d'`, at))); err != nil {
		return 0, 0, 0, 0, err
	}
	if err := wait("the state", drawn(at), time.Minute); err != nil {
		return 0, 0, 0, 0, err
	}
	var stepLat []float64
	for i := 1; i <= steps; i++ {
		t := time.Now()
		if err := chromedp.Do(ctx, chromedp.KeyEvent(kb.ArrowRight)); err != nil {
			return 0, 0, 0, 0, err
		}
		if err := wait("the next state", drawn(at+i), time.Minute); err != nil {
			return 0, 0, 0, 0, err
		}
		stepLat = append(stepLat, float64(time.Since(t).Microseconds())/1000)
		if os.Getenv("VIEWBENCH_DEBUG") != "" {
			fmt.Fprintf(os.Stderr, "browser state step %d: %.0f ms\n", i, stepLat[len(stepLat)-1])
		}
		h, err := heap()
		if err != nil {
			return 0, 0, 0, 0, err
		}
		heapMB = max(heapMB, h)
	}
	return heapMB, median(lat), median(draws), median(stepLat), nil
}
