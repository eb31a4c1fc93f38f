package stats

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/check"
	"github.com/memstat/memstat/internal/command/peak"
	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/pkg/report"
	"github.com/memstat/memstat/pkg/snapshot"
)

// withoutTrace writes a copy of the snapshot at path with its traces
// dropped (as torch.cuda.memory._snapshot() gives when history was never
// recorded), after edit changes its segments, and returns the copy's path
// and its segments.
func withoutTrace(t *testing.T, path, name string, edit func(segs []snapshot.Segment)) (string, []*snapshot.Segment) {
	t.Helper()
	s, err := snapshot.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for d := range s.Traces {
		s.Traces[d] = nil
	}
	if edit != nil {
		edit(s.Segments)
	}
	out := filepath.Join(t.TempDir(), name)
	if err := snapshot.WriteFile(out, s); err != nil {
		t.Fatal(err)
	}
	back, err := snapshot.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if back.Trace(0).Len() != 0 {
		t.Fatalf("%s still has %d trace entries", out, back.Trace(0).Len())
	}
	return out, back.DeviceSegments(0)
}

// TestNoTraceCurrentFromSegments: a snapshot without a trace gives the
// current figures of all its segments, whatever the simulation can place.
// Expandable segments of two streams on a 1 GiB device once lost 40 MiB:
// an 80 GiB guess of the device made a reservation that swallowed the next
// stream's. Segments of private pools (the segment_pool_id of a CUDA graph
// or torch.cuda.MemPool) count too, with at most one warning line, and a
// budget they break fails.
func TestNoTraceCurrentFromSegments(t *testing.T) {
	exp, _ := fixture.RecordFile(t, "streams.mem", "streams.pickle", "--alloc-conf", "expandable_segments:True", "--device-memory", "1GiB")
	plain, _ := fixture.Record(t, "plain.pickle", "--device-memory", "1GiB")
	pools := func(segs []snapshot.Segment) {
		for i := range segs {
			if i%3 != 2 {
				segs[i].PoolID = snapshot.PoolID{0, int64(1 + i%3)}
			}
		}
	}
	for _, tc := range []struct {
		name, path string
		edit       func([]snapshot.Segment)
		pools      int
	}{
		{"expandable", exp, nil, 1},
		{"expandable-pools", exp, pools, 3},
		{"plain", plain, nil, 1},
		{"plain-pools", plain, pools, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, segs := withoutTrace(t, tc.path, tc.name+".pickle", tc.edit)
			streams, poolIDs := map[int64]bool{}, map[snapshot.PoolID]bool{}
			var reserved int64
			for _, s := range segs {
				streams[s.Stream] = true
				poolIDs[s.PoolID] = true
				reserved += s.TotalSize
			}
			// The file must exercise the case, or the test proves nothing.
			if len(poolIDs) != tc.pools || tc.name == "expandable" && len(streams) < 3 {
				t.Fatalf("%d segments in %d streams and %d pools: the fixture no longer exercises the case", len(segs), len(streams), len(poolIDs))
			}

			out, errOut, err := execStats(t, "--json", path)
			if err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			if n := strings.Count(errOut, "\n"); n > 1 || tc.edit == nil && n > 0 {
				// The default pool's segments are all placed: no warning.
				t.Errorf("%d warning lines, want at most one, none without private pools:\n%s", n, errOut)
			}
			var got statsJSON
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatal(err)
			}
			ms := got.Files[0].Devices[0].MemoryStats
			for k, v := range currentFromSegments(segs) {
				if ms[k] != v {
					t.Errorf("%s = %d, the final segments give %d", k, ms[k], v)
				}
			}
			if ms["reserved_bytes.all.current"] != reserved {
				t.Errorf("reserved %d, the segments hold %d", ms["reserved_bytes.all.current"], reserved)
			}

			// A budget between the default pool's memory and all of it
			// fails: the private pools' segments count.
			limit := reserved - 1
			ios, _, cout, cerr := iostreams.Test()
			cmd := check.NewCmdCheck(&command.Factory{IO: ios}, nil)
			cmd.SetArgs([]string{path, "--max", "current_reserved=" + strconv.FormatInt(limit, 10)})
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			if err := cmd.Execute(); err == nil || !strings.Contains(cout.String(), "FAIL") {
				t.Errorf("check --max current_reserved=%d passed on %d reserved: %v\n%s%s", limit, reserved, err, cout, cerr)
			}

			// peak knows the final state only: its peaks are bounds.
			ios, _, pout, _ := iostreams.Test()
			pc := peak.NewCmdPeak(&command.Factory{IO: ios}, nil)
			pc.SetArgs([]string{path})
			pc.SilenceUsage, pc.SilenceErrors = true, true
			if err := pc.Execute(); err != nil {
				t.Fatal(err)
			}
			want := "peak reserved: at least " + report.Size(reserved) + " (no trace"
			if !strings.Contains(pout.String(), want) {
				t.Errorf("peak does not say %q:\n%s", want, pout)
			}
		})
	}
}
