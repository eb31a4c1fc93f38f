package check_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/pkg/snapshot"
)

// A recording whose CUDA graphs and MemPool hold 404 MiB of the 976 MiB
// reserved at the peak (internal/command/testdata/cuda_graphs.mem): a
// budget the default pools alone keep (572 MiB) but the pools break must
// fail, and private_pool_reserved gates the pools' own memory.
func TestBudgetsCountPrivatePools(t *testing.T) {
	p, _ := fixture.RecordFile(t, "cuda_graphs.mem", "graphs.pickle")
	for _, tc := range []struct {
		rule string
		code int
	}{
		{"peak_reserved=900MiB", command.ExitCheckFailed},
		{"peak_reserved=976MiB", 0},
		{"private_pool_reserved=400MiB", command.ExitCheckFailed},
		{"private_pool_reserved=404MiB", 0},
		{"current_reserved=800MiB", command.ExitCheckFailed},
	} {
		code, out, errOut := memstat(t, nil, "check", p, "--max", tc.rule)
		if code != tc.code || errOut != "" {
			t.Errorf("--max %s: exit %d (want %d), stderr %q\n%s", tc.rule, code, tc.code, errOut, out)
		}
	}

	// The same state without its trace: the current figures count every
	// pool's segments, with one warning line at most.
	s, err := snapshot.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	s.Traces = nil
	bare := filepath.Join(t.TempDir(), "bare.pickle")
	if err := snapshot.WriteFile(bare, s); err != nil {
		t.Fatal(err)
	}
	var reserved int64
	pools := map[snapshot.PoolID]bool{}
	for _, sg := range s.Segments {
		reserved += sg.TotalSize
		pools[sg.PoolID] = true
	}
	if len(pools) < 3 {
		t.Fatalf("the recording has %d pools, want the default and two private ones", len(pools))
	}
	code, out, errOut := memstat(t, nil, "check", bare, "--max", "current_reserved=800MiB", "--json")
	if code != command.ExitCheckFailed || strings.Count(errOut, "\n") > 1 {
		t.Errorf("no trace: exit %d, stderr %q", code, errOut)
	}
	got := checkJSONOf(t, command.ExitCheckFailed, bare, "--max", "current_reserved=800MiB")
	if r := got.Files[0].Devices[0].Results[0]; int64(r.Actual) != reserved {
		t.Errorf("no trace: current_reserved %v, segments add up to %d\n%s", r.Actual, reserved, out)
	}
}

// At 2.8 the trace carries no pool_id, so the pools' peak is the bound
// from their memory at the end to the device's peak, 308-976 MiB (the
// true peak is 404 MiB). A rule passes only if the whole bound is within
// its limit, and its output says the figure is a bound.
func TestPrivatePoolBoundGate(t *testing.T) {
	p, _ := fixture.RecordFile(t, "cuda_graphs.mem", "graphs.pickle", "--torch-version", "2.8")
	for _, tc := range []struct {
		rule string
		code int
	}{
		{"private_pool_reserved=300MiB", command.ExitCheckFailed},
		{"private_pool_reserved=420MiB", command.ExitCheckFailed},
		{"private_pool_reserved=975MiB", command.ExitCheckFailed},
		{"private_pool_reserved=976MiB", 0},
	} {
		code, out, errOut := memstat(t, nil, "check", p, "--max", tc.rule)
		if code != tc.code || errOut != "" || !strings.Contains(out, "308.0 MiB-976.0 MiB") {
			t.Errorf("--max %s: exit %d (want %d), stderr %q\n%s", tc.rule, code, tc.code, errOut, out)
		}
	}
}
