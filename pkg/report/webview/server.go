// Package webview serves `memstat view`: one page (hand-written script and
// style, inline, embedded in the binary; no outside request) and the JSON
// it asks for, computed by pkg/view at the level of detail the screen can
// show. Every request must carry the page's random token, as Jupyter's
// do; the command binds the server to the loopback interface only.
//
// The same page, with one pre-decimated window inlined instead of a
// server, is the report's interactive timeline (Static).
package webview

import (
	"bufio"
	"crypto/rand"
	"crypto/subtle"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/report"
	"github.com/memstat/memstat/pkg/snapshot"
	"github.com/memstat/memstat/pkg/view"
)

//go:embed view.html
var pageHTML string

//go:embed body.html
var bodyHTML string

//go:embed view.js
var pageJS string

//go:embed view.css
var pageCSS string

// NewToken returns a random token for the URL (128 bits, hex).
func NewToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// Server answers the page's requests for one snapshot.
type Server struct {
	File string
	// Snap is the snapshot served; once the first device is built, the
	// server keeps every trace compact and replaces Snap with the
	// snapshot without them (view.Bare), so that the caller's copy can
	// be collected.
	Snap  *snapshot.Snapshot
	Token string
	// AllFrames shows internal frames in stacks.
	AllFrames bool
	// First is the device the page opens (-1: the first with a trace).
	First int
	// CursorHeld, if set, is called when the state pane's cursor (a
	// second replay, from the compact trace) is made (true) and
	// let go (false), with the server's lock held: the command sets the
	// heap limit for its replay while it is held.
	CursorHeld func(held bool)
	// Config is the allocator configuration line the settings panel shows
	// per device (from the replay); filled as devices are built.
	mu     sync.Mutex
	device int
	model  *view.Model
	cursor *analysis.StateCursor
	// state is the last state the pane asked for (dropped with the
	// cursor).
	state  *view.StateStream
	config map[int]string
	// traces holds every device's trace, compact, once the first model
	// is built; Snap is then the snapshot without them (view.Bare).
	traces []*snapshot.Trace
	// idle drops the cursor (and its simulator) once the state
	// pane has asked for nothing for CursorIdle.
	idle *time.Timer
}

// CursorIdle is how long the server keeps the state pane's replay (a
// second simulator) after its last
// request: stepping with the arrow keys costs one entry each while it is
// kept; the next request after it is dropped replays from the start.
const CursorIdle = time.Minute

// Device is one device the picker lists.
type Device struct {
	Device  int  `json:"device"`
	Entries int  `json:"entries"`
	Traced  bool `json:"traced"`
}

// Info is what the page asks for first.
type Info struct {
	File     string   `json:"file"`
	First    int      `json:"first"`
	Devices  []Device `json:"devices"`
	Settings []KV     `json:"settings"`
	Warnings []string `json:"warnings"`
}

// KV is one allocator setting.
type KV struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// ServeHTTP checks the token and routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok := r.URL.Query().Get("token")
	if s.Token == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(s.Token)) != 1 {
		http.Error(w, "403 forbidden: open the URL memstat view printed (it carries the token)", http.StatusForbidden)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch r.URL.Path {
	case "/":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		// The page may load nothing from anywhere but this server.
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
		fmt.Fprint(w, Page(""))
		return
	case "/api/info":
		s.reply(w, s.info())
		return
	}
	dev, err := strconv.Atoi(r.URL.Query().Get("device"))
	if err != nil {
		http.Error(w, "device: "+err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.modelOf(dev)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q := r.URL.Query()
	num := func(key string, def int) int {
		if v, err := strconv.Atoi(q.Get(key)); err == nil {
			return v
		}
		return def
	}
	switch r.URL.Path {
	case "/api/window":
		by, err := view.ParseGroupBy(q.Get("by"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		win, err := m.Window(view.Request{From: num("from", 0), To: num("to", -1), Width: num("width", 1000), By: by, Top: min(num("top", 100), 1000)})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.reply(w, win)
	case "/api/overview":
		s.reply(w, Overview(m))
	case "/api/alloc":
		k := num("id", -1)
		if k < 0 || k >= m.Len() {
			http.Error(w, "no such allocation", http.StatusNotFound)
			return
		}
		s.reply(w, m.Describe(k))
	case "/api/state":
		at := num("at", -1)
		if at < -1 || at >= m.Entries() {
			http.Error(w, fmt.Sprintf("no trace entry %d (the trace has %d)", at, m.Entries()), http.StatusBadRequest)
			return
		}
		part := StatePart{From: num("from", 0), Count: num("count", DefaultStateSegments), Summary: q.Get("summary") != "0"}
		if part.From < 0 || part.Count < 0 || part.Count > MaxStateSegments {
			http.Error(w, fmt.Sprintf("segments from %d, count %d: want from >= 0 and 0 <= count <= %d", part.From, part.Count, MaxStateSegments), http.StatusBadRequest)
			return
		}
		ss, err := s.stateAt(m, at)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if err := writeState(w, ss, part); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	case "/api/events":
		s.reply(w, m.Events(num("from", 0), min(num("count", 50), 1000)))
	default:
		http.NotFound(w, r)
	}
}

// StatePart is how much of a state one answer of /api/state carries: the
// blocks of the segments From..From+Count-1 (in address order), those the
// page draws, and, with Summary, one row of figures for each segment
// within SummaryAround rows of them. A state of a large run has tens of
// thousands of segments and a million blocks (hundreds of megabytes of
// JSON); the page shows a few dozen rows at a time, draws the rows next
// to them from their summary while it asks for their blocks as they
// scroll into view, so a step costs what the screen shows.
type StatePart struct {
	From, Count int
	Summary     bool
}

// DefaultStateSegments is the blocks an answer carries when the page does
// not say (a screenful), MaxStateSegments the most it may ask for;
// SummaryAround is how many rows on either side of them get a summary row.
const (
	DefaultStateSegments = 64
	MaxStateSegments     = 1000
	SummaryAround        = 1000
)

// writeState writes part of a state:
//
//	{"moment": {...}, "total": {...}, "count": segments, "largest": bytes of the largest,
//	 "summary_from": first row summarized, "summary": [[address, size, allocated, pending free, free, blocks, pool, stream, expandable], ...],
//	 "pools": [names the pool column indexes],
//	 "from": From, "segments": [view.StateSegment of From.., at most Count]}
//
// summary_from, summary and pools only when part.Summary; a summary row
// is a few dozen bytes where a segment's blocks are tens of bytes each.
// The segments are written one at a time: the encoder would hold them
// whole, besides every block shaped.
func writeState(w io.Writer, ss *view.StateStream, part StatePart) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	put := func(prefix string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		bw.WriteString(prefix)
		_, err = bw.Write(b)
		return err
	}
	if err := put(`{"moment":`, ss.Moment); err != nil {
		return err
	}
	if err := put(`,"total":`, ss.Total); err != nil {
		return err
	}
	n := ss.Len()
	var largest int64
	for k := range n {
		largest = max(largest, ss.Info(k).Size)
	}
	from := min(part.From, n)
	to := min(from+part.Count, n)
	buf := fmt.Appendf(nil, `,"count":%d,"largest":%d`, n, largest)
	if part.Summary {
		pools := map[string]int{}
		var names []string
		lo, hi := max(0, from-SummaryAround), min(n, to+SummaryAround)
		buf = fmt.Appendf(buf, `,"summary_from":%d,"summary":[`, lo)
		for k := lo; k < hi; k++ {
			si := ss.Info(k)
			p, ok := pools[si.Pool]
			if !ok {
				p = len(names)
				pools[si.Pool] = p
				names = append(names, si.Pool)
			}
			if k > lo {
				buf = append(buf, ',')
			}
			buf = append(buf, '[')
			buf = strconv.AppendUint(buf, si.Address, 10)
			for _, v := range [...]int64{si.Size, si.Allocated, si.Pending, si.Free, int64(len(si.Blocks)), int64(p), si.Stream} {
				buf = append(buf, ',')
				buf = strconv.AppendInt(buf, v, 10)
			}
			if si.Expandable {
				buf = append(buf, ",1]"...)
			} else {
				buf = append(buf, ",0]"...)
			}
			if len(buf) > 32<<10 {
				bw.Write(buf)
				buf = buf[:0]
			}
		}
		buf = append(buf, ']')
		bw.Write(buf)
		buf = buf[:0]
		if names == nil {
			names = []string{}
		}
		if err := put(`,"pools":`, names); err != nil {
			return err
		}
	} else {
		bw.Write(buf)
		buf = buf[:0]
	}
	fmt.Fprintf(bw, `,"from":%d,"segments":[`, from)
	for k := from; k < to; k++ {
		prefix := ","
		if k == from {
			prefix = ""
		}
		if err := put(prefix, ss.Segment(k)); err != nil {
			return err
		}
	}
	bw.WriteString("]}\n")
	return bw.Flush()
}

// stateAt is the state after entry at, shaped a segment at a time; the
// last one is kept with the cursor, so that the page's requests for the
// blocks of other segments of the same state cost no replay and no copy.
func (s *Server) stateAt(m *view.Model, at int) (*view.StateStream, error) {
	if s.cursor == nil {
		s.cursor = m.NewStateCursor()
		s.cursorHeld(true)
	}
	s.keepCursor()
	if s.state != nil && s.state.Moment.Index == at {
		return s.state, nil
	}
	s.state = nil
	st, err := s.cursor.At(at)
	if err != nil {
		return nil, err
	}
	s.state = m.StateStream(st)
	return s.state, nil
}

func (s *Server) reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// Model returns the model of a device, building it on first use; only the
// device last asked for is kept, so memory stays that of one device.
func (s *Server) Model(device int) (*view.Model, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.modelOf(device)
}

func (s *Server) modelOf(device int) (*view.Model, error) {
	if s.model != nil && s.device == device {
		return s.model, nil
	}
	if device < 0 || device >= s.Snap.Devices() {
		return nil, fmt.Errorf("no device %d (the snapshot has %d)", device, s.Snap.Devices())
	}
	if s.cursor != nil {
		s.cursorHeld(false)
	}
	s.model, s.cursor, s.state = nil, nil, nil
	snap := s.Snap
	if s.traces != nil {
		snap = view.WithTrace(s.Snap, device, s.traces[device])
	}
	// The model keeps its own figures (4 bytes an entry), not the
	// Replayed's (16).
	m, err := view.BuildObserved(snap, device, analysis.NewFrames(s.Snap.Stacks, s.AllFrames), analysis.Want{NoFigures: true}, nil)
	if err != nil {
		return nil, err
	}
	// The server holds the model for hours: it keeps every device's
	// trace (the snapshot's own, already compact: no second encoding)
	// and lets the rest of the snapshot's trace fields go.
	if s.traces == nil {
		s.traces = make([]*snapshot.Trace, s.Snap.Devices())
		for d := range s.traces {
			s.traces[d] = s.Snap.Trace(d)
		}
		s.Snap = view.Bare(s.Snap)
	}
	if err := m.Compact(s.traces[device], s.Snap); err != nil {
		return nil, err
	}
	s.model, s.device = m, device
	if s.config == nil {
		s.config = map[int]string{}
	}
	s.config[device] = m.Replayed.Config.String()
	return m, nil
}

// keepCursor keeps the state cursor for CursorIdle from now.
func (s *Server) keepCursor() {
	if s.idle == nil {
		s.idle = time.AfterFunc(CursorIdle, s.dropCursor)
		return
	}
	s.idle.Reset(CursorIdle)
}

func (s *Server) cursorHeld(held bool) {
	if s.CursorHeld != nil {
		s.CursorHeld(held)
	}
}

func (s *Server) dropCursor() {
	s.mu.Lock()
	had := s.cursor != nil
	s.cursor, s.state = nil, nil
	if had {
		s.cursorHeld(false)
	}
	s.mu.Unlock()
	if had {
		debug.FreeOSMemory() // the simulator and the state, now
	}
}

func (s *Server) info() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := Info{File: s.File, First: s.First, Warnings: s.Snap.Warnings, Settings: Settings(s.Snap)}
	for d := range s.Snap.Devices() {
		n := s.Snap.Trace(d).Len()
		if s.traces != nil {
			n = s.traces[d].Len()
		}
		in.Devices = append(in.Devices, Device{Device: d, Entries: n, Traced: n > 0})
	}
	for d, c := range s.config {
		in.Settings = append(in.Settings, KV{Key: fmt.Sprintf("simulated configuration (device %d)", d), Value: c})
	}
	return in
}

// Settings lists the snapshot's allocator_settings for the settings panel.
func Settings(s *snapshot.Snapshot) []KV {
	st := s.Settings
	if st == nil {
		return []KV{{Key: "allocator_settings", Value: "not in the file (PyTorch before 2.3)"}}
	}
	split := "unlimited"
	if st.MaxSplitSize >= 0 {
		split = report.Size(st.MaxSplitSize)
	}
	out := []KV{
		{"PYTORCH_CUDA_ALLOC_CONF", st.AllocConf},
		{"max_split_size", split},
		{"garbage_collection_threshold", strconv.FormatFloat(st.GarbageCollectionThreshold, 'g', -1, 64)},
		{"expandable_segments", strconv.FormatBool(st.ExpandableSegments)},
		{"release_lock_on_cudamalloc", strconv.FormatBool(st.ReleaseLockOnCudaMalloc)},
	}
	for _, kv := range st.Other {
		out = append(out, KV{kv.Key, kv.Value})
	}
	return out
}

// OverviewData is what the page needs once per device: the whole trace
// at minimap resolution, the marks and the annotation lanes.
type OverviewData struct {
	Device  int          `json:"device"`
	Entries int          `json:"entries"`
	Window  *view.Window `json:"window"`
	Marks   view.Marks   `json:"marks"`
	Phases  []view.Phase `json:"phases"`
	// Lanes is the number of annotation rows.
	Lanes int `json:"lanes"`
}

// OverviewWidth is the minimap's resolution.
const OverviewWidth = 1200

// Overview summarizes a device for the minimap, the markers and the
// annotation lane.
func Overview(m *view.Model) *OverviewData {
	w, _ := m.Window(view.Request{To: -1, Width: OverviewWidth, By: view.ByAllocation, Top: 0})
	o := &OverviewData{Device: m.Replayed.Device, Entries: m.Entries(), Window: w, Marks: m.Marks(), Phases: m.Phases()}
	if o.Phases == nil {
		o.Phases = []view.Phase{}
	}
	for _, p := range o.Phases {
		o.Lanes = max(o.Lanes, p.Lane+1)
	}
	return o
}
