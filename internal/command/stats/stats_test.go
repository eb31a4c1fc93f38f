package stats

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/golden"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/snapshot"
)

// execStats runs `memstat stats ARGS` and returns its stdout and stderr,
// with the real-snapshot folder cut from paths so golden files do not
// depend on where the checkout lives.
func execStats(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ios, _, out, errOut := iostreams.Test()
	cmd := NewCmdStats(&command.Factory{IO: ios}, nil)
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	dir := realdata.Dir(t) + string(os.PathSeparator)
	return strings.ReplaceAll(out.String(), dir, ""), strings.ReplaceAll(errOut.String(), dir, ""), err
}

// statsOfRecording runs stats with args on fn, a file the test wrote:
// its text output with fn's folder taken out; an error or anything on
// stderr fails the test.
func statsOfRecording(t *testing.T, fn string, args ...string) string {
	t.Helper()
	ios, _, out, errOut := iostreams.Test()
	cmd := NewCmdStats(&command.Factory{IO: ios}, nil)
	cmd.SetArgs(append(args, fn))
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if errOut.Len() > 0 {
		t.Errorf("stderr: %s", errOut)
	}
	return strings.ReplaceAll(out.String(), filepath.Dir(fn)+string(filepath.Separator), "")
}

type statsJSON struct {
	Files []struct {
		File    string `json:"file"`
		Devices []struct {
			Device      int              `json:"device"`
			MemoryStats map[string]int64 `json:"memory_stats"`
			Bounds      map[string]struct {
				Min int64  `json:"min"`
				Max *int64 `json:"max"`
			} `json:"bounds"`
			Headline struct {
				PeakAllocated int64   `json:"peak_allocated"`
				PeakReserved  int64   `json:"peak_reserved"`
				Fragmentation float64 `json:"fragmentation"`
				Partial       bool    `json:"partial_history"`
			} `json:"headline"`
			History struct {
				Coverage string `json:"coverage"`
			} `json:"history"`
			Agreement struct {
				MismatchCount int `json:"mismatch_count"`
				Remaining     int `json:"remaining"`
			} `json:"agreement"`
		} `json:"devices"`
	} `json:"results"`
}

// memoryStatsKeys is the key set of torch.cuda.memory_stats(), written out
// here independently of the simulator: 9 stats per pool, 2 oversize stats,
// the counters (the num_device_* and num_sync_all_streams ones from 2.3).
func memoryStatsKeys(from23 bool) []string {
	var keys []string
	metrics := []string{"allocated", "current", "freed", "peak"}
	for _, s := range []string{"active", "active_bytes", "allocated_bytes", "allocation", "inactive_split",
		"inactive_split_bytes", "requested_bytes", "reserved_bytes", "segment"} {
		for _, p := range []string{"all", "large_pool", "small_pool"} {
			for _, m := range metrics {
				keys = append(keys, s+"."+p+"."+m)
			}
		}
	}
	for _, s := range []string{"oversize_allocations", "oversize_segments"} {
		for _, m := range metrics {
			keys = append(keys, s+"."+m)
		}
	}
	keys = append(keys, "max_split_size", "num_alloc_retries", "num_ooms")
	if from23 {
		keys = append(keys, "num_device_alloc", "num_device_free", "num_sync_all_streams")
	}
	sort.Strings(keys)
	return keys
}

// currentFromSegments recomputes the *.current figures from a device's
// final segments the way PyTorch counts them: reserved is every segment's
// size (expandable ones included); segment counts leave expandable
// segments out; allocated counts active_allocated blocks, active also the
// pending ones; requested sums the active blocks' requested sizes; an
// inactive_split block is a free block in a cudaMalloc'd segment that has
// an active block.
func currentFromSegments(segs []*snapshot.Segment) map[string]int64 {
	m := map[string]int64{}
	add := func(stat, pool string, n int64) {
		m[stat+".all.current"] += n
		m[stat+"."+pool+".current"] += n
	}
	for _, s := range segs {
		pool := "large_pool"
		if s.Pool == snapshot.SmallPool {
			pool = "small_pool"
		}
		add("reserved_bytes", pool, s.TotalSize)
		if !s.Expandable {
			add("segment", pool, 1)
		}
		split := false
		for _, b := range s.Blocks {
			split = split || b.State.Active()
		}
		for _, b := range s.Blocks {
			switch {
			case b.State == snapshot.ActiveAllocated:
				add("allocation", pool, 1)
				add("allocated_bytes", pool, b.Size)
				fallthrough
			case b.State == snapshot.ActivePendingFree:
				add("active", pool, 1)
				add("active_bytes", pool, b.Size)
				add("requested_bytes", pool, b.RequestedSize)
			case split && !s.Expandable:
				add("inactive_split", pool, 1)
				add("inactive_split_bytes", pool, b.Size)
			}
		}
	}
	return m
}

// TestEveryRealSnapshot: every published snapshot gives the table and one
// JSON object whose memory_stats has exactly PyTorch's keys and whose
// current figures are those of the file's final segments.
func TestEveryRealSnapshot(t *testing.T) {
	for _, fn := range realdata.Files(t) {
		name := filepath.Base(fn)
		t.Run(name, func(t *testing.T) {
			text, _, err := execStats(t, fn)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"peak allocated", "history: ", "replay: ", "Allocated memory", "GPU reserved segments", "num_ooms"} {
				if !strings.Contains(text, want) {
					t.Errorf("text output lacks %q", want)
				}
			}
			out, _, err := execStats(t, "--json", fn)
			if err != nil {
				t.Fatal(err)
			}
			var got statsJSON
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("not one JSON object: %v", err)
			}
			if len(got.Files) != 1 || got.Files[0].File != name || len(got.Files[0].Devices) == 0 {
				t.Fatalf("files %+v", got.Files)
			}
			snap, err := snapshot.Load(fn)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range got.Files[0].Devices {
				ms := d.MemoryStats
				keys := make([]string, 0, len(ms))
				for k := range ms {
					keys = append(keys, k)
				}
				// A figure the trace does not determine is a bound
				// instead: every key is in exactly one of the two.
				for k := range d.Bounds {
					if _, dup := ms[k]; dup {
						t.Errorf("device %d: %s is both exact and bounded", d.Device, k)
					}
					keys = append(keys, k)
				}
				sort.Strings(keys)
				_, from23 := ms["num_device_alloc"]
				if _, ok := d.Bounds["num_device_alloc"]; ok {
					from23 = true
				}
				if want := memoryStatsKeys(from23); strings.Join(keys, " ") != strings.Join(want, " ") {
					t.Errorf("device %d: memory_stats keys %v, want %v", d.Device, keys, want)
				}
				for k, v := range currentFromSegments(snap.DeviceSegments(d.Device)) {
					if ms[k] != v {
						t.Errorf("device %d: %s = %d, the final segments give %d", d.Device, k, ms[k], v)
					}
				}
				for k, v := range ms {
					if strings.HasSuffix(k, ".current") && v != 0 && currentFromSegments(snap.DeviceSegments(d.Device))[k] == 0 &&
						!strings.HasPrefix(k, "oversize") {
						t.Errorf("device %d: %s = %d, the final segments give 0", d.Device, k, v)
					}
				}
				if d.Headline.PeakAllocated != ms["allocated_bytes.all.peak"] || d.Headline.PeakReserved != ms["reserved_bytes.all.peak"] {
					t.Errorf("device %d: headline %+v disagrees with memory_stats", d.Device, d.Headline)
				}
				if d.Agreement.Remaining != 0 {
					t.Errorf("device %d: %d differences from the snapshot remain", d.Device, d.Agreement.Remaining)
				}
				if d.Headline.Partial != (d.History.Coverage != "complete") {
					t.Errorf("device %d: partial %v with coverage %s", d.Device, d.Headline.Partial, d.History.Coverage)
				}
			}
		})
	}
}

// goldenFiles: a 2.0-format file (history-style blocks, a one-entry
// trace), one without a trace, one with an OOM (named .json, but a
// protocol-4 pickle), a big mid-run training trace, and the cut-down
// fixture whose trace stops before its final state.
var goldenFiles = []struct{ name, part string }{
	{"yiyi-2.0", "Yiyi-philosophy"},
	{"kkaitlyn-notrace", "kkaitlyn111"},
	{"nesta-oom", "Nesta-gitU"},
	{"sidsoc12-training", "sidsoc12"},
	{"drisspg-cutdown", "drisspg"},
}

func TestGolden(t *testing.T) {
	for _, g := range goldenFiles {
		t.Run(g.name, func(t *testing.T) {
			fn := realdata.File(t, g.part)
			for _, format := range []string{"text", "json", "markdown"} {
				out, errOut, err := execStats(t, "--format", format, fn)
				if err != nil {
					t.Fatal(err)
				}
				if errOut != "" {
					t.Errorf("stderr: %s", errOut)
				}
				golden.Check(t, g.name+"."+format, []byte(out))
			}
		})
	}
}

// TestSeveralFiles: one JSON object for all files, in argument order.
func TestSeveralFiles(t *testing.T) {
	a, b := realdata.File(t, "silmont2000"), realdata.File(t, "Maphsge4__select_n__snapshot.pickle_at_1f2f548")
	out, _, err := execStats(t, "--json", a, b)
	if err != nil {
		t.Fatal(err)
	}
	var got statsJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Files) != 2 || got.Files[0].File != filepath.Base(a) || got.Files[1].File != filepath.Base(b) {
		t.Fatalf("files %+v", got.Files)
	}
	text, _, err := execStats(t, a, b)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(text, "Allocated memory") != 2 {
		t.Errorf("want two tables:\n%s", text)
	}
}

func TestFlags(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	var got *Options
	for _, c := range []struct {
		args    []string
		wantErr string
		format  string
	}{
		{[]string{"a.pickle"}, "", "text"},
		{[]string{"--json", "a.pickle", "b.pickle"}, "", "json"},
		{[]string{"--format", "markdown", "a.pickle"}, "", "markdown"},
		{[]string{"--format", "csv", "a.pickle"}, "invalid --format", ""},
		{[]string{"--json", "--format", "markdown", "a.pickle"}, "disagree", ""},
		{[]string{}, "no snapshot given", ""},
		{[]string{"--jobs", "-1", "a.pickle"}, "invalid --jobs", ""},
		{[]string{"--jobs", "4", "--summary", "a.pickle", "b.pickle"}, "", "text"},
	} {
		cmd := NewCmdStats(&command.Factory{IO: ios}, func(o *Options) error { got = o; return nil })
		cmd.SetArgs(c.args)
		cmd.SetOut(ios.Out)
		cmd.SetErr(ios.ErrOut)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.Execute()
		if c.wantErr != "" {
			var fe *command.FlagError
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || !asFlagError(err, &fe) {
				t.Errorf("%v: error %v, want a flag error saying %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil || string(got.Format) != c.format {
			t.Errorf("%v: %v, format %q", c.args, err, got.Format)
		}
	}
}

func asFlagError(err error, fe **command.FlagError) bool {
	e, ok := err.(*command.FlagError)
	*fe = e
	return ok
}

type ranksJSON struct {
	Summary struct {
		Ranks *ranksSummary `json:"ranks"`
	} `json:"summary"`
	Files []json.RawMessage `json:"results"`
}

type ranksSummary struct {
	Rows []struct {
		File          string `json:"file"`
		PeakAllocated int64  `json:"peak_allocated"`
		PeakReserved  int64  `json:"peak_reserved"`
		OOMs          int64  `json:"ooms"`
	} `json:"rows"`
	Min, Median, Max struct {
		PeakAllocated int64 `json:"peak_allocated"`
		PeakReserved  int64 `json:"peak_reserved"`
	}
	Outlier *struct {
		File                   string `json:"file"`
		PeakReservedFromMedian int64  `json:"peak_reserved_from_median"`
	} `json:"outlier"`
}

// TestRanksAcrossFiles: several files (read in parallel) give the per-file
// figures in argument order and a table across them whose rows, minimum,
// median, maximum and outlier follow from those figures; --summary prints
// only that table.
func TestRanksAcrossFiles(t *testing.T) {
	parts := []string{"silmont2000", "ZidongLiu", "kkaitlyn111", "bcrafton", "cranberrii"}
	var files []string
	for _, p := range parts {
		files = append(files, realdata.File(t, p))
	}
	for _, jobs := range []string{"1", "3"} {
		out, _, err := execStats(t, append([]string{"--json", "--jobs", jobs}, files...)...)
		if err != nil {
			t.Fatal(err)
		}
		var per statsJSON
		var got ranksJSON
		if err := json.Unmarshal([]byte(out), &per); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if got.Summary.Ranks == nil || len(per.Files) != len(files) || len(got.Summary.Ranks.Rows) != len(files) {
			t.Fatalf("jobs %s: %d files, ranks %+v", jobs, len(per.Files), got.Summary.Ranks)
		}
		var reserved, allocated []int64
		for i, f := range per.Files {
			if f.File != filepath.Base(files[i]) || got.Summary.Ranks.Rows[i].File != f.File {
				t.Fatalf("jobs %s: file %d is %q / %q, want %q", jobs, i, f.File, got.Summary.Ranks.Rows[i].File, filepath.Base(files[i]))
			}
			h := f.Devices[0].Headline
			if got.Summary.Ranks.Rows[i].PeakReserved != h.PeakReserved || got.Summary.Ranks.Rows[i].PeakAllocated != h.PeakAllocated {
				t.Errorf("rank %d: %+v, headline %+v", i, got.Summary.Ranks.Rows[i], h)
			}
			reserved = append(reserved, h.PeakReserved)
			allocated = append(allocated, h.PeakAllocated)
		}
		sort.Slice(reserved, func(i, j int) bool { return reserved[i] < reserved[j] })
		sort.Slice(allocated, func(i, j int) bool { return allocated[i] < allocated[j] })
		r := got.Summary.Ranks
		if r.Min.PeakReserved != reserved[0] || r.Median.PeakReserved != reserved[2] || r.Max.PeakReserved != reserved[4] ||
			r.Min.PeakAllocated != allocated[0] || r.Median.PeakAllocated != allocated[2] || r.Max.PeakAllocated != allocated[4] {
			t.Errorf("spread %+v %+v %+v, sorted reserved %v allocated %v", r.Min, r.Median, r.Max, reserved, allocated)
		}
		// The outlier is the rank furthest from the median reserved.
		var far int64
		var farFile string
		for _, row := range r.Rows {
			if d := row.PeakReserved - reserved[2]; d*d > far*far {
				far, farFile = d, row.File
			}
		}
		if r.Outlier == nil || r.Outlier.File != farFile || r.Outlier.PeakReservedFromMedian != far {
			t.Errorf("outlier %+v, want %s at %d", r.Outlier, farFile, far)
		}
	}

	text, _, err := execStats(t, append([]string{"--summary"}, files...)...)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text, "Allocated memory") || !strings.Contains(text, "Across 5 ranks") ||
		!strings.Contains(text, "furthest from the median: kkaitlyn111") {
		t.Errorf("--summary output:\n%s", text)
	}
	golden.Check(t, "ranks.text", []byte(text))
	md, _, err := execStats(t, append([]string{"--summary", "--format", "markdown"}, files...)...)
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "ranks.markdown", []byte(md))
	full, _, err := execStats(t, files...)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(full, "Allocated memory") != 5 || !strings.HasSuffix(full, text) {
		t.Errorf("full output does not end with the summary:\n%s", full)
	}
	out, _, err := execStats(t, "--json", "--summary", files[0], files[1])
	if err != nil {
		t.Fatal(err)
	}
	var sum ranksJSON
	if err := json.Unmarshal([]byte(out), &sum); err != nil || len(sum.Files) != 0 || sum.Summary.Ranks == nil || len(sum.Summary.Ranks.Rows) != 2 {
		t.Errorf("--json --summary: %v\n%s", err, out)
	}
	// One file: no table across files.
	out, _, err = execStats(t, "--json", files[0])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, `"ranks"`) {
		t.Errorf("one file has a ranks table:\n%.300s", out)
	}
}

// TestSeveralFilesFirstErrorWins: with files read in parallel, the error
// is the first bad file's in argument order, and the warnings of the files
// before it are printed.
func TestSeveralFilesFirstErrorWins(t *testing.T) {
	good := realdata.File(t, "silmont2000")
	dir := t.TempDir()
	bad1, bad2 := filepath.Join(dir, "bad1.pickle"), filepath.Join(dir, "bad2.pickle")
	if err := os.WriteFile(bad1, []byte("not a pickle at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad2, []byte{0x80, 0x04, 0x95}, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, jobs := range []string{"1", "4"} {
		_, _, err := execStats(t, "--jobs", jobs, good, bad1, good, bad2)
		if err == nil || !strings.HasPrefix(err.Error(), bad1+": ") {
			t.Errorf("jobs %s: error %v, want bad1's", jobs, err)
		}
	}
}

// TestPeaksRecountFromTrace: for every published snapshot whose trace
// starts from an empty allocator, the whole-run peaks equal a recount from
// the trace alone: reserved memory from the segment events, live
// allocations from the allocs and completed frees (issue 12).
func TestPeaksRecountFromTrace(t *testing.T) {
	checked := 0
	for _, fn := range realdata.Files(t) {
		snap, err := snapshot.Load(fn)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := execStats(t, "--json", fn)
		if err != nil {
			t.Fatal(err)
		}
		var got statsJSON
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		for _, d := range got.Files[0].Devices {
			if d.History.Coverage != "complete" || snap.Trace(d.Device).Len() == 0 {
				continue
			}
			checked++
			var reserved, peakReserved, live, peakLive int64
			for _, e := range snap.Trace(d.Device).All() {
				switch e.Action {
				case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentMap:
					reserved += e.Size
				case snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
					reserved -= e.Size
				case snapshot.ActionAlloc:
					live++
				case snapshot.ActionFreeCompleted, snapshot.ActionFree:
					live--
				}
				peakReserved, peakLive = max(peakReserved, reserved), max(peakLive, live)
			}
			ms := d.MemoryStats
			if ms["reserved_bytes.all.peak"] != peakReserved || ms["allocation.all.peak"] != peakLive {
				t.Errorf("%s device %d: peaks reserved %d, allocations %d; the trace recounts %d and %d",
					filepath.Base(fn), d.Device, ms["reserved_bytes.all.peak"], ms["allocation.all.peak"], peakReserved, peakLive)
			}
		}
	}
	if checked == 0 {
		t.Error("no published trace starts from empty: the test checks nothing")
	}
	t.Logf("%d from-empty traces recounted", checked)
}
