package check_test

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/root"
	"github.com/memstat/memstat/internal/golden"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// memstat runs the binary's Main with args and an environment, and
// returns the exit status and the streams with the real-snapshot folder cut
// from paths.
func memstat(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ios, _, out, errOut := iostreams.Test()
	f := &command.Factory{
		IO:     ios,
		Getenv: func(k string) string { return env[k] },
		Now:    func() time.Time { return time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC) },
	}
	code = root.Main(f, args)
	dir := realdata.Dir(t) + string(os.PathSeparator)
	return code, strings.ReplaceAll(out.String(), dir, ""), strings.ReplaceAll(errOut.String(), dir, "")
}

// checkRecording runs check with args on fn, a file the test wrote (so
// it needs no real-snapshot folder): the exit status and stdout; anything
// on stderr fails the test.
func checkRecording(t *testing.T, fn string, args ...string) (int, string) {
	t.Helper()
	ios, _, out, errOut := iostreams.Test()
	f := &command.Factory{IO: ios, Getenv: func(string) string { return "" }, Now: func() time.Time { return time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC) }}
	code := root.Main(f, append([]string{"check"}, append(args, fn)...))
	if errOut.Len() > 0 {
		t.Errorf("%v: stderr %s", args, errOut)
	}
	return code, out.String()
}

// Real snapshots the tests use: Nesta's run (PyTorch 2.2, complete
// history) ran out of memory once with 21.8 GiB reserved; bcrafton's and
// MAGMA27's are the same course assignment (2.10, traces from mid-run).
func nesta(t *testing.T) string    { return realdata.File(t, "Nesta-gitU") }
func bcrafton(t *testing.T) string { return realdata.File(t, "bcrafton") }
func magma(t *testing.T) string    { return realdata.File(t, "MAGMA27") }

func TestAbsoluteRulesPassAndFail(t *testing.T) {
	n := nesta(t)
	code, out, errOut := memstat(t, nil, "check", n, "--max", "peak_reserved=22GiB", "--max", "fragmentation=1%", "--max", "segments=126")
	if code != 0 || errOut != "" {
		t.Fatalf("passing rules: exit %d, stderr %q", code, errOut)
	}
	golden.Check(t, "nesta-pass.text", []byte(out))
	if !strings.HasSuffix(out, "ok: all 3 checks passed (1 file, 1 device)\n") {
		t.Errorf("summary:\n%s", out)
	}

	// 21.8 GiB reserved is above 21GiB, and the run had its OOM.
	code, out, errOut = memstat(t, nil, "check", n, "--max", "peak_reserved=21GiB", "--max", "ooms=0", "--max", "allocated_bytes.all.peak=24GB")
	if code != command.ExitCheckFailed || errOut != "" {
		t.Fatalf("failing rules: exit %d, stderr %q", code, errOut)
	}
	golden.Check(t, "nesta-fail.text", []byte(out))
	verdicts := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[1] == "<=" {
			verdicts[f[0]] = f[len(f)-1]
		}
	}
	if verdicts["peak_reserved"] != "FAIL" || verdicts["ooms"] != "FAIL" || verdicts["allocated_bytes.all.peak"] != "ok" ||
		!strings.HasSuffix(out, "FAIL: 2 of 3 checks failed (1 file, 1 device)\n") {
		t.Errorf("verdicts %v:\n%s", verdicts, out)
	}

	code, out, _ = memstat(t, nil, "check", n, "--max", "peak_reserved=21GiB", "--format", "markdown")
	if code != 1 || !strings.Contains(out, "### Nesta-gitU__discrete_diffusion__memory_snapshot.json, device 0 (PyTorch 2.2)") || !strings.Contains(out, "| FAIL ") {
		t.Errorf("markdown: exit %d\n%s", code, out)
	}
}

type checkJSON struct {
	Summary struct {
		Passed bool `json:"passed"`
		Checks int  `json:"checks"`
		Failed int  `json:"failed"`
	} `json:"summary"`
	Files []struct {
		File    string `json:"file"`
		Devices []struct {
			Device   int  `json:"device"`
			Partial  bool `json:"partial_history"`
			Baseline *struct {
				File   string `json:"file"`
				Device int    `json:"device"`
			} `json:"baseline"`
			Results []struct {
				Rule     string   `json:"rule"`
				Key      string   `json:"key"`
				Actual   float64  `json:"actual"`
				Limit    float64  `json:"limit"`
				Baseline *float64 `json:"baseline"`
				Passed   bool     `json:"passed"`
				Message  string   `json:"message"`
			} `json:"results"`
		} `json:"devices"`
	} `json:"results"`
}

func checkJSONOf(t *testing.T, wantCode int, args ...string) checkJSON {
	t.Helper()
	code, out, errOut := memstat(t, nil, append([]string{"check", "--json"}, args...)...)
	if code != wantCode || errOut != "" {
		t.Fatalf("%v: exit %d (want %d), stderr %q", args, code, wantCode, errOut)
	}
	var got checkJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	return got
}

// TestFiguresAreStats: the figures check compares are the ones `memstat
// stats` prints for the same file (the same replay).
func TestFiguresAreStats(t *testing.T) {
	for _, part := range []string{"Nesta-gitU", "bcrafton", "ZidongLiu"} {
		fn := realdata.File(t, part)
		code, out, _ := memstat(t, nil, "stats", "--json", fn)
		if code != 0 {
			t.Fatalf("stats exit %d", code)
		}
		var st struct {
			Files []struct {
				Devices []struct {
					MemoryStats map[string]int64 `json:"memory_stats"`
					Headline    struct {
						PeakAllocated int64   `json:"peak_allocated"`
						PeakReserved  int64   `json:"peak_reserved"`
						Fragmentation float64 `json:"fragmentation"`
					} `json:"headline"`
				} `json:"devices"`
			} `json:"results"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatal(err)
		}
		dev := st.Files[0].Devices[0]
		keys := []string{"allocated_bytes.all.peak", "reserved_bytes.large_pool.current", "segment.all.peak", "num_alloc_retries"}
		args := []string{fn, "--max", "peak_allocated=0", "--max", "peak_reserved=0", "--max", "fragmentation=0"}
		for _, k := range keys {
			args = append(args, "--max", k+"=0")
		}
		got := checkJSONOf(t, 1, args...)
		res := got.Files[0].Devices[0].Results
		want := []float64{float64(dev.Headline.PeakAllocated), float64(dev.Headline.PeakReserved), dev.Headline.Fragmentation}
		for _, k := range keys {
			want = append(want, float64(dev.MemoryStats[k]))
		}
		for i, r := range res {
			if r.Actual != want[i] {
				t.Errorf("%s: %s = %v, stats says %v", part, r.Key, r.Actual, want[i])
			}
		}
	}
}

func TestBaselineRules(t *testing.T) {
	b, m := bcrafton(t), magma(t)
	// Each run against itself: no increase at all.
	got := checkJSONOf(t, 0, b, "--baseline", b, "--max-increase", "peak_reserved=0%", "--max-increase", "fragmentation=0%", "--max-increase", "segments=0")
	if !got.Summary.Passed || got.Summary.Checks != 3 || got.Files[0].Devices[0].Baseline == nil {
		t.Errorf("self-comparison: %+v", got)
	}
	for _, r := range got.Files[0].Devices[0].Results {
		if r.Baseline == nil || *r.Baseline != r.Actual {
			t.Errorf("%s: actual %v baseline %v", r.Rule, r.Actual, r.Baseline)
		}
	}

	// One run against the other: whichever reserved more fails a 0%
	// increase, the other passes; the increase allowed to the larger
	// makes it pass.
	bj := checkJSONOf(t, 0, b, "--max", "peak_reserved=1TiB")
	mj := checkJSONOf(t, 0, m, "--max", "peak_reserved=1TiB")
	br, mr := bj.Files[0].Devices[0].Results[0].Actual, mj.Files[0].Devices[0].Results[0].Actual
	if br == mr {
		t.Fatalf("both runs reserved %v", br)
	}
	big, small := b, m
	if br < mr {
		big, small = m, b
	}
	code, out, errOut := memstat(t, nil, "check", big, "--baseline", small, "--max-increase", "peak_reserved=5%", "--max", "ooms=0")
	if code != 1 || errOut != "" {
		t.Fatalf("larger vs smaller: exit %d, stderr %q", code, errOut)
	}
	golden.Check(t, "baseline-fail.text", []byte(out))
	if code, _, _ := memstat(t, nil, "check", small, "--baseline", big, "--max-increase", "peak_reserved=0%"); code != 0 {
		t.Errorf("smaller vs larger: exit %d", code)
	}
	ratio := max(br, mr)/min(br, mr) - 1
	allow := []string{"--max-increase", "peak_reserved=" + pct(ratio+0.001)}
	if code, _, _ := memstat(t, nil, append([]string{"check", big, "--baseline", small}, allow...)...); code != 0 {
		t.Errorf("larger vs smaller with %v: exit %d", allow, code)
	}
	allow = []string{"--max-increase", "peak_reserved=" + pct(ratio-0.001)}
	if code, _, _ := memstat(t, nil, append([]string{"check", big, "--baseline", small}, allow...)...); code != 1 {
		t.Errorf("larger vs smaller with %v: exit %d", allow, code)
	}
	// An absolute increase: the difference itself passes, a byte less
	// fails.
	diff := int64(max(br, mr) - min(br, mr))
	for _, c := range []struct {
		allow int64
		code  int
	}{{diff, 0}, {diff - 1, 1}} {
		if code, _, _ := memstat(t, nil, "check", big, "--baseline", small, "--max-increase", "peak_reserved="+itoa(c.allow)); code != c.code {
			t.Errorf("increase of %d bytes allowed: exit %d, want %d", c.allow, code, c.code)
		}
	}
}

func pct(f float64) string { return strings.TrimRight(strings.TrimRight(ftoa(100*f), "0"), ".") + "%" }

// TestOneBaselinePerRank: several files each with its own baseline, and
// one baseline for several files.
func TestOneBaselinePerRank(t *testing.T) {
	b, m := bcrafton(t), magma(t)
	got := checkJSONOf(t, 0, b, m, "--baseline", b, "--baseline", m, "--max-increase", "peak_reserved=0%")
	if len(got.Files) != 2 || got.Summary.Checks != 2 {
		t.Fatalf("%+v", got)
	}
	for i, want := range []string{b, m} {
		d := got.Files[i].Devices[0]
		if got.Files[i].File != filepath.Base(want) || d.Baseline == nil || d.Baseline.File != filepath.Base(want) {
			t.Errorf("file %d: %s against %+v", i, got.Files[i].File, d.Baseline)
		}
	}
	// One baseline for both: exactly one of them reserved more.
	got = checkJSONOf(t, 1, b, m, "--baseline", b, "--max-increase", "peak_reserved=0%")
	if got.Summary.Failed != 1 || got.Files[0].Devices[0].Results[0].Passed != true {
		t.Errorf("shared baseline: %+v", got)
	}
	code, _, errOut := memstat(t, nil, "check", b, m, nesta(t), "--baseline", b, "--baseline", m, "--max-increase", "peak_reserved=0%")
	if code != 2 || !strings.Contains(errOut, "2 baselines for 3 files") {
		t.Errorf("mismatched baselines: exit %d, %q", code, errOut)
	}
}

func TestRulesFile(t *testing.T) {
	dir := t.TempDir()
	// The baseline is named relative to the rules file.
	base, err := filepath.Rel(dir, nesta(t))
	if err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(dir, "memstat.toml")
	os.WriteFile(rules, []byte(`# CI budget
baseline = "`+filepath.ToSlash(base)+`"

[max]
peak_reserved = "22GiB"
"allocated_bytes.all.peak" = "22GiB"

[max-increase]
peak_reserved = "0%"
`), 0o644)
	got := checkJSONOf(t, 0, nesta(t), "--config", rules)
	if got.Summary.Checks != 3 {
		t.Fatalf("%+v", got)
	}
	// Command-line rules add to the file's.
	got = checkJSONOf(t, 1, nesta(t), "--config", rules, "--max", "ooms=0")
	if got.Summary.Checks != 4 || got.Summary.Failed != 1 || got.Files[0].Devices[0].Results[3].Key != "ooms" {
		t.Errorf("%+v", got)
	}
	// Without rules on the command line, ./.memstat.toml is read.
	wd, _ := os.Getwd()
	defer os.Chdir(wd)
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(".memstat.toml", []byte("[max]\nooms = 0\n"), 0o644)
	code, out, _ := memstat(t, nil, "check", nesta(t))
	if code != 1 || !strings.Contains(out, "ooms <= 0") {
		t.Errorf(".memstat.toml: exit %d\n%s", code, out)
	}
	code, out, _ = memstat(t, nil, "check", nesta(t), "--max", "ooms=1")
	if code != 0 || strings.Count(out, "ooms <=") != 1 {
		t.Errorf("command-line rules replace .memstat.toml: exit %d\n%s", code, out)
	}
}

// TestBadRulesExit2: a rule that names nothing, a bad value, a bad rules
// file or a bad snapshot is one line on stderr and exit 2.
func TestBadRulesExit2(t *testing.T) {
	n := nesta(t)
	dir := t.TempDir()
	badRules := filepath.Join(dir, "bad.toml")
	os.WriteFile(badRules, []byte("[max]\npeak_reserved = \"20GiB\"\nfragmentaton = \"30%\"\n"), 0o644)
	notSnap := filepath.Join(dir, "notes.txt")
	os.WriteFile(notSnap, []byte("not a snapshot\n"), 0o644)
	for _, c := range []struct {
		args []string
		says []string
	}{
		{[]string{n, "--max", "peak_reserve=20GiB"}, []string{`memstat: --max peak_reserve=20GiB: unknown key "peak_reserve" (did you mean peak_reserved?)`}},
		{[]string{n, "--max", "alocated_bytes.all.peak=1GiB"}, []string{"did you mean allocated_bytes.all.peak"}},
		{[]string{n, "--max", "peak_reserved=big"}, []string{"--max peak_reserved=big: peak_reserved: invalid size"}},
		{[]string{n, "--max", "peak_reserved=10%"}, []string{"needs a baseline"}},
		{[]string{n, "--max-increase", "segments=many", "--baseline", n}, []string{"invalid count"}},
		{[]string{n, "--config", badRules}, []string{badRules + `:3: unknown key "fragmentaton" (did you mean fragmentation?)`}},
		{[]string{n, "--config", filepath.Join(dir, "none.toml")}, []string{"none.toml: no such rules file"}},
		{[]string{notSnap, "--max", "ooms=0"}, []string{notSnap + ": ", "text file"}},
		{[]string{n, "--baseline", notSnap, "--max-increase", "ooms=0"}, []string{notSnap + ": "}},
		{[]string{n, "--max", "ooms=0", "--device", "3"}, []string{"device 3 has no segments and no trace"}},
		// num_device_alloc exists from PyTorch 2.3; Nesta's file is 2.2.
		{[]string{n, "--max", "num_device_alloc=1000"}, []string{"device 0: --max num_device_alloc=1000: PyTorch 2.2's memory_stats has no key num_device_alloc"}},
	} {
		code, out, errOut := memstat(t, nil, append([]string{"check"}, c.args...)...)
		if code != command.ExitError || out != "" || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", c.args, code, out, errOut)
		}
		for _, s := range c.says {
			if !strings.Contains(errOut, s) {
				t.Errorf("%v: stderr %q lacks %q", c.args, errOut, s)
			}
		}
	}
	// Usage mistakes point at --help.
	for _, args := range [][]string{
		{"check"},
		{"check", n},
		{"check", n, "--max-increase", "peak_reserved=10%"},
		{"check", n, "--max", "ooms=0", "--json", "--format", "markdown"},
	} {
		code, out, errOut := memstat(t, nil, args...)
		if code != command.ExitError || out != "" || !strings.Contains(errOut, "memstat check --help") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

func TestJUnitNamesEachRule(t *testing.T) {
	n, b := nesta(t), bcrafton(t)
	out := filepath.Join(t.TempDir(), "memstat.xml")
	code, _, errOut := memstat(t, nil, "check", n, b, "--baseline", n, "--max", "peak_reserved=22GiB", "--max", "ooms=0",
		"--max-increase", "peak_reserved=10%", "--junit", out)
	if code != 1 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		XMLName  xml.Name `xml:"testsuites"`
		Tests    int      `xml:"tests,attr"`
		Failures int      `xml:"failures,attr"`
		Suites   []struct {
			Name     string `xml:"name,attr"`
			Tests    int    `xml:"tests,attr"`
			Failures int    `xml:"failures,attr"`
			Cases    []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("not well-formed: %v\n%s", err, data)
	}
	if len(doc.Suites) != 2 || doc.Suites[0].Name != n || doc.Suites[1].Name != b {
		t.Fatalf("suites: %+v", doc.Suites)
	}
	wantNames := []string{"device 0: peak_reserved <= 22.0 GiB", "device 0: ooms <= 0", "device 0: peak_reserved <= baseline + 10%"}
	// Nesta: its OOM fails; bcrafton: within 22 GiB? whatever the
	// figures, the failures the XML lists are the ones the exit status
	// counted.
	failures := 0
	for _, s := range doc.Suites {
		if len(s.Cases) != 3 || s.Tests != 3 {
			t.Errorf("suite %s: %d cases", s.Name, len(s.Cases))
			continue
		}
		f := 0
		for i, c := range s.Cases {
			if c.Name != wantNames[i] {
				t.Errorf("case %q, want %q", c.Name, wantNames[i])
			}
			if c.Failure != nil {
				f++
				if !strings.Contains(c.Failure.Message, "above the limit") {
					t.Errorf("failure message %q", c.Failure.Message)
				}
			}
		}
		if s.Failures != f {
			t.Errorf("suite %s: failures=%d, %d failed", s.Name, s.Failures, f)
		}
		failures += f
	}
	if doc.Suites[0].Cases[1].Failure == nil {
		t.Errorf("Nesta's OOM passes ooms <= 0")
	}
	if doc.Tests != 6 || doc.Failures != failures {
		t.Errorf("totals tests=%d failures=%d, counted %d", doc.Tests, doc.Failures, failures)
	}
	dir := realdata.Dir(t) + string(os.PathSeparator)
	golden.Check(t, "junit.xml", []byte(strings.ReplaceAll(string(data), dir, "")))

	// Run again: the report is replaced, keeping the file's mode, and
	// nothing else is left in the folder.
	os.Chmod(out, 0o600)
	if code, _, _ := memstat(t, nil, "check", n, "--max", "ooms=1", "--junit", out); code != 0 {
		t.Fatalf("exit %d", code)
	}
	data, _ = os.ReadFile(out)
	if st, _ := os.Stat(out); st.Mode().Perm() != 0o600 || !strings.Contains(string(data), `tests="1" failures="0"`) {
		t.Errorf("rewritten report: mode %v\n%s", st.Mode(), data)
	}
	if entries, _ := os.ReadDir(filepath.Dir(out)); len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
	// A folder that does not exist: one line naming the file, exit 2.
	bad := filepath.Join(filepath.Dir(out), "missing", "memstat.xml")
	code, _, errOut = memstat(t, nil, "check", n, "--max", "ooms=1", "--junit", bad)
	if code != 2 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "writing "+bad) {
		t.Errorf("bad --junit path: exit %d, %q", code, errOut)
	}
}

func TestGitHubActionsAnnotations(t *testing.T) {
	n := nesta(t)
	gha := map[string]string{"GITHUB_ACTIONS": "true"}
	code, out, _ := memstat(t, gha, "check", n, "--max", "ooms=0", "--max", "peak_reserved=30GiB")
	if code != 1 {
		t.Fatalf("exit %d", code)
	}
	var ann []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "::") {
			ann = append(ann, l)
		}
	}
	want := "::error file=Nesta-gitU__discrete_diffusion__memory_snapshot.json,title=memstat check%3A ooms <= 0::Nesta-gitU__discrete_diffusion__memory_snapshot.json, device 0: ooms is 1, above the limit of 0"
	if len(ann) != 1 || ann[0] != want {
		t.Errorf("annotations %q, want [%q]", ann, want)
	}
	// With --json the annotations go to stderr and stdout stays JSON.
	code, out, errOut := memstat(t, gha, "check", "--json", n, "--max", "ooms=0")
	var v map[string]any
	if code != 1 || json.Unmarshal([]byte(out), &v) != nil || !strings.HasPrefix(errOut, "::error file=") {
		t.Errorf("--json under Actions: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// Outside Actions: none.
	if _, out, errOut := memstat(t, nil, "check", n, "--max", "ooms=0"); strings.Contains(out+errOut, "::error") {
		t.Errorf("annotations outside Actions")
	}
}

func itoa(n int64) string   { return strconv.FormatInt(n, 10) }
func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', 4, 64) }

// TestSeveralFilesInParallel: the figures and verdicts of several files do
// not depend on how many are read at once, and come in argument order.
func TestSeveralFilesInParallel(t *testing.T) {
	files := []string{realdata.File(t, "silmont2000"), realdata.File(t, "ZidongLiu"), realdata.File(t, "kkaitlyn111")}
	var outs []string
	for _, jobs := range []string{"1", "3"} {
		args := append([]string{"check", "--json", "--jobs", jobs, "--max", "peak_reserved=20GiB"}, files...)
		code, out, errOut := memstat(t, nil, args...)
		if code != command.ExitCheckFailed || errOut != "" {
			t.Fatalf("jobs %s: exit %d, stderr %q; want the kkaitlyn111 snapshot to fail", jobs, code, errOut)
		}
		outs = append(outs, out)
	}
	if outs[0] != outs[1] {
		t.Errorf("--jobs 1 and --jobs 3 differ:\n%s\n%s", outs[0], outs[1])
	}
	var got struct {
		Files []struct {
			File    string `json:"file"`
			Devices []struct {
				Passed bool `json:"passed"`
			} `json:"devices"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(outs[0]), &got); err != nil || len(got.Files) != 3 {
		t.Fatalf("%v: %s", err, outs[0])
	}
	for i, f := range got.Files {
		if f.File != filepath.Base(files[i]) || len(f.Devices) != 1 || f.Devices[0].Passed != (i != 2) {
			t.Errorf("file %d: %+v, want %s passing unless it is kkaitlyn111's", i, f, filepath.Base(files[i]))
		}
	}
	code, _, errOut := memstat(t, nil, "check", "--jobs", "-2", "--max", "ooms=0", files[0])
	if code != command.ExitError || !strings.Contains(errOut, "invalid --jobs") {
		t.Errorf("--jobs -2: exit %d, stderr %q", code, errOut)
	}
}

// boundedRetries writes a snapshot whose num_alloc_retries the trace
// does not determine: a segment released and a larger one created before
// an allocation reads the same as a retry after a failed cudaMalloc and as
// empty_cache() followed by the allocation, so the figure is 0-1.
func boundedRetries(t *testing.T) string {
	t.Helper()
	a, err := allocator.New(allocator.DefaultConfig(allocator.Latest), allocator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.RecordHistory(allocator.HistoryOptions{Enabled: allocator.HistoryAll, Context: allocator.ContextAll}); err != nil {
		t.Fatal(err)
	}
	p, err := a.Malloc(30<<20, 0, snapshot.NoStack)
	if err == nil {
		err = a.Free(p, snapshot.NoStack)
	}
	a.EmptyCache(snapshot.NoStack)
	if err == nil {
		_, err = a.Malloc(40<<20, 0, snapshot.NoStack)
	}
	if err != nil {
		t.Fatal(err)
	}
	fn := filepath.Join(t.TempDir(), "bounded.pickle")
	if err := snapshot.WriteFile(fn, a.Snapshot()); err != nil {
		t.Fatal(err)
	}
	return fn
}

// A rule on a bounded figure compares the whole bound: a bound that
// straddles the limit is not a pass.
func TestRuleOnBoundedFigure(t *testing.T) {
	fn := boundedRetries(t)
	code, out, errOut := memstat(t, nil, "check", fn, "--max", "alloc_retries=0")
	if code != command.ExitCheckFailed || errOut != "" {
		t.Fatalf("straddling bound: exit %d, stderr %q\n%s", code, errOut, out)
	}
	if !strings.Contains(out, "0-1") {
		t.Errorf("the table does not show the bound:\n%s", out)
	}
	code, out, errOut = memstat(t, nil, "check", fn, "--max", "alloc_retries=1", "--json")
	if code != 0 || errOut != "" {
		t.Fatalf("bound within the limit: exit %d, stderr %q\n%s", code, errOut, out)
	}
	var js struct {
		Results []struct {
			Devices []struct {
				Bounds map[string]struct {
					Min int64  `json:"min"`
					Max *int64 `json:"max"`
				} `json:"bounds"`
				Results []struct {
					Bound   *struct{ Min, Max int64 } `json:"bound"`
					Message string                    `json:"message"`
				} `json:"results"`
			} `json:"devices"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil {
		t.Fatal(err)
	}
	if len(js.Results) != 1 || len(js.Results[0].Devices) != 1 {
		t.Fatalf("not one file with one device:\n%s", out)
	}
	d := js.Results[0].Devices[0]
	b, ok := d.Bounds["num_alloc_retries"]
	if !ok || b.Min != 0 || b.Max == nil || *b.Max != 1 {
		t.Errorf("bounds %+v, want num_alloc_retries 0-1", d.Bounds)
	}
	if r := d.Results[0]; r.Bound == nil || !strings.Contains(r.Message, "a bound") {
		t.Errorf("result %+v does not say it compared a bound", r)
	}
}
