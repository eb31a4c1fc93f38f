package analysis_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/record"
	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/realdata"
	. "github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/snapshot"
)

// recordBuiltin runs memstat record on a built-in workload.
func recordBuiltin(t *testing.T, args ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run.pickle")
	ios, _, _, errOut := iostreams.Test()
	cmd := record.NewCmdRecord(&command.Factory{IO: ios, Getenv: os.Getenv}, nil)
	cmd.SetArgs(append(args, "-o", path))
	cmd.SetOut(ios.Out)
	cmd.SetErr(ios.ErrOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	if err := cmd.Execute(); err != nil {
		t.Fatalf("memstat record %v: %v\n%s", args, err, errOut)
	}
	return path
}

// TestReplayForCapturesWhatAReplayGives: the states ReplayFor captures in
// its one replay (peaks, ooms, chosen entries) are the states a second
// replay rebuilds, on every published snapshot and on recorded runs; and
// on the recorded runs the peaks are captured, not left to a second
// replay.
func TestReplayForCapturesWhatAReplayGives(t *testing.T) {
	files := realdata.FilesIfPresent()
	if len(files) == 0 {
		t.Log("no published snapshots (../shared/testdata/real): checking recorded runs only")
	}
	train := recordBuiltin(t, "--layers", "2", "--hidden", "256", "--heads", "4", "--seq", "128", "--batch", "4", "--steps", "3")
	oom, _ := fixture.Record(t, "oom.pickle")
	recorded := []string{train, oom}
	if f := os.Getenv("MEMSTAT_CAPTURE_FILE"); f != "" {
		recorded = append(recorded, f)
	}
	for _, f := range append(files, recorded...) {
		s, err := snapshot.Load(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for d := range s.Devices() {
			tr := s.Trace(d).Entries()
			if len(tr) == 0 {
				continue
			}
			want := Want{PeakAllocated: true, PeakReserved: true, OOMs: true, Indices: []int{-1, len(tr) / 2, len(tr) - 1}, CompactFigures: true}
			rp, err := ReplayFor(s, d, want)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			plain, err := Replay(s, d)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if plain.Captured(plain.Result.PeakAllocated.Index) {
				t.Fatalf("%s: Replay captured a state nobody asked for", f)
			}
			idx := append([]int{rp.Result.PeakAllocated.Index, rp.Result.PeakReserved.Index}, want.Indices...)
			for i, e := range tr {
				if e.Action == snapshot.ActionOOM {
					idx = append(idx, i)
				}
			}
			captured := 0
			for _, i := range idx {
				if rp.Captured(i) {
					captured++
				}
			}
			got, err := rp.States(idx...)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := plain.States(idx...)
			if err != nil {
				t.Fatal(err)
			}
			for k := range idx {
				if !reflect.DeepEqual(got[k], ref[k]) {
					t.Errorf("%s device %d: the state after entry %d captured in the replay differs from a second replay's", filepath.Base(f), d, idx[k])
				}
			}
			// The compact figures are the arrays' (every entry of the
			// smaller traces, a stride of the large ones).
			if rp.Allocated != nil || rp.Reserved != nil {
				t.Fatalf("%s: CompactFigures kept the per-entry arrays", f)
			}
			stride := max(1, len(tr)/100000)
			for i := -1; i <= len(tr); i += stride {
				if g, w := rp.MomentAt(i), plain.MomentAt(i); g != w {
					t.Fatalf("%s device %d: entry %d: compact figures give %+v, the arrays %+v", filepath.Base(f), d, i, g, w)
				}
			}
			peaks := rp.Captured(rp.Result.PeakAllocated.Index) && rp.Captured(rp.Result.PeakReserved.Index)
			t.Logf("%s device %d: %d entries, %d of %d states captured in the one replay (peaks: %v)", filepath.Base(f), d, len(tr), captured, len(idx), peaks)
			for _, r := range recorded {
				if f == r && !peaks {
					t.Errorf("%s: the peaks of a recorded run were left to a second replay", filepath.Base(f))
				}
			}
		}
	}
}

// TestLiveOnlyPeak: a replay that keeps only the live blocks of the states
// it captures (Want.LiveOnly, peak's and diff's) finds the same peak,
// block for block, as a replay that keeps every block, on every published
// snapshot and on a recorded run; and holds fewer blocks where any is
// free.
func TestLiveOnlyPeak(t *testing.T) {
	files := realdata.FilesIfPresent()
	if len(files) == 0 {
		t.Log("no published snapshots (../shared/testdata/real): checking a recorded run only")
	}
	train := recordBuiltin(t, "--layers", "2", "--hidden", "256", "--heads", "4", "--seq", "128", "--batch", "4", "--steps", "3")
	for _, f := range append(files, train) {
		s, err := snapshot.Load(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for d := range s.Devices() {
			if s.Trace(d).Len() == 0 {
				continue
			}
			full, err := ReplayFor(s, d, Want{PeakAllocated: true})
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			lean, err := ReplayFor(s, d, Want{PeakAllocated: true, LiveOnly: true, CompactFigures: true})
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			pf, err := FindPeak(full)
			if err != nil {
				t.Fatal(err)
			}
			pl, err := FindPeak(lean)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(pf, pl) {
				t.Errorf("%s device %d: the peak from live blocks only differs from the full state's", filepath.Base(f), d)
			}
			i := full.Result.PeakAllocated.Index
			if !full.Captured(i) || !lean.Captured(i) {
				continue
			}
			sf, _ := full.States(i)
			sl, _ := lean.States(i)
			nf, nl, free := 0, 0, 0
			for _, seg := range sf[0].Segments {
				nf += len(seg.Blocks)
				for _, b := range seg.Blocks {
					if !b.State.Active() {
						free++
					}
				}
			}
			for _, seg := range sl[0].Segments {
				nl += len(seg.Blocks)
			}
			if nl != nf-free {
				t.Errorf("%s device %d: the live-only state holds %d blocks, want %d of %d", filepath.Base(f), d, nl, nf-free, nf)
			}
		}
	}
}
