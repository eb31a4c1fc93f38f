package record

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/segments"
	"github.com/memstat/memstat/internal/command/stats"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/report"
)

// TestFragmentationAgreesWithSegments: the fragmentation figures record's
// headline prints are those a reader finds by hand in `memstat segments
// --at N` at the entry the headline names: reserved and allocated are the
// listed segments' totals, cached the segments with no live block, and
// stranded the rest of the free space (README, "Fragmentation").
func TestFragmentationAgreesWithSegments(t *testing.T) {
	dir := t.TempDir()
	example := filepath.Join(moduleRoot(t), "testdata", "workloads", "unused.mem")
	for _, w := range []string{"oom", "varlen", "inference", "unused.mem"} {
		t.Run(w, func(t *testing.T) {
			path := filepath.Join(dir, w+".pickle")
			src := "-w " + w
			if w == "unused.mem" {
				src = "--file " + example
			}
			stdout, _, err := runCommand(t, src+" -o "+path)
			if err != nil {
				t.Fatal(err)
			}
			var st struct {
				Results []struct {
					Devices []struct {
						Headline report.Headline `json:"headline"`
					} `json:"devices"`
				} `json:"results"`
			}
			runJSON(t, stats.NewCmdStats, &st, "--json", path)
			h := st.Results[0].Devices[0].Headline
			u := h.AtPeak
			if h.PeakAllocatedEntry < 0 || u.Allocated != h.PeakAllocated || u.Stranded+u.Cached+u.Allocated != u.Reserved || u.Stranded < 0 || u.Cached < 0 {
				t.Fatalf("headline %+v", h)
			}
			if !strings.Contains(stdout, h.String()) {
				t.Errorf("record's headline is not stats':\n%s\nwant %s", stdout, h.String())
			}
			var seg struct {
				Results []struct {
					Devices []struct {
						Total struct {
							Size      int64 `json:"size"`
							Allocated int64 `json:"allocated_bytes"`
							Pending   int64 `json:"pending_free_bytes"`
							Free      int64 `json:"free_bytes"`
							Cached    int64 `json:"cached_bytes"`
						} `json:"total"`
						Segments []struct {
							Size      int64 `json:"size"`
							Allocated int64 `json:"allocated_bytes"`
							Pending   int64 `json:"pending_free_bytes"`
						} `json:"segments"`
					} `json:"devices"`
				} `json:"results"`
			}
			runJSON(t, segments.NewCmdSegments, &seg, "--json", "--at", strconv.Itoa(h.PeakAllocatedEntry), path)
			tot := seg.Results[0].Devices[0].Total
			// By hand: the segments without an allocated or pending byte
			// are cached (no recording here has expandable segments).
			var cached int64
			for _, s := range seg.Results[0].Devices[0].Segments {
				if s.Allocated == 0 && s.Pending == 0 {
					cached += s.Size
				}
			}
			if tot.Size != u.Reserved || tot.Allocated != u.Allocated || cached != u.Cached || tot.Cached != u.Cached ||
				tot.Free+tot.Pending-cached != u.Stranded {
				t.Errorf("segments --at %d: reserved %d allocated %d cached %d (by hand %d) free %d pending %d; headline %+v",
					h.PeakAllocatedEntry, tot.Size, tot.Allocated, tot.Cached, cached, tot.Free, tot.Pending, u)
			}
			want := replay.NewUnused(tot.Size, tot.Allocated, cached)
			if want != u {
				t.Errorf("by hand %+v, headline %+v", want, u)
			}
			// README's example, by hand: 8 MiB stranded in the first
			// segment, its 40 MiB neighbour cached, of 108 MiB.
			if w == "unused.mem" && (u.Stranded != 8<<20 || u.Cached != 40<<20 || u.Reserved != 108<<20 || h.PeakAllocatedEntry != 11) {
				t.Errorf("README's example: %+v after entry %d", u, h.PeakAllocatedEntry)
			}
			if u.Unused == 0 {
				t.Errorf("%s: nothing unused at the peak: the test proves little", w)
			}
		})
	}
}

// runJSON runs a command made by newCmd with args and decodes its JSON
// output into out.
func runJSON[O any](t *testing.T, newCmd func(*command.Factory, func(*O) error) *cobra.Command, out any, args ...string) {
	t.Helper()
	ios, _, stdout, stderr := iostreams.Test()
	cmd := newCmd(&command.Factory{IO: ios}, nil)
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	if err := cmd.Execute(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, stderr)
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, stdout)
	}
}
