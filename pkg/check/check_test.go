package check

import (
	"bytes"
	"encoding/xml"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/memstat/memstat/pkg/replay"
)

func TestParseRuleUnits(t *testing.T) {
	for _, c := range []struct {
		kind     Kind
		spec     string
		unit     Unit
		value    float64
		relative bool
		str      string
	}{
		{Max, "peak_reserved=20GiB", Bytes, 20 << 30, false, "peak_reserved <= 20.0 GiB"},
		{Max, "peak_allocated = 512MB", Bytes, 512e6, false, "peak_allocated <= 488.3 MiB"},
		{Max, "allocated_bytes.all.peak=1073741824", Bytes, 1 << 30, false, "allocated_bytes.all.peak <= 1.0 GiB"},
		{Max, "max_split_size=256MiB", Bytes, 256 << 20, false, "max_split_size <= 256.0 MiB"},
		{Max, "fragmentation=30%", Fraction, 0.3, false, "fragmentation <= 30.0%"},
		{Max, "fragmentation=0.25", Fraction, 0.25, false, "fragmentation <= 25.0%"},
		{Max, "ooms=0", Count, 0, false, "ooms <= 0"},
		{Max, "segment.all.peak=200", Count, 200, false, "segment.all.peak <= 200"},
		{Max, "num_alloc_retries=3", Count, 3, false, "num_alloc_retries <= 3"},
		{MaxIncrease, "peak_reserved=10%", Bytes, 0.1, true, "peak_reserved <= baseline + 10%"},
		{MaxIncrease, "peak_reserved=1GiB", Bytes, 1 << 30, false, "peak_reserved <= baseline + 1.0 GiB"},
		{MaxIncrease, "segments=12.5%", Count, 0.125, true, "segments <= baseline + 12.5%"},
		{MaxIncrease, "segments=20", Count, 20, false, "segments <= baseline + 20"},
		// A share's increase in percent is in percentage points.
		{MaxIncrease, "fragmentation=5%", Fraction, 0.05, false, "fragmentation <= baseline + 5.0 pt"},
	} {
		r, err := ParseRule(c.kind, c.spec, "--flag")
		if err != nil {
			t.Errorf("%s: %v", c.spec, err)
			continue
		}
		if r.Unit != c.unit || r.Value != c.value || r.Relative != c.relative || r.String() != c.str {
			t.Errorf("%s: got unit %v value %v relative %v %q, want %v %v %v %q", c.spec, r.Unit, r.Value, r.Relative, r.String(), c.unit, c.value, c.relative, c.str)
		}
	}
}

func TestParseRuleErrors(t *testing.T) {
	for _, c := range []struct {
		kind Kind
		spec string
		says []string
	}{
		{Max, "peak_reserved", []string{"--max: want KEY=VALUE"}},
		{Max, "=20GiB", []string{"want KEY=VALUE"}},
		{Max, "peak_reserve=20GiB", []string{`unknown key "peak_reserve"`, "did you mean peak_reserved"}},
		{Max, "allocated_bytes.all.peek=1GiB", []string{"did you mean allocated_bytes.all.peak"}},
		{Max, "reserved=1GiB", []string{"did you mean", "reserved_bytes"}},
		{Max, "zzzzzzzzzz=1", []string{"unknown key", "peak_reserved", "allocated_bytes.all.peak"}},
		{Max, "peak_reserved=lots", []string{"peak_reserved: invalid size"}},
		{Max, "peak_reserved=10%", []string{"needs a baseline", "--max-increase"}},
		{Max, "ooms=1.5", []string{"invalid count"}},
		{Max, "ooms=-1", []string{"invalid count"}},
		{Max, "fragmentation=1.5", []string{"invalid share"}},
		{Max, "fragmentation=x%", []string{"invalid percentage"}},
		{MaxIncrease, "peak_reserved=-5%", []string{"invalid percentage"}},
	} {
		_, err := ParseRule(c.kind, c.spec, "--"+strings.ReplaceAll(c.kind.String(), "_", "-"))
		if err == nil {
			t.Errorf("%s: no error", c.spec)
			continue
		}
		for _, s := range c.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: error %q does not say %q", c.spec, err, s)
			}
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error is not one line: %q", c.spec, err)
		}
	}
}

func TestKeysCoverEveryMemoryStat(t *testing.T) {
	keys := StatKeys()
	if len(keys) < 120 {
		t.Fatalf("only %d memory_stats keys", len(keys))
	}
	units := map[string]Unit{
		"allocated_bytes.all.peak": Bytes, "reserved_bytes.large_pool.current": Bytes, "requested_bytes.small_pool.freed": Bytes,
		"inactive_split_bytes.all.peak": Bytes, "max_split_size": Bytes, "segment.all.peak": Count, "num_ooms": Count,
		"num_device_alloc": Count, "oversize_segments.peak": Count, "inactive_split.all.current": Count,
	}
	for k, want := range units {
		got, ok := lookupKey(k)
		if !ok || got != want {
			t.Errorf("%s: unit %v, known %v; want %v", k, got, ok, want)
		}
	}
}

func fig(values map[string]float64) *Figures { return NewFigures("2.5", values) }

func TestEvaluate(t *testing.T) {
	rules := func(specs ...string) []Rule {
		var out []Rule
		for _, s := range specs {
			kind := Max
			if rest, ok := strings.CutPrefix(s, "+"); ok {
				kind, s = MaxIncrease, rest
			}
			r, err := ParseRule(kind, s, "test")
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		return out
	}
	cur := fig(map[string]float64{"peak_reserved": 22 << 30, "fragmentation": 0.12, "ooms": 0, "segments": 130, "allocated_bytes.all.peak": 20 << 30})
	base := &Baseline{File: "base.pickle", Figures: fig(map[string]float64{"peak_reserved": 20 << 30, "fragmentation": 0.05, "ooms": 0, "segments": 100, "allocated_bytes.all.peak": 20 << 30})}
	d, err := Evaluate("run.pickle", 0, cur, rules(
		"peak_reserved=21GiB",         // 22 > 21: fail
		"peak_reserved=22GiB",         // equal: pass
		"fragmentation=10%",           // 12% > 10%: fail
		"ooms=0",                      // pass
		"+peak_reserved=10%",          // limit 22 GiB: pass
		"+peak_reserved=5%",           // limit 21 GiB: fail
		"+peak_reserved=1GiB",         // limit 21 GiB: fail
		"+fragmentation=5%",           // 5% + 5 pt = 10% < 12%: fail
		"+fragmentation=7%",           // 12%: pass
		"+segments=30%",               // 130 <= 130: pass
		"+segments=29",                // 129 < 130: fail
		"+allocated_bytes.all.peak=0", // equal: pass
	), base)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{false, true, false, true, true, false, false, false, true, true, false, true}
	for i, o := range d.Outcomes {
		if o.Passed != want[i] {
			t.Errorf("%s: passed %v (actual %v, limit %v), want %v", o.Rule, o.Passed, o.Actual, o.Limit, want[i])
		}
	}
	if d.Failed() != 6 {
		t.Errorf("failed %d, want 6", d.Failed())
	}
	if got := d.Outcomes[0].Message(); got != "peak_reserved is 22.0 GiB, above the limit of 21.0 GiB" {
		t.Errorf("message %q", got)
	}
	if got := d.Outcomes[5].Message(); got != "peak_reserved is 22.0 GiB, above the limit of 21.0 GiB (baseline 20.0 GiB + 5%; change +10.0%)" {
		t.Errorf("message %q", got)
	}
	if got := d.Outcomes[7].Message(); got != "fragmentation is 12.0%, above the limit of 10.0% (baseline 5.0% + 5.0 pt; change +7.0 pt)" {
		t.Errorf("message %q", got)
	}

	// A key the file's version lacks names nothing there: an error.
	old := NewFigures("2.2", map[string]float64{"peak_reserved": 1})
	if _, err := Evaluate("old.pickle", 0, old, rules("num_device_alloc=10"), nil); err == nil ||
		!strings.Contains(err.Error(), "old.pickle: device 0") || !strings.Contains(err.Error(), "no key num_device_alloc") {
		t.Errorf("missing key: %v", err)
	}
	// An increase rule without a baseline is an error.
	if _, err := Evaluate("run.pickle", 0, cur, rules("+peak_reserved=10%"), nil); err == nil || !strings.Contains(err.Error(), "needs a baseline") {
		t.Errorf("no baseline: %v", err)
	}
}

func TestParseConfig(t *testing.T) {
	src := `# memory budget
baseline = "ci/base line.pickle"   # relative to this file

[max]
peak_reserved = "20GiB"   # the card has 24
fragmentation = "30%"
ooms = 0
"allocated_bytes.all.peak" = "18GiB"
segment.large_pool.peak = 1_000

[max-increase]
peak_reserved = "10%"
segments = 20
`
	c, err := ParseConfig(filepath.Join("repo", ".memstat.toml"), src)
	if err != nil {
		t.Fatal(err)
	}
	if c.Baseline != filepath.Join("repo", "ci", "base line.pickle") {
		t.Errorf("baseline %q", c.Baseline)
	}
	var got []string
	for _, r := range c.Rules {
		got = append(got, r.Kind.String()+" "+r.String()+" @"+r.Source)
	}
	want := []string{
		"max peak_reserved <= 20.0 GiB @repo/.memstat.toml:5",
		"max fragmentation <= 30.0% @repo/.memstat.toml:6",
		"max ooms <= 0 @repo/.memstat.toml:7",
		"max allocated_bytes.all.peak <= 18.0 GiB @repo/.memstat.toml:8",
		"max segment.large_pool.peak <= 1000 @repo/.memstat.toml:9",
		"max_increase peak_reserved <= baseline + 10% @repo/.memstat.toml:12",
		"max_increase segments <= baseline + 20 @repo/.memstat.toml:13",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, c := range []struct{ src, says string }{
		{"peak_reserved = \"1GiB\"", "r.toml:1: unknown setting \"peak_reserved\" before any section"},
		{"[min]\n", "r.toml:1: unknown section [min]"},
		{"[max\n", "r.toml:1: section header \"[max\" has no closing ]"},
		{"\n[max]\npeak_reserve = \"1GiB\"", "r.toml:3: unknown key \"peak_reserve\" (did you mean peak_reserved"},
		{"[max]\npeak_reserved = \"1GiB\"\npeak_reserved = \"2GiB\"", "r.toml:3: peak_reserved is set twice (first on line 2)"},
		{"[max]\npeak_reserved = \"1GiB", "r.toml:2: unterminated string"},
		{"[max]\npeak_reserved =", "r.toml:2: peak_reserved has no value"},
		{"[max]\npeak_reserved", "r.toml:2: want key = value"},
		{"[max]\npeak_reserved = 1 GiB", "r.toml:2: peak_reserved: quote the value"},
		{"[max]\nfragmentation = \"lots\"", "r.toml:2: fragmentation: invalid share"},
		{"[max]\npeak reserved = 1", "r.toml:2: bad key \"peak reserved\""},
	} {
		_, err := ParseConfig("r.toml", c.src)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%q: error %v, want %q", c.src, err, c.says)
		}
	}
}

// junitDoc is a generic reading of a JUnit file: every element with its
// attributes, for the schema-ish checks.
type junitDoc struct {
	XMLName  xml.Name `xml:"testsuites"`
	Tests    string   `xml:"tests,attr"`
	Failures string   `xml:"failures,attr"`
	Suites   []struct {
		Name     string `xml:"name,attr"`
		Tests    string `xml:"tests,attr"`
		Failures string `xml:"failures,attr"`
		Errors   string `xml:"errors,attr"`
		Cases    []struct {
			Name      string `xml:"name,attr"`
			Classname string `xml:"classname,attr"`
			Failure   *struct {
				Message string `xml:"message,attr"`
				Type    string `xml:"type,attr"`
			} `xml:"failure"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// checkJUnitShape walks every element and checks the structure the common
// JUnit schema (Ant/Jenkins) requires: element nesting, required
// attributes, and counts that add up.
func checkJUnitShape(t *testing.T, data []byte) junitDoc {
	t.Helper()
	allowed := map[string][]string{
		"testsuites": {""},
		"testsuite":  {"testsuites"},
		"properties": {"testsuite"},
		"property":   {"properties"},
		"testcase":   {"testsuite"},
		"failure":    {"testcase"},
		"system-out": {"testcase", "testsuite"},
	}
	required := map[string][]string{
		"testsuite": {"name", "tests", "failures", "errors"},
		"testcase":  {"name", "classname"},
		"failure":   {"message", "type"},
		"property":  {"name", "value"},
	}
	dec := xml.NewDecoder(bytes.NewReader(data))
	var stack []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, data)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			parent := ""
			if len(stack) > 0 {
				parent = stack[len(stack)-1]
			}
			ok := false
			for _, p := range allowed[el.Name.Local] {
				ok = ok || p == parent
			}
			if !ok {
				t.Errorf("<%s> inside <%s>", el.Name.Local, parent)
			}
			have := map[string]bool{}
			for _, a := range el.Attr {
				have[a.Name.Local] = true
			}
			for _, a := range required[el.Name.Local] {
				if !have[a] {
					t.Errorf("<%s> lacks %s", el.Name.Local, a)
				}
			}
			stack = append(stack, el.Name.Local)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		}
	}
	var doc junitDoc
	if err := xml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	total, failed := 0, 0
	for _, s := range doc.Suites {
		f := 0
		for _, c := range s.Cases {
			if c.Failure != nil {
				f++
			}
		}
		if s.Tests != itoa(len(s.Cases)) || s.Failures != itoa(f) || s.Errors != "0" {
			t.Errorf("suite %s: tests=%s failures=%s errors=%s, has %d cases, %d failed", s.Name, s.Tests, s.Failures, s.Errors, len(s.Cases), f)
		}
		total += len(s.Cases)
		failed += f
	}
	if doc.Tests != itoa(total) || doc.Failures != itoa(failed) {
		t.Errorf("testsuites: tests=%s failures=%s, want %d %d", doc.Tests, doc.Failures, total, failed)
	}
	return doc
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestJUnitIsWellFormedAndNamesEachRule(t *testing.T) {
	r1, _ := ParseRule(Max, "peak_reserved=1GiB", "--max peak_reserved=1GiB")
	r2, _ := ParseRule(Max, "fragmentation=30%", ".memstat.toml:3")
	r3, _ := ParseRule(MaxIncrease, "peak_reserved=10%", "--max-increase")
	f := fig(map[string]float64{"peak_reserved": 2 << 30, "fragmentation": 0.1})
	base := &Baseline{File: "base.pickle", Figures: fig(map[string]float64{"peak_reserved": 2 << 30})}
	// A file name with characters XML must escape.
	odd := `ranks/<rank 1> & "x".pickle`
	d0, _ := Evaluate("rank0.pickle", 0, f, []Rule{r1, r2, r3}, base)
	d1, _ := Evaluate(odd, 1, f, []Rule{r1, r2, r3}, base)
	var buf bytes.Buffer
	if err := WriteJUnit(&buf, []string{"rank0.pickle", odd}, []*Device{d0, d1}, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	doc := checkJUnitShape(t, buf.Bytes())
	if len(doc.Suites) != 2 || doc.Suites[0].Name != "rank0.pickle" || doc.Suites[1].Name != odd {
		t.Fatalf("suites %+v", doc.Suites)
	}
	for i, s := range doc.Suites {
		var names []string
		for _, c := range s.Cases {
			names = append(names, c.Name)
		}
		dev := []string{"device 0: ", "device 1: "}[i]
		want := []string{dev + "peak_reserved <= 1.0 GiB", dev + "fragmentation <= 30.0%", dev + "peak_reserved <= baseline + 10%"}
		if strings.Join(names, "|") != strings.Join(want, "|") {
			t.Errorf("suite %d cases %q, want %q", i, names, want)
		}
		if s.Cases[0].Failure == nil || s.Cases[0].Failure.Message != "peak_reserved is 2.0 GiB, above the limit of 1.0 GiB" {
			t.Errorf("first case failure %+v", s.Cases[0].Failure)
		}
		if s.Cases[1].Failure != nil || s.Cases[2].Failure != nil {
			t.Errorf("passing cases carry failures")
		}
	}
	if !strings.Contains(buf.String(), `timestamp="2026-01-02T03:04:05"`) {
		t.Errorf("no timestamp:\n%s", buf.String())
	}
}

func TestGitHubAnnotations(t *testing.T) {
	r1, _ := ParseRule(Max, "peak_reserved=1GiB", "x")
	r2, _ := ParseRule(Max, "ooms=5", "x")
	d, _ := Evaluate("runs/a,b:c%.pickle", 0, fig(map[string]float64{"peak_reserved": 2 << 30, "ooms": 1}), []Rule{r1, r2}, nil)
	var buf bytes.Buffer
	if err := WriteGitHubAnnotations(&buf, []*Device{d}); err != nil {
		t.Fatal(err)
	}
	want := "::error file=runs/a%2Cb%3Ac%25.pickle,title=memstat check%3A peak_reserved <= 1.0 GiB::runs/a,b:c%25.pickle, device 0: peak_reserved is 2.0 GiB, above the limit of 1.0 GiB\n"
	if buf.String() != want {
		t.Errorf("got  %q\nwant %q", buf.String(), want)
	}
}

// A bounded figure passes a rule only when its whole bound is within the
// limit: a CI gate never passes on a figure it could not compute.
func TestBoundedFigure(t *testing.T) {
	rule, err := ParseRule(Max, "alloc_retries=5", "--max")
	if err != nil {
		t.Fatal(err)
	}
	rules := []Rule{rule}
	five, nine := int64(5), int64(9)
	for _, tc := range []struct {
		bound replay.Bound
		pass  bool
		says  string
	}{
		{replay.Bound{Min: 3, Max: &five}, true, "is 3-5 (a bound"},
		{replay.Bound{Min: 3, Max: &nine}, false, "not provably within"},
		{replay.Bound{Min: 3}, false, "is >= 3 (a bound"},
		{replay.Bound{Min: 6}, false, "above the limit"},
	} {
		f := NewFigures("2.9", map[string]float64{})
		f.SetBound("num_alloc_retries", tc.bound)
		d, err := Evaluate("x.pickle", 0, f, rules, nil)
		if err != nil {
			t.Fatal(err)
		}
		o := d.Outcomes[0]
		if o.Passed != tc.pass || o.Bound == nil || !strings.Contains(o.Message(), tc.says) {
			t.Errorf("bound %s: passed %v, message %q; want passed %v and %q", tc.bound, o.Passed, o.Message(), tc.pass, tc.says)
		}
	}
}
