package webview

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/memstat/memstat/internal/testsnap"
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
