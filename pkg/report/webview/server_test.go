package webview

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/memstat/memstat/internal/testsnap"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/view"
)

// TestCompactServer: the server answers the same once it keeps the trace
// compact: the state pane after its cursor was dropped (it decodes the
// trace again), and a device built again from the compact trace.
func TestCompactServer(t *testing.T) {
	fx := testsnap.Build(t)
	n := len(fx.Snapshot.Trace(0))
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
	if s.Snap == full || s.Snap.Trace(0) != nil || s.traces[0].Len() != n {
		t.Fatal("the server kept the snapshot's trace")
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

// TestWriteState: the state written one segment at a time is, byte for
// byte, what json.Encoder writes of the whole view.State.
func TestWriteState(t *testing.T) {
	fx := testsnap.Build(t)
	m, err := view.Build(fx.Snapshot, 0, analysis.NewFrames(fx.Snapshot.Stacks, false))
	if err != nil {
		t.Fatal(err)
	}
	cur := m.NewStateCursor()
	for _, i := range []int{-1, 0, fx.PeakIndex, m.Entries() - 1} {
		st, err := cur.At(i)
		if err != nil {
			t.Fatal(err)
		}
		var want, got bytes.Buffer
		if err := json.NewEncoder(&want).Encode(m.StateOf(st)); err != nil {
			t.Fatal(err)
		}
		if err := writeState(&got, m.StateStream(st)); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("entry %d:\n%.400s\nwant\n%.400s", i, got.String(), want.String())
		}
	}
	// No segment at all.
	var want, got bytes.Buffer
	empty := &analysis.State{Index: -1}
	json.NewEncoder(&want).Encode(m.StateOf(empty))
	writeState(&got, m.StateStream(empty))
	if got.String() != want.String() {
		t.Errorf("no segment: %s, want %s", got.String(), want.String())
	}
}
