// Package view is `memstat view`: a local web server with one page to
// explore a snapshot interactively (pkg/report/webview), the heavy work
// done in Go at the level of detail of the screen (pkg/view).
package view

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/pkg/report/webview"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Options are `memstat view`'s inputs.
type Options struct {
	IO        *iostreams.IOStreams
	File      string
	Port      int
	NoOpen    bool
	Device    int
	AllFrames bool
	// At opens the page at a moment: "peak", "oom" or a trace entry.
	At string
	// Context stops the server when done (tests); the command also stops
	// on Ctrl-C (SIGINT) and SIGTERM.
	Context context.Context
	// Ready, if set, is called with the URL once the server listens.
	Ready func(url string)
}

// NewCmdView returns the view command. runF replaces runView in tests of
// flag parsing.
func NewCmdView(f *command.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "view FILE [--port N] [--no-open]",
		Short: "Explore a snapshot in the browser: timeline by allocation, details, allocator state at any event",
		Long: `Start a local web server on 127.0.0.1 and print the URL of one page:

  - the memory timeline: allocated memory as stacked bands, one per large
    allocation and the rest summed (or one per stack, frame, file,
    annotation or pool: "group by"), reserved memory as a line, the
    record_function ranges as a lane of labels, the peak and OOMs marked;
    wheel to zoom, drag to pan, the minimap to jump; each zoom asks the
    server for only what the screen can show, so traces of millions of
    events stay smooth;
  - hover or click an allocation: size, requested size, address, stream,
    pool, when it was allocated and freed, the annotation open then, and
    its stack, your own frames first;
  - the allocator state at any event (click the timeline, then the arrow
    keys): every segment and its blocks to scale, allocated, pending-free
    and free, as "memstat segments --at N" computes them;
  - a device picker and the allocator settings.

The URL carries a random token; requests without it get 403. The server
listens on the loopback interface only. Ctrl-C stops it. --at peak, --at oom
or --at N (a trace entry) opens the page at that moment, as #peak, #oom or
#entry=N at the end of the URL do: the moments memstat peak and memstat oom
report.`,
		Example: `  memstat view snapshot.pickle
  memstat view snapshot.pickle --port 8765 --no-open
  memstat view snapshot.pickle --at oom`,
		Args: command.OneSnapshot("memstat view FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			if opts.Port < 0 || opts.Port > 65535 {
				return command.FlagErrorf("--port must be between 0 (a free port) and 65535")
			}
			if _, err := fragment(opts.At); err != nil {
				return command.FlagErrorf("--at: %v", err)
			}
			if runF != nil {
				return runF(opts)
			}
			return runView(opts)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&opts.Port, "port", 0, "port to listen on, on 127.0.0.1 (0: a free port)")
	fl.BoolVar(&opts.NoOpen, "no-open", false, "print the URL without opening a browser")
	cmd.Flags().IntVar(&opts.Device, "device", -1, "open this device first (default: the first with a trace)")
	fl.StringVar(&opts.At, "at", "", "open at {peak|oom|N}: the peak, the first OOM or trace entry N")
	command.AddAllFramesFlag(cmd, &opts.AllFrames)
	return cmd
}

// Listen binds the loopback interface only: the page shows the program's
// stacks and file names, which are nobody else's business.
func Listen(port int) (net.Listener, error) {
	return net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
}

func runView(opts *Options) error {
	snap, err := command.LoadSnapshot(opts.IO.ErrOut, opts.File)
	if err != nil {
		return err
	}
	if opts.Device >= snap.Devices() {
		return fmt.Errorf("%s: no device %d (the snapshot has %d)", opts.File, opts.Device, snap.Devices())
	}
	token, err := webview.NewToken()
	if err != nil {
		return err
	}
	srv := &webview.Server{File: opts.File, Snap: snap, Token: token, AllFrames: opts.AllFrames}
	// Build the first device before printing the URL, so that the page
	// answers at once.
	first := opts.Device
	if first < 0 {
		for d := range snap.Devices() {
			if snap.Trace(d).Len() > 0 {
				first = d
				break
			}
		}
	}
	if first < 0 {
		return fmt.Errorf("%s: no device has a trace: there is no history to view (memstat segments shows the final state)", opts.File)
	}
	srv.First = first
	// The heap limit follows what is live: the snapshot, plus what the
	// build adds while it replays; then, once the model is built and the
	// build's garbage returned to the system, what the server holds plus
	// room for a request. Go's default lets the heap grow to twice what is
	// live between collections, and a server runs for hours.
	command.LimitHeapTo(footprint() + buildNeed(snap, first))
	cursor := cursorNeed(snap, first)
	if _, err := srv.Model(first); err != nil {
		return fmt.Errorf("%s: %w", opts.File, err)
	}
	serveGC(srv, cursor)
	ln, err := Listen(opts.Port)
	if err != nil {
		return fmt.Errorf("--port %d: %w", opts.Port, err)
	}
	frag, _ := fragment(opts.At)
	url := fmt.Sprintf("http://%s/?token=%s%s", ln.Addr(), token, frag)
	fmt.Fprintf(opts.IO.Out, "memstat view: %s\n", url)
	// stdout is buffered until a command returns; this one runs until
	// Ctrl-C, and its URL is what the user needs now.
	if err := opts.IO.Flush(); err != nil {
		return err
	}
	command.ReleaseStderr(opts.IO.ErrOut) // the user needs the address now
	fmt.Fprintf(opts.IO.ErrOut, "memstat: serving %s on 127.0.0.1 only; Ctrl-C stops\n", opts.File)
	if !opts.NoOpen {
		openBrowser(url)
	}
	if opts.Ready != nil {
		opts.Ready(url)
	}
	ctx := opts.Context
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := hs.Shutdown(shut); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	fmt.Fprintln(opts.IO.ErrOut, "memstat: view stopped")
	return nil
}

// What a device's build adds to the loaded snapshot while it replays:
// per trace entry, the model's allocated figure (4 B; reserved is kept
// as its changes, a few) and its share of the allocation intervals (22 B
// per alloc entry, about one entry in two); per block of the final
// segments, the simulator's block and its share of the free sets. An
// eighth more and 4 MiB: the room the replay's garbage (a block per
// allocation) is collected in. The model's live heap is mostly arrays
// without pointers, so a collection costs little and a small room is
// cheap (measured on record-1.75M: the first page's peak RSS 87 -> 70 MB
// for the same CPU time). The limit is soft: a build that needs more
// collects more often, and never fails.
const (
	buildHeapPerEntry = 4 + 12
	buildHeapPerBlock = 216 + 56
	// minServeRoom is the least room over what the server holds: a
	// window or an event list is a few hundred kilobytes.
	minServeRoom = 16 << 20
)

// buildNeed is what building device's model adds to the heap.
func buildNeed(s *snapshot.Snapshot, device int) int64 {
	blocks := 0
	for _, seg := range s.DeviceSegments(device) {
		blocks += len(seg.Blocks)
	}
	n := int64(s.Trace(device).Len())*buildHeapPerEntry + int64(blocks)*buildHeapPerBlock
	return n + n/8 + 4<<20
}

// What the state pane's cursor holds while it is kept (webview.CursorIdle):
// it replays from the snapshot's compact trace (nothing decoded ahead).
// While replay.New rebuilds the state before the trace, the two address
// sets its scan of the trace sizes for the allocations (touchScan in
// pkg/replay's start.go: 16 MB on record-1.75M); they are garbage once
// it seeds the simulator, which holds, per block, the block, its address
// table and free-set entries, and the state the pane shows: the copied
// segments and their allocation entries (measured on torch-100MB: 32 MB
// for 172k blocks).
const cursorHeapPerBlock = 192

// cursorNeed is what the state pane's cursor adds to the heap at most,
// and room for its garbage: half the simulator's need (a step copies the
// state the pane shows, every block: on torch-1GB, with a quarter, a
// step took 2 s of collections; with half, 1.2 s), at least 4 MiB.
func cursorNeed(s *snapshot.Snapshot, device int) int64 {
	blocks := 0
	for _, seg := range s.DeviceSegments(device) {
		blocks += len(seg.Blocks)
	}
	sim := int64(blocks) * cursorHeapPerBlock
	return max(touchSets(s.Trace(device).Count(snapshot.ActionAlloc)), sim) + max(sim/2, 4<<20)
}

// touchSets is what replay.New's two address sets take for a trace of
// allocs allocations: each sized for half of them and a sixteenth, at
// twice that in slots of 8 bytes, a power of two.
func touchSets(allocs int) int64 {
	n := allocs/2 + allocs/16
	size := int64(64)
	for size < int64(2*n+2) {
		size *= 2
	}
	return 2 * 8 * size
}

// serveGCPercent is GOGC while serving: the heap is what the server
// holds, and its windows make little garbage, so a collection when the
// heap has grown by a quarter (not Go's default, doubled) keeps the
// resident set near what is live at little cost. While the state pane's
// cursor is held, Go's default: its replay makes garbage by the
// simulator's block, and a quarter's growth of a large heap would
// collect dozens of times per state (measured on torch-1GB: the state at
// the peak took 3x as long).
const serveGCPercent = 25

// serveGC sets the collector for serving, once the build's garbage is
// returned: GOGC serveGCPercent (unless the user set GOGC; 100 while the
// state cursor is held) and the limit over what is live: room for a
// request (an eighth, at least minServeRoom); while the state pane's
// cursor is held, what it needs and room for its garbage (cursorNeed)
// instead, so that the collector takes it back before the heap grows by
// Go's default, to twice what is live. Measured (viewbench, VmHWM after
// the state at the peak and one step): record-1.75M 98 -> 84 MB,
// torch-1GB 1029 -> 912 MB (0.94x the file) for steps of 1.2 s instead
// of 0.2 s (each copies a state of 1.7 M blocks and now costs a
// collection).
func serveGC(srv *webview.Server, cursor int64) {
	live := footprint()
	serving := live + max(live/8, minServeRoom)
	held := live + cursor
	gogc := os.Getenv("GOGC") == ""
	if gogc {
		debug.SetGCPercent(serveGCPercent)
	}
	srv.CursorHeld = func(h bool) {
		if h {
			if gogc {
				debug.SetGCPercent(100)
			}
			command.LimitHeapTo(held)
			// The windows' garbage goes back to the system before the
			// replay's rebuild of the start state makes its large
			// tables: they take fresh pages, not the garbage's.
			debug.FreeOSMemory()
			return
		}
		if gogc {
			debug.SetGCPercent(serveGCPercent)
		}
		command.LimitHeapTo(serving)
	}
	command.LimitHeapTo(serving)
}

// footprint is the memory the Go runtime holds from the system, as the
// soft limit counts it (runtime/debug.SetMemoryLimit: every class but
// the heap returned to the system), once a collection has freed the
// garbage and the free heap is returned. Before the build, returning it
// rather than letting the build reuse it keeps the build's peak down
// (torch-1GB: 1115 MB rather than 1432 MB, for 19% more CPU time to the
// first page: the collector runs more often near the limit).
func footprint() int64 {
	debug.FreeOSMemory()
	ms := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(ms)
	return int64(ms[0].Value.Uint64()) - int64(ms[1].Value.Uint64())
}

// openBrowser asks the desktop to open the URL; without one (a server, a
// container) the printed URL is what the user opens.
func openBrowser(url string) {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", url)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", url)
	default:
		if _, err := exec.LookPath("xdg-open"); err != nil {
			return
		}
		cmd = exec.Command("xdg-open", url)
	}
	if cmd.Start() == nil {
		go cmd.Wait()
	}
}

// fragment is the URL fragment of --at.
func fragment(at string) (string, error) {
	switch at {
	case "":
		return "", nil
	case "peak", "oom":
		return "#" + at, nil
	}
	n, err := strconv.Atoi(at)
	if err != nil || n < 0 {
		return "", fmt.Errorf("%q: want peak, oom or a trace entry index", at)
	}
	return "#entry=" + strconv.Itoa(n), nil
}
