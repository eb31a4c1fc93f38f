// Command viewbench measures `memstat view` on one snapshot (bench/view.sh
// runs it): the time from starting the server to the page's first
// picture (the URL printed, then every request the page makes before it
// draws: the page, info, the device's overview and its first window),
// the latency of zoom and pan requests at several levels of detail, and
// the server's peak RSS. It prints one line of JSON.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type result struct {
	FirstPageS float64 `json:"first_page_s"`
	// FirstPageCPUS is the server's CPU time (user and system) up to
	// the first page: on a busy machine, a steadier figure than the
	// wall clock to set against stats' own CPU time.
	FirstPageCPUS float64 `json:"first_page_cpu_s"`
	// FirstPageRSSKB is the server's peak RSS once the first page is
	// served; PeakRSSKB the peak at the end (after the states too).
	FirstPageRSSKB int64 `json:"first_page_rss_kb"`
	// ServingRSSKB is the server's resident set (VmRSS) once the first
	// page is served: what it holds while it serves, without the
	// load's and the build's peak.
	ServingRSSKB int64   `json:"serving_rss_kb"`
	URLS         float64 `json:"url_s"`
	Entries      int     `json:"entries"`
	Requests     int     `json:"zoom_pan_requests"`
	MedianMS     float64 `json:"zoom_pan_median_ms"`
	P90MS        float64 `json:"zoom_pan_p90_ms"`
	MaxMS        float64 `json:"zoom_pan_max_ms"`
	FirstGroupMS float64 `json:"first_group_by_ms"`
	StateMS      float64 `json:"state_at_peak_ms"`
	StepMS       float64 `json:"state_next_entry_ms"`
	// StateKB and StepKB are the sizes of those two answers (the JSON
	// the page parses on each step).
	StateKB   float64 `json:"state_at_peak_kb"`
	StepKB    float64 `json:"state_next_entry_kb"`
	PeakRSSKB int64   `json:"peak_rss_kb"`
	// JSHeapMB is the page's largest JavaScript heap (Chromium's
	// Performance.getMetrics JSHeapUsedSize) over the first picture, the
	// zooms and pans of the browser pass and its steps through the
	// allocator state; -1 without -chromium.
	JSHeapMB float64 `json:"js_heap_mb"`
	// BrowserZoomMS is the median time from a wheel zoom or a pan in
	// the browser to the redrawn window (request and drawing).
	BrowserZoomMS float64 `json:"browser_zoom_median_ms"`
	// BrowserDrawMS is the median time the page spent drawing one.
	BrowserDrawMS float64 `json:"browser_draw_median_ms"`
	WindowBytesKB float64 `json:"whole_window_kb"`
	// BrowserStepMS is the median time from the arrow key to the next
	// entry's allocator state drawn, stepping from the peak (-1 without
	// -chromium).
	BrowserStepMS float64 `json:"browser_state_step_median_ms"`
}

func main() {
	bin := flag.String("bin", "bin/memstat", "memstat binary")
	n := flag.Int("requests", 40, "zoom and pan requests")
	width := flag.Int("width", 1300, "columns per window (a wide screen's plot)")
	chromium := flag.String("chromium", "", "headless Chromium to measure the page's JS heap with (empty: skip)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: viewbench [-bin B] [-requests N] FILE")
		os.Exit(2)
	}
	if err := run(*bin, flag.Arg(0), *n, *width, *chromium); err != nil {
		fmt.Fprintln(os.Stderr, "viewbench:", err)
		os.Exit(1)
	}
}

func run(bin, file string, n, width int, chromium string) error {
	start := time.Now()
	cmd := exec.Command(bin, "view", file, "--no-open")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
	}()
	var url string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "memstat view: "); ok {
			url = u
			break
		}
	}
	if url == "" {
		return fmt.Errorf("memstat view printed no URL")
	}
	go io.Copy(io.Discard, out)
	var res result
	res.URLS = time.Since(start).Seconds()
	base, tok, _ := strings.Cut(url, "/?token=")
	get := func(path string, q string) ([]byte, time.Duration, error) {
		t := time.Now()
		r, err := http.Get(base + path + "?token=" + tok + q)
		if err != nil {
			return nil, 0, err
		}
		defer r.Body.Close()
		b, err := io.ReadAll(r.Body)
		if r.StatusCode != http.StatusOK {
			return nil, 0, fmt.Errorf("%s: %s: %s", path, r.Status, b)
		}
		return b, time.Since(t), err
	}
	if _, _, err := get("/", ""); err != nil {
		return err
	}
	b, _, err := get("/api/info", "")
	if err != nil {
		return err
	}
	var info struct {
		First int `json:"first"`
	}
	json.Unmarshal(b, &info)
	dev := "&device=" + strconv.Itoa(info.First)
	b, _, err = get("/api/overview", dev)
	if err != nil {
		return err
	}
	var ov struct {
		Entries int `json:"entries"`
		Marks   struct {
			PeakAllocated struct {
				Index int `json:"index"`
			} `json:"peak_allocated"`
		} `json:"marks"`
	}
	json.Unmarshal(b, &ov)
	b, _, err = get("/api/window", fmt.Sprintf("%s&from=0&to=-1&width=%d&by=allocation&top=300", dev, width))
	if err != nil {
		return err
	}
	res.FirstPageS = time.Since(start).Seconds()
	res.FirstPageCPUS = cpuSeconds(cmd.Process.Pid)
	res.FirstPageRSSKB = vmHWM(cmd.Process.Pid)
	res.ServingRSSKB = procStatus(cmd.Process.Pid, "VmRSS:")
	res.WindowBytesKB = float64(len(b)) / 1024
	res.Entries = ov.Entries

	// Zoom and pan: windows from the whole trace down to a few hundred
	// entries, at random places, as a user's wheel and drags ask for them.
	rng := rand.New(rand.NewPCG(1, 1))
	var lat []float64
	for i := range n {
		span := max(ov.Entries>>(i%12), 200)
		from := rng.IntN(max(ov.Entries-span, 1))
		_, d, err := get("/api/window", fmt.Sprintf("%s&from=%d&to=%d&width=%d&by=allocation&top=300", dev, from, from+span-1, width))
		if err != nil {
			return err
		}
		lat = append(lat, float64(d.Microseconds())/1000)
	}
	_, d, err := get("/api/window", fmt.Sprintf("%s&from=0&to=-1&width=%d&by=stack&top=40", dev, width))
	if err != nil {
		return err
	}
	res.FirstGroupMS = float64(d.Microseconds()) / 1000
	for i := range n / 4 {
		span := max(ov.Entries>>(i%12), 200)
		from := rng.IntN(max(ov.Entries-span, 1))
		_, d, err := get("/api/window", fmt.Sprintf("%s&from=%d&to=%d&width=%d&by=stack&top=40", dev, from, from+span-1, width))
		if err != nil {
			return err
		}
		lat = append(lat, float64(d.Microseconds())/1000)
	}
	slices.Sort(lat)
	res.Requests = len(lat)
	res.MedianMS = lat[len(lat)/2]
	res.P90MS = lat[len(lat)*9/10]
	res.MaxMS = lat[len(lat)-1]
	peak := ov.Marks.PeakAllocated.Index
	if b, d, err = get("/api/state", fmt.Sprintf("%s&at=%d", dev, peak)); err != nil {
		return err
	}
	res.StateMS, res.StateKB = float64(d.Microseconds())/1000, float64(len(b))/1024
	if b, d, err = get("/api/state", fmt.Sprintf("%s&at=%d", dev, min(peak+1, ov.Entries-1))); err != nil {
		return err
	}
	res.StepMS, res.StepKB = float64(d.Microseconds())/1000, float64(len(b))/1024
	res.PeakRSSKB = vmHWM(cmd.Process.Pid)
	res.JSHeapMB, res.BrowserStepMS = -1, -1
	if chromium != "" {
		// The page selects entries from 0 (a peak before the trace is
		// entry -1).
		at := max(peak, 0)
		steps := min(5, ov.Entries-1-at)
		if res.JSHeapMB, res.BrowserZoomMS, res.BrowserDrawMS, res.BrowserStepMS, err = browse(chromium, url, n, at, steps); err != nil {
			return fmt.Errorf("chromium: %w", err)
		}
		res.PeakRSSKB = vmHWM(cmd.Process.Pid)
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// cpuSeconds is a process's user and system time so far, from /proc (in
// clock ticks of 1/100 s, Linux's USER_HZ).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The fields after the command name, which may hold spaces.
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return -1
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

// vmHWM is a process's peak resident set (kB), from /proc.
func vmHWM(pid int) int64 { return procStatus(pid, "VmHWM:") }

// procStatus is one kB figure of a process's /proc status.
func procStatus(pid int, key string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return -1
}
