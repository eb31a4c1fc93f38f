package stats

import (
	"encoding/json"
	"testing"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/pkg/snapshot"
)

// TestExpandableCurrentFromSegments: no published snapshot has expandable
// segments, so TestEveryRealSnapshot never checks the rule that they count
// in reserved_bytes but never in segment or inactive_split (allocator model
// §7, §9). A recording with expandable_segments:True, and the same workload
// without, must give the current figures that the file's final segments
// give when counted independently (currentFromSegments).
func TestExpandableCurrentFromSegments(t *testing.T) {
	exp, _ := fixture.Expandable(t)
	plain, _ := fixture.Record(t, "plain.pickle", "--device-memory", "1GiB")
	for _, tc := range []struct {
		name, path string
		expandable bool
	}{{"expandable", exp, true}, {"plain", plain, false}} {
		t.Run(tc.name, func(t *testing.T) {
			snap, err := snapshot.Load(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			segs := snap.DeviceSegments(0)
			var nExp, freeInExp int
			for _, s := range segs {
				if s.Expandable {
					nExp++
					for _, b := range s.Blocks {
						if !b.State.Active() {
							freeInExp++
						}
					}
				}
			}
			// The fixture must exercise the rule, or the test proves nothing.
			if tc.expandable && (nExp == 0 || nExp != len(segs) || freeInExp == 0) {
				t.Fatalf("%d segments, %d expandable, %d free blocks in them: the fixture no longer exercises the rule", len(segs), nExp, freeInExp)
			}
			if !tc.expandable && nExp != 0 {
				t.Fatalf("%d expandable segments in the plain recording", nExp)
			}

			ios, _, out, errOut := iostreams.Test()
			cmd := NewCmdStats(&command.Factory{IO: ios}, nil)
			cmd.SetArgs([]string{"--json", tc.path})
			cmd.SetOut(out)
			cmd.SetErr(errOut)
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			if err := cmd.Execute(); err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			var got statsJSON
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if len(got.Files) != 1 || len(got.Files[0].Devices) != 1 {
				t.Fatalf("files %+v", got.Files)
			}
			ms := got.Files[0].Devices[0].MemoryStats
			want := currentFromSegments(segs)
			for k, v := range want {
				if ms[k] != v {
					t.Errorf("%s = %d, the final segments give %d", k, ms[k], v)
				}
			}
			if ms["reserved_bytes.all.current"] == 0 {
				t.Error("reserved_bytes.all.current is 0")
			}
		})
	}
}
