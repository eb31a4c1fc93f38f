package webview

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/testsnap"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/snapshot"
	"github.com/memstat/memstat/pkg/view"
)

// TestCompactServer: the server answers the same once it keeps the trace
// compact: the state pane after its cursor was dropped (it decodes the
// trace again), and a device built again from the compact trace.
func TestCompactServer(t *testing.T) {
	fx := testsnap.Build(t)
	n := fx.Snapshot.Trace(0).Len()
	s := &Server{Snap: fx.Snapshot, Token: "t"}
	full := fx.Snapshot
	get := func(path string) string {
		t.Helper()
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path+"&token=t", nil))
		b, _ := io.ReadAll(w.Result().Body)
		if w.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", path, w.Code, b)
		}
		return string(b)
	}
	paths := []string{
		"/api/window?device=0&from=0&to=-1&width=60&top=5",
		"/api/window?device=0&from=2&to=40&width=9&by=stack&top=3",
		"/api/state?device=0&at=" + strconv.Itoa(fx.PeakIndex),
		"/api/state?device=0&at=" + strconv.Itoa(fx.PeakIndex+1),
		"/api/events?device=0&from=0&count=1000",
		"/api/overview?device=0",
		"/api/alloc?device=0&id=0",
		"/api/info?x=1",
	}
	first := map[string]string{}
	for _, p := range paths {
		first[p] = get(p)
	}
	// The server keeps the snapshot's own compact trace (no second
	// encoding) and lets the snapshot's trace fields go.
	if s.Snap == full || s.Snap.Trace(0).Len() != 0 || s.traces[0] != full.Trace(0) || s.traces[0].Len() != n {
		t.Fatal("the server kept the snapshot's trace or encoded it again")
	}
	s.dropCursor()
	if s.cursor != nil {
		t.Fatal("dropCursor kept the cursor")
	}
	s.mu.Lock()
	s.model = nil // the next request builds the device again, from the compact trace
	s.mu.Unlock()
	for _, p := range paths {
		if got := get(p); got != first[p] {
			t.Errorf("%s changed:\n%.300s\n%.300s", p, first[p], got)
		}
	}
}

// stateAnswer is /api/state's JSON.
type stateAnswer struct {
	Moment   analysis.Moment      `json:"moment"`
	Total    analysis.SegmentInfo `json:"total"`
	Count    int                  `json:"count"`
	Largest  int64                `json:"largest"`
	Pools    []string             `json:"pools"`
	SumFrom  int                  `json:"summary_from"`
	Summary  [][9]uint64          `json:"summary"`
	From     int                  `json:"from"`
	Segments []view.StateSegment  `json:"segments"`
}

// TestWriteState: a state answered in parts (the blocks of a few
// segments each, with or without the summary of the rows around them)
// adds up to the whole state StateOf shapes (as `segments --at N`:
// pkg/view's tests): every segment's blocks in exactly one part, every
// summary row the segment's figures. Besides the fixture's states, one of
// 3,000 segments, more than a summary spans.
func TestWriteState(t *testing.T) {
	fx := testsnap.Build(t)
	m, err := view.Build(fx.Snapshot, 0, analysis.NewFrames(fx.Snapshot.Stacks, false))
	if err != nil {
		t.Fatal(err)
	}
	cur := m.NewStateCursor()
	var states []*analysis.State
	for _, i := range []int{-1, 0, fx.PeakIndex, m.Entries() - 1} {
		st, err := cur.At(i)
		if err != nil {
			t.Fatal(err)
		}
		states = append(states, st)
	}
	big := &analysis.State{Index: -1}
	for k := range 3000 {
		addr, size := uint64(1<<40+k<<22), int64(2<<20+k%3*(2<<20))
		big.Segments = append(big.Segments, snapshot.Segment{Address: addr, TotalSize: size, Pool: snapshot.Pool(k % 2), Stream: int64(k % 3), Expandable: k%5 == 0,
			Blocks: []snapshot.Block{{Address: addr, Size: size / 2}, {Address: addr + uint64(size/2), Size: size / 2}}})
	}
	states = append(states, big)
	parted := false
	for _, st := range states {
		i := st.Index
		whole := m.StateOf(st)
		wantJSON, _ := json.Marshal(whole.Segments)
		pers := []int{MaxStateSegments, 2, 1}
		if len(whole.Segments) > 2*SummaryAround {
			pers = []int{MaxStateSegments, 700}
		}
		for _, per := range pers {
			var segs []view.StateSegment
			for from := 0; from == 0 || from < len(whole.Segments); from += per {
				var buf bytes.Buffer
				// Parts of the big state carry the summary around them; the
				// fixture's, after the first, none.
				withSummary := from == 0 || len(whole.Segments) > 2*SummaryAround
				if err := writeState(&buf, m.StateStream(st), StatePart{From: from, Count: per, Summary: withSummary}); err != nil {
					t.Fatal(err)
				}
				var a stateAnswer
				if err := json.Unmarshal(buf.Bytes(), &a); err != nil {
					t.Fatalf("entry %d, segments %d+%d: %v\n%.300s", i, from, per, err, buf.String())
				}
				if a.Count != len(whole.Segments) || a.From != from || a.Moment != whole.Moment || a.Total.Size != whole.Total.Size ||
					a.Total.Allocated != whole.Total.Allocated || len(a.Segments) > per {
					t.Errorf("entry %d, segments %d+%d: count %d from %d, %d segments, total %d; want %d segments, total %d",
						i, from, per, a.Count, a.From, len(a.Segments), a.Total.Size, len(whole.Segments), whole.Total.Size)
				}
				segs = append(segs, a.Segments...)
				if from > 0 {
					parted = true
				}
				if !withSummary {
					if a.Summary != nil {
						t.Errorf("entry %d: a part without the summary has one", i)
					}
					continue
				}
				lo, hi := max(0, from-SummaryAround), min(len(whole.Segments), from+per+SummaryAround)
				if a.SumFrom != lo || len(a.Summary) != hi-lo {
					t.Fatalf("entry %d, segments %d+%d: summary rows %d+%d, want %d-%d of %d", i, from, per, a.SumFrom, len(a.Summary), lo, hi, len(whole.Segments))
				}
				var largest int64
				for _, s := range whole.Segments {
					largest = max(largest, s.Size)
				}
				for k := lo; k < hi; k++ {
					s := whole.Segments[k]
					r := a.Summary[k-lo]
					exp := uint64(0)
					if s.Expandable {
						exp = 1
					}
					want := [9]uint64{s.Address, uint64(s.Size), uint64(s.Allocated), uint64(s.Pending), uint64(s.Free), uint64(len(s.Blocks)), r[6], uint64(s.Stream), exp}
					if r != want || int(r[6]) >= len(a.Pools) || a.Pools[r[6]] != s.Pool {
						t.Errorf("entry %d, segment %d: summary %v (pools %v), want %v in pool %s", i, k, r, a.Pools, want, s.Pool)
					}
				}
				if a.Largest != largest {
					t.Errorf("entry %d: largest %d, want %d", i, a.Largest, largest)
				}
			}
			if got, _ := json.Marshal(segs); string(got) != string(wantJSON) {
				t.Errorf("entry %d in parts of %d:\n%.400s\nwant\n%.400s", i, per, got, wantJSON)
			}
		}
	}
	if !parted {
		t.Fatal("no state of the fixture has two segments: nothing was answered in parts")
	}
}

// TestStateRequests: /api/state checks its part and answers the blocks
// of the segments asked for; asking for other segments of the same
// state uses the state the server kept, not the cursor again.
func TestStateRequests(t *testing.T) {
	fx := testsnap.Build(t)
	s := &Server{Snap: fx.Snapshot, Token: "t"}
	get := func(path string) (int, string) {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path+"&token=t", nil))
		b, _ := io.ReadAll(w.Result().Body)
		return w.Code, string(b)
	}
	at := "/api/state?device=0&at=" + strconv.Itoa(fx.PeakIndex)
	for _, q := range []string{"&count=-1", "&from=-2", "&count=" + strconv.Itoa(MaxStateSegments+1)} {
		if code, b := get(at + q); code != http.StatusBadRequest || !strings.Contains(b, "count") {
			t.Errorf("%s: %d %s, want 400 naming the part", q, code, b)
		}
	}
	code, b := get(at + "&from=1&count=1&summary=0")
	var a stateAnswer
	if code != http.StatusOK || json.Unmarshal([]byte(b), &a) != nil {
		t.Fatalf("%d %s", code, b)
	}
	if a.From != 1 || len(a.Segments) != 1 || a.Summary != nil || a.Count < 2 {
		t.Fatalf("segment 1 alone: from %d, %d segments, summary %v, count %d", a.From, len(a.Segments), a.Summary, a.Count)
	}
	kept := s.state
	s.cursor = nil // a request for the same entry must not need it
	if code, b = get(at + "&from=0&count=1"); code != http.StatusOK || s.state != kept {
		t.Fatalf("the same entry again: %d %.200s (state kept: %v)", code, b, s.state == kept)
	}
	if code, b = get(at + "&from=1000"); code != http.StatusOK || !strings.Contains(b, `"segments":[]`) {
		t.Errorf("past the last segment: %d %.300s, want no segment", code, b)
	}
}
