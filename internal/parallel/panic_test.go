package parallel

import (
	"errors"
	"strings"
	"testing"
)

// A worker's panic is an error for that file, always: never a zero result
// with no error (issue 18: `stats` printed a zero result and exited 0).
func TestMapWorkerPanicIsAnErrorNamingTheFile(t *testing.T) {
	files := []string{"a.pickle", "b.pickle", "c.pickle"}
	for _, jobs := range []int{1, 3} {
		for range 20 {
			got, err := Map(files, Options{Jobs: jobs, Budget: 1 << 30, Cost: func(string) int64 { return 1 }}, func(i int, f string) (int, error) {
				if f == "b.pickle" {
					var m map[string]int
					m["x"] = 1 // a nil-map write: a runtime panic
				}
				return i + 1, nil
			})
			var p *PanicError
			if !errors.As(err, &p) {
				t.Fatalf("jobs=%d: err = %v, want a PanicError", jobs, err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "b.pickle: internal error: ") || strings.Contains(msg, "\n") {
				t.Errorf("jobs=%d: error %q, want one line naming b.pickle", jobs, msg)
			}
			if len(got) != 1 || got[0] != 1 {
				t.Errorf("jobs=%d: results %v, want the file before the failing one", jobs, got)
			}
		}
	}
}
