package diff

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/cmdtest"
	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/internal/golden"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/realdata"
)

func execDiff(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return cmdtest.Run(t, func(f *command.Factory) *cobra.Command { return NewCmdDiff(f, nil) }, args...)
}

type diffJSON struct {
	Devices []struct {
		Device      int  `json:"device"`
		Same        bool `json:"same"`
		InBefore    bool `json:"in_before"`
		InAfter     bool `json:"in_after"`
		MemoryStats []struct {
			Key       string `json:"key"`
			Before    int64  `json:"before"`
			After     int64  `json:"after"`
			Delta     int64  `json:"delta"`
			KeyFigure bool   `json:"key_figure"`
		} `json:"memory_stats"`
		Stacks []struct {
			Label  string `json:"label"`
			Change int64  `json:"change_bytes"`
			Before int64  `json:"before_bytes"`
			After  int64  `json:"after_bytes"`
		} `json:"stacks"`
		Unchanged int `json:"unchanged_stacks"`
		Segments  []struct {
			Pool          string
			Size          int64
			Before, After int
		} `json:"segments"`
	} `json:"devices"`
}

func parse(t *testing.T, out string) diffJSON {
	t.Helper()
	var got diffJSON
	if err := json.Unmarshal([]byte(cmdtest.Result(t, out)), &got); err != nil {
		t.Fatalf("not one JSON object: %v", err)
	}
	return got
}

// TestSelfDiffEveryRealSnapshot: a snapshot diffed with itself shows no
// change, in text and JSON, for every published file and device.
func TestSelfDiffEveryRealSnapshot(t *testing.T) {
	for _, fn := range realdata.Files(t) {
		t.Run(filepath.Base(fn), func(t *testing.T) {
			text, _, err := execDiff(t, fn, fn)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(text, "no change") || strings.Contains(text, "grew the most") || strings.Contains(text, "segments whose number differs") {
				t.Errorf("self diff:\n%s", text)
			}
			out, _, err := execDiff(t, "--json", fn, fn)
			if err != nil {
				t.Fatal(err)
			}
			got := parse(t, out)
			if len(got.Devices) == 0 {
				t.Fatal("no device")
			}
			for _, d := range got.Devices {
				if !d.Same || len(d.Stacks) != 0 || len(d.Segments) != 0 || d.Unchanged == 0 {
					t.Errorf("device %d: same %v, %d stacks changed, %d unchanged, %d segment sizes", d.Device, d.Same, len(d.Stacks), d.Unchanged, len(d.Segments))
				}
				keys := 0
				for _, f := range d.MemoryStats {
					if f.Delta != 0 || f.Before != f.After {
						t.Errorf("device %d: %s changed", d.Device, f.Key)
					}
					if f.KeyFigure {
						keys++
					}
				}
				if keys < 10 || len(d.MemoryStats) < 119 {
					t.Errorf("device %d: %d figures, %d key ones", d.Device, len(d.MemoryStats), keys)
				}
			}
		})
	}
}

// TestTwoRuns: two training scripts of the same course, recorded by
// different people: the figures, the stacks that grew and shrank, and the
// segment sizes, with the stack deltas adding up to the change of the
// peak.
func TestTwoRuns(t *testing.T) {
	a, b := realdata.File(t, "bcrafton"), realdata.File(t, "MAGMA27")
	out, _, err := execDiff(t, "--json", a, b)
	if err != nil {
		t.Fatal(err)
	}
	d := parse(t, out).Devices[0]
	if d.Same || len(d.Stacks) == 0 || len(d.Segments) == 0 {
		t.Fatalf("%+v", d)
	}
	var peak int64
	for _, f := range d.MemoryStats {
		if f.Key == "allocated_bytes.all.peak" {
			peak = f.Delta
		}
	}
	var sum int64
	for _, s := range d.Stacks {
		sum += s.Change
		if s.Change != s.After-s.Before {
			t.Errorf("stack %q: change %d, %d → %d", s.Label, s.Change, s.Before, s.After)
		}
	}
	if sum != peak || peak == 0 {
		t.Errorf("stack changes add up to %d, the peak changed by %d", sum, peak)
	}
}

// TestSameProgramOtherSettings: the same workload recorded with and
// without expandable segments keeps every live stack, while its segments
// differ: matching goes by frames and sizes, not addresses.
func TestSameProgramOtherSettings(t *testing.T) {
	exp, _ := fixture.Expandable(t)
	plain, _ := fixture.Record(t, "plain.pickle", "--device-memory", "1GiB")
	out, _, err := execDiff(t, "--json", plain, exp)
	if err != nil {
		t.Fatal(err)
	}
	d := parse(t, out).Devices[0]
	if len(d.Stacks) != 0 || d.Unchanged == 0 || len(d.Segments) == 0 {
		t.Errorf("stacks changed %+v (unchanged %d), segments %+v", d.Stacks, d.Unchanged, d.Segments)
	}
	for _, s := range d.Segments {
		if s.Pool == "large" && s.Before > 0 && s.After > 0 {
			t.Errorf("a segment size in both: %+v", s)
		}
	}
}

func TestGolden(t *testing.T) {
	check := func(t *testing.T, name string, files []string, formats []string, extra ...string) {
		for _, format := range formats {
			out, errOut, err := execDiff(t, append(append([]string{"--format", format}, extra...), files...)...)
			if err != nil {
				t.Fatal(err)
			}
			if errOut != "" {
				t.Errorf("stderr: %s", errOut)
			}
			golden.Check(t, name+"."+format, []byte(out))
		}
	}
	t.Run("cs336-bcrafton-magma27", func(t *testing.T) {
		files := []string{realdata.File(t, "bcrafton"), realdata.File(t, "MAGMA27")}
		check(t, "cs336-bcrafton-magma27", files, []string{"text", "markdown", "json"}, "--top", "5")
	})
	t.Run("cs336-notrace-vs-training", func(t *testing.T) {
		files := []string{realdata.File(t, "kkaitlyn111"), realdata.File(t, "sidsoc12")}
		check(t, "cs336-notrace-vs-training", files, []string{"text"}, "--top", "5", "--all-stats")
	})
	t.Run("yiyi-self", func(t *testing.T) {
		fn := realdata.File(t, "Yiyi-philosophy")
		check(t, "yiyi-self", []string{fn, fn}, []string{"text"})
	})
	t.Run("nesta-oom-vs-yiyi", func(t *testing.T) {
		files := []string{realdata.File(t, "Nesta-gitU"), realdata.File(t, "Yiyi-philosophy")}
		check(t, "nesta-oom-vs-yiyi", files, []string{"text"}, "--top", "3", "--stacks")
	})
	t.Run("recorded-expandable-vs-plain", func(t *testing.T) {
		exp, _ := fixture.Expandable(t)
		plain, _ := fixture.Record(t, "plain.pickle", "--device-memory", "1GiB")
		check(t, "recorded-plain-vs-expandable", []string{plain, exp}, []string{"text", "json"})
	})
}

func TestFlags(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	for _, c := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"a.pickle", "b.pickle"}, ""},
		{[]string{"--top", "3", "--stacks", "--all-stats", "--all-frames", "--device", "0", "a.pickle", "b.pickle"}, ""},
		{[]string{"--top", "0", "a.pickle", "b.pickle"}, "--top"},
		{[]string{"a.pickle"}, "want two snapshots"},
		{[]string{"a", "b", "c"}, "want two snapshots"},
		{[]string{"--format", "csv", "a", "b"}, "invalid --format"},
	} {
		var got *Options
		cmd := NewCmdDiff(&command.Factory{IO: ios}, func(o *Options) error { got = o; return nil })
		cmd.SetArgs(c.args)
		cmd.SetOut(ios.Out)
		cmd.SetErr(ios.ErrOut)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.Execute()
		if c.wantErr != "" {
			if !cmdtest.IsFlagError(err, c.wantErr) {
				t.Errorf("%v: error %v, want a flag error saying %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil || got.Before != "a.pickle" || got.After != "b.pickle" {
			t.Errorf("%v: %v", c.args, err)
		}
	}
	if _, _, err := execDiff(t, "--device", "5", realdata.File(t, "silmont2000"), realdata.File(t, "silmont2000")); err == nil || !strings.Contains(err.Error(), "device 5") {
		t.Errorf("--device without data: %v", err)
	}
}

// TestPairsRankByRank: BEFORE... AFTER... compares the i-th before with the
// i-th after (the ranks of two runs), in parallel or not, each pair
// reported as a diff of that pair alone would be, in order.
func TestPairsRankByRank(t *testing.T) {
	a, b := realdata.File(t, "bcrafton"), realdata.File(t, "MAGMA27")
	c, d := realdata.File(t, "silmont2000"), realdata.File(t, "kkaitlyn111")
	one, _, err := execDiff(t, a, b)
	if err != nil {
		t.Fatal(err)
	}
	two, _, err := execDiff(t, c, d)
	if err != nil {
		t.Fatal(err)
	}
	for _, jobs := range []string{"1", "2"} {
		both, _, err := execDiff(t, "--jobs", jobs, a, c, b, d)
		if err != nil {
			t.Fatal(err)
		}
		if both != one+"\n"+two {
			t.Errorf("jobs %s: pairs differ from the two diffs:\n%s", jobs, both)
		}
	}
	out, _, err := execDiff(t, "--json", a, c, b, d)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Pairs []struct {
			Before  string     `json:"before"`
			After   string     `json:"file"`
			Devices []struct{} `json:"devices"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Pairs) != 2 || !strings.HasSuffix(a, got.Pairs[0].Before) || !strings.HasSuffix(b, got.Pairs[0].After) ||
		!strings.HasSuffix(c, got.Pairs[1].Before) || !strings.HasSuffix(d, got.Pairs[1].After) || len(got.Pairs[1].Devices) == 0 {
		t.Errorf("pairs %+v", got.Pairs)
	}
}

// TestSelfDiffLoadsOnce: a file against itself is loaded and replayed
// once; the result is the one a copy of the file (two loads, two replays)
// gives.
func TestSelfDiffLoadsOnce(t *testing.T) {
	fn := realdata.File(t, "Nesta-gitU")
	data, err := os.ReadFile(fn)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), filepath.Base(fn))
	if err := os.WriteFile(cp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	self, _, err := execDiff(t, "--json", fn, fn)
	if err != nil {
		t.Fatal(err)
	}
	two, _, err := execDiff(t, "--json", fn, cp)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := parse(t, self), parse(t, two); !reflect.DeepEqual(a, b) || len(a.Devices) == 0 {
		t.Errorf("self diff %+v\ndiff with a copy %+v", a, b)
	}
	if !sameFile(fn, fn) || sameFile(fn, cp) {
		t.Errorf("sameFile: a file is itself, its copy is not")
	}
}

// TestScanBesideReadingSameDiff: a single pair read with the start
// rebuild's pass beside the reading (scanBeside: each side's scan taken
// by its device's replay) compares as a pair read without it, on every
// published file against itself and against the next one.
func TestScanBesideReadingSameDiff(t *testing.T) {
	files := realdata.Files(t)
	for k, before := range files {
		after := files[(k+1)%len(files)]
		for _, pair := range [][2]string{{before, before}, {before, after}} {
			run := func(scan bool) []deviceDiff {
				ios, _, _, _ := iostreams.Test()
				o := &Options{IO: ios, Before: pair[0], After: pair[1], Top: 10, Device: -1, scanBeside: scan}
				out, err := compare(o)
				if err != nil {
					t.Fatalf("%s, %s: %v", filepath.Base(pair[0]), filepath.Base(pair[1]), err)
				}
				return out
			}
			if got, want := run(true), run(false); !reflect.DeepEqual(got, want) {
				t.Errorf("%s, %s: the pair read with the scan beside compares otherwise", filepath.Base(pair[0]), filepath.Base(pair[1]))
			}
		}
	}
}
