package advise_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/cmdtest"
	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/root"
	"github.com/memstat/memstat/internal/golden"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/realdata"
)

// memstat runs the binary's Main and returns the exit status and the
// streams, with dir cut from paths.
func memstat(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	ios, _, out, errOut := iostreams.Test()
	code := root.Main(&command.Factory{IO: ios, Getenv: func(string) string { return "" }}, args)
	if dir != "" {
		dir += string(os.PathSeparator)
	}
	return code, strings.ReplaceAll(out.String(), dir, ""), strings.ReplaceAll(errOut.String(), dir, "")
}

type adviceJSON struct {
	File    string `json:"file"`
	Devices []struct {
		Device       int    `json:"device"`
		Verdict      string `json:"verdict"`
		Use          string `json:"use"`
		MemoryAnswer string `json:"memory_answer"`
		DeviceMemory int64  `json:"device_memory"`
		Baseline     result `json:"baseline"`
		Best         *result
		Ranked       []result `json:"ranked"`
	} `json:"devices"`
}

type result struct {
	Conf          string `json:"alloc_conf"`
	OOMs          int    `json:"ooms"`
	PeakReserved  int64  `json:"peak_reserved"`
	PeakAllocated int64  `json:"peak_allocated"`
	Rank          int    `json:"rank"`
}

func adviceOf(t *testing.T, args ...string) adviceJSON {
	t.Helper()
	code, out, errOut := memstat(t, "", append([]string{"advise", "--json"}, args...)...)
	if code != 0 || errOut != "" {
		t.Fatalf("%v: exit %d, stderr %q", args, code, errOut)
	}
	var a adviceJSON
	if err := json.Unmarshal([]byte(cmdtest.Result(t, out)), &a); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	return a
}

// TestOOMSnapshot: Nesta's run ran out of memory; advise says whether any
// setting would have avoided it at the recorded device memory.
func TestOOMSnapshot(t *testing.T) {
	n := realdata.File(t, "Nesta-gitU")
	dir := realdata.Dir(t)
	code, out, errOut := memstat(t, dir, "advise", n)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	golden.Check(t, "nesta-oom.text", []byte(out))
	for _, want := range []string{
		"keep the recorded settings",
		"  unset PYTORCH_CUDA_ALLOC_CONF (the defaults)",
		"the recorded run ran out of memory at event 1117 with 21.9 GiB of device memory",
		"No setting tried avoids it",
		"(recorded settings)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	code, out, _ = memstat(t, dir, "advise", "--json", n)
	if code != 0 {
		t.Fatalf("--json: exit %d", code)
	}
	golden.Check(t, "nesta-oom.json", []byte(out))

	// A 24 GiB card: it fits with the recorded settings.
	a := adviceOf(t, n, "--device-memory", "24GiB")
	d := a.Devices[0]
	if d.DeviceMemory != 24<<30 || d.Baseline.OOMs != 0 || !strings.HasPrefix(d.MemoryAnswer, "fits in 24.0 GiB with the recorded settings") {
		t.Errorf("24GiB: %+v", d)
	}
}

// TestRealFragmentation: sidsoc12's training run (PyTorch 2.5) fragments
// its cache: 62.5 GiB reserved for 51.3 GiB of tensors. Expandable
// segments are the fix, and the figure advise prints is the one `memstat
// replay --alloc-conf` gives.
func TestRealFragmentation(t *testing.T) {
	fn := realdata.File(t, "sidsoc12")
	dir := realdata.Dir(t)
	code, out, errOut := memstat(t, dir, "advise", fn, "--top", "8")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	golden.Check(t, "sidsoc12-training.text", []byte(out))
	a := adviceOf(t, fn)
	d := a.Devices[0]
	if d.Best == nil || !strings.Contains(d.Best.Conf, "expandable_segments:True") || d.Best.PeakReserved >= d.Baseline.PeakReserved {
		t.Fatalf("best %+v, baseline %+v", d.Best, d.Baseline)
	}
	confirmWithReplay(t, fn, d.Best.Conf, "", d.Best.PeakReserved, d.Best.OOMs)
	confirmWithReplay(t, fn, d.Baseline.Conf, "", d.Baseline.PeakReserved, d.Baseline.OOMs)

	code, out, _ = memstat(t, dir, "advise", fn, "--format", "markdown", "--top", "3")
	if code != 0 || !strings.Contains(out, "```sh\nPYTORCH_CUDA_ALLOC_CONF=") || !strings.Contains(out, "| Rank |") {
		t.Errorf("markdown: exit %d\n%s", code, out)
	}
}

// confirmWithReplay replays conf with `memstat replay --alloc-conf` and
// checks the simulated peak reserved memory and OOMs.
func confirmWithReplay(t *testing.T, fn, conf, deviceMemory string, peakReserved int64, ooms int) {
	t.Helper()
	args := []string{"replay", "--json", fn, "--alloc-conf", conf}
	if deviceMemory != "" {
		args = append(args, "--device-memory", deviceMemory)
	}
	code, out, errOut := memstat(t, "", args...)
	if code != 0 {
		t.Fatalf("%v: exit %d, %s", args, code, errOut)
	}
	var r struct {
		Files []struct {
			Devices []struct {
				PeakReserved struct{ Simulated int64 } `json:"peak_reserved"`
				OOMs         struct{ Simulated int }   `json:"ooms"`
			} `json:"devices"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	got := r.Files[0].Devices[0]
	if got.PeakReserved.Simulated != peakReserved || got.OOMs.Simulated != ooms {
		t.Errorf("replay --alloc-conf %q: peak reserved %d, %d OOMs; advise printed %d, %d", conf, got.PeakReserved.Simulated, got.OOMs.Simulated, peakReserved, ooms)
	}
}

// TestRecordedVarlen records the fragmentation workload with `memstat
// record` (variable-length batches with activation checkpointing) and
// follows advise's answer with `memstat replay`.
func TestRecordedVarlen(t *testing.T) {
	dir := t.TempDir()
	fn := filepath.Join(dir, "varlen.pickle")
	code, _, errOut := memstat(t, "", "record", "--workload", "varlen", "--checkpointing", "--steps", "12", "--seq", "2048", "-o", fn)
	if code != 0 {
		t.Fatalf("record: exit %d, %s", code, errOut)
	}
	a := adviceOf(t, fn)
	d := a.Devices[0]
	if d.Best == nil || d.Best.PeakReserved >= d.Baseline.PeakReserved || d.Use != "PYTORCH_CUDA_ALLOC_CONF="+d.Best.Conf {
		t.Fatalf("no better setting: %+v", d)
	}
	confirmWithReplay(t, fn, d.Best.Conf, "", d.Best.PeakReserved, 0)

	// On a 7 GiB GPU the recorded settings run out of memory and the
	// advice fits.
	a = adviceOf(t, fn, "--device-memory", "7GiB")
	d = a.Devices[0]
	if d.Baseline.OOMs == 0 || d.Best == nil || d.Best.OOMs != 0 || !strings.HasPrefix(d.MemoryAnswer, "fits in 7.0 GiB with ") {
		t.Fatalf("7GiB: %+v", d)
	}
	confirmWithReplay(t, fn, d.Best.Conf, "7GiB", d.Best.PeakReserved, 0)
	confirmWithReplay(t, fn, d.Baseline.Conf, "7GiB", d.Baseline.PeakReserved, d.Baseline.OOMs)
}

func TestBadInputExit2(t *testing.T) {
	dir := t.TempDir()
	notes := filepath.Join(dir, "notes.txt")
	os.WriteFile(notes, []byte("not a snapshot\n"), 0o644)
	noTrace := realdata.File(t, "kkaitlyn111")
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"advise", notes}, notes + ": "},
		{[]string{"advise", filepath.Join(dir, "missing.pickle")}, "no such file"},
		{[]string{"advise", noTrace}, noTrace + ": no trace to replay"},
		{[]string{"advise", realdata.File(t, "Nesta-gitU"), "--device", "3"}, "device 3: no trace to replay"},
	} {
		code, out, errOut := memstat(t, "", c.args...)
		if code != command.ExitError || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, c.says) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q (want %q)", c.args, code, out, errOut, c.says)
		}
	}
	for _, args := range [][]string{
		{"advise"},
		{"advise", "a.pickle", "b.pickle"},
		{"advise", "a.pickle", "--device-memory", "lots"},
		{"advise", "a.pickle", "--device-memory", "0"},
		{"advise", "a.pickle", "--top", "0"},
		{"advise", "a.pickle", "--torch-version", "1.5"},
	} {
		code, out, errOut := memstat(t, "", args...)
		if code != command.ExitError || out != "" || !strings.Contains(errOut, "memstat advise --help") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

// In markdown a line right after a table is read as one more row, so every
// table (the comparison and the ranking) must end with a blank line.
func TestMarkdownTablesEnd(t *testing.T) {
	code, out, errOut := memstat(t, "", "advise", realdata.File(t, "sidsoc12"), "--format", "markdown")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	tables := cmdtest.MarkdownTables(t, out)
	if tables < 2 {
		t.Fatalf("want the comparison and the ranking tables, found %d in:\n%s", tables, out)
	}
}

// TestNothingHelps: advise recommends a setting only when its replay
// really helps (the first OOM removed or later, or at least 1% and 64 MiB
// of peak reserved memory saved), and otherwise says that no setting tried
// helps, with the best candidate's figures. A run that cannot fit (record
// --workload oom: the request at its OOM needs more than the device has)
// dies at the same entry whatever the settings; the default recording's
// best setting, where there is one, must help against both the recorded
// run and its replay. The first column is the recorded run as `memstat
// stats` gives it: the same fragmentation and segments created.
func TestNothingHelps(t *testing.T) {
	dir := t.TempDir()
	for _, w := range []string{"oom", "train", "fragmentation.mem"} {
		t.Run(w, func(t *testing.T) {
			fn := filepath.Join(dir, w+".pickle")
			src := []string{"--workload", w}
			if w == "fragmentation.mem" {
				_, self, _, _ := runtime.Caller(0)
				src = []string{"--file", filepath.Join(filepath.Dir(self), "..", "..", "..", "testdata", "workloads", w)}
			}
			if code, _, errOut := memstat(t, "", append(append([]string{"record"}, src...), "-o", fn)...); code != 0 {
				t.Fatalf("record: exit %d, %s", code, errOut)
			}
			var a struct {
				Results []struct {
					Devices []struct {
						Verdict  string          `json:"verdict"`
						Recorded json.RawMessage `json:"recorded"`
						Baseline json.RawMessage `json:"baseline"`
						Best     json.RawMessage `json:"best"`
						Ranked   []json.RawMessage
					} `json:"devices"`
				} `json:"results"`
			}
			_, out, _ := memstat(t, "", "advise", "--json", fn)
			if err := json.Unmarshal([]byte(out), &a); err != nil {
				t.Fatal(err)
			}
			d := a.Results[0].Devices[0]
			var rec, base, best struct {
				OOMs            int     `json:"ooms"`
				FirstOOM        int     `json:"first_oom_entry"`
				PeakReserved    int64   `json:"peak_reserved"`
				Fragmentation   float64 `json:"fragmentation"`
				SegmentsCreated int64   `json:"segments_created"`
			}
			json.Unmarshal(d.Recorded, &rec)
			json.Unmarshal(d.Baseline, &base)
			nothing := strings.HasPrefix(d.Verdict, "no setting tried helps")
			switch {
			case w == "oom" && (!nothing || rec.OOMs == 0):
				t.Errorf("a run that cannot fit: %d recorded OOMs, verdict %q", rec.OOMs, d.Verdict)
			case nothing && string(d.Best) != "null":
				t.Errorf("nothing helps, yet a best setting: %s", d.Best)
			case !nothing:
				if err := json.Unmarshal(d.Best, &best); err != nil {
					t.Fatalf("verdict %q without a best setting: %v", d.Verdict, err)
				}
				for _, other := range []struct {
					name         string
					ooms         int
					peakReserved int64
				}{{"recorded run", rec.OOMs, rec.PeakReserved}, {"recorded settings replayed", base.OOMs, base.PeakReserved}} {
					saving := other.peakReserved - best.PeakReserved
					if other.ooms == best.OOMs && (saving < 64<<20 || saving*100 < other.peakReserved) {
						t.Errorf("recommended with a saving of %d bytes over the %s's %d: %q", saving, other.name, other.peakReserved, d.Verdict)
					}
				}
			}
			// The recorded run's figures are stats'.
			var st struct {
				Results []struct {
					Devices []struct {
						MemoryStats map[string]int64 `json:"memory_stats"`
						Headline    struct {
							PeakReserved  int64   `json:"peak_reserved"`
							Fragmentation float64 `json:"fragmentation"`
						} `json:"headline"`
					} `json:"devices"`
				} `json:"results"`
			}
			_, out, _ = memstat(t, "", "stats", "--json", fn)
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				t.Fatal(err)
			}
			sd := st.Results[0].Devices[0]
			if rec.Fragmentation != sd.Headline.Fragmentation || rec.PeakReserved != sd.Headline.PeakReserved || rec.SegmentsCreated != sd.MemoryStats["num_device_alloc"] {
				t.Errorf("recorded run %+v, stats %+v num_device_alloc %d", rec, sd.Headline, sd.MemoryStats["num_device_alloc"])
			}
		})
	}
}
