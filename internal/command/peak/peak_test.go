package peak

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/cmdtest"
	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/internal/golden"
	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/snapshot"
)

func execPeak(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return cmdtest.Run(t, func(f *command.Factory) *cobra.Command { return NewCmdPeak(f, nil) }, args...)
}

type peakJSON struct {
	File    string `json:"file"`
	Devices []struct {
		Device    int   `json:"device"`
		LiveBytes int64 `json:"live_bytes"`
		PeakAlloc struct {
			Allocated int64 `json:"allocated_bytes"`
			Index     int   `json:"index"`
		} `json:"peak_allocated"`
		BeforeTrace struct{ Bytes int64 } `json:"before_trace"`
		DuringTrace struct{ Bytes int64 } `json:"during_trace"`
		Groups      []struct {
			Bytes  int64 `json:"bytes"`
			Blocks int   `json:"blocks"`
			Label  string
			Site   *struct{ Function, File string }
			Stack  []struct{ Function string }
		} `json:"groups"`
		Rest *struct {
			Bytes  int64 `json:"bytes"`
			Blocks int   `json:"blocks"`
		} `json:"rest"`
	} `json:"devices"`
}

// statsPeak is allocated_bytes.all.peak of each device, from the replay
// memstat stats prints.
func statsPeak(t *testing.T, fn string) map[int]int64 {
	t.Helper()
	s, err := snapshot.Load(fn)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int64{}
	for _, d := range command.DevicesWithData(s) {
		rp, err := analysis.Replay(s, d)
		if err != nil {
			t.Fatal(err)
		}
		out[d] = rp.Result.Stat("allocated_bytes.all.peak")
	}
	return out
}

// checkAddsUp: the groups listed (and the rest) add up to the stats peak.
func checkAddsUp(t *testing.T, fn string, out string) {
	t.Helper()
	var got peakJSON
	if err := json.Unmarshal([]byte(cmdtest.Result(t, out)), &got); err != nil {
		t.Fatalf("not one JSON object: %v", err)
	}
	want := statsPeak(t, fn)
	if len(got.Devices) != len(want) {
		t.Fatalf("%d devices, stats has %d", len(got.Devices), len(want))
	}
	for _, d := range got.Devices {
		var sum int64
		for _, g := range d.Groups {
			sum += g.Bytes
			if g.Site == nil || g.Label == "" {
				t.Errorf("device %d: group without a site or label: %+v", d.Device, g)
			}
		}
		if d.Rest != nil {
			sum += d.Rest.Bytes
		}
		if sum != want[d.Device] || d.LiveBytes != want[d.Device] || d.PeakAlloc.Allocated != want[d.Device] {
			t.Errorf("device %d: groups add up to %d, live %d, moment %d; allocated_bytes.all.peak is %d",
				d.Device, sum, d.LiveBytes, d.PeakAlloc.Allocated, want[d.Device])
		}
		if d.BeforeTrace.Bytes+d.DuringTrace.Bytes != want[d.Device] {
			t.Errorf("device %d: before %d + during %d != %d", d.Device, d.BeforeTrace.Bytes, d.DuringTrace.Bytes, want[d.Device])
		}
	}
}

// TestEveryRealSnapshot: text and JSON on every published snapshot, and
// the bytes listed add up to allocated_bytes.all.peak whatever the
// grouping and the cut.
func TestEveryRealSnapshot(t *testing.T) {
	for _, fn := range realdata.Files(t) {
		t.Run(filepath.Base(fn), func(t *testing.T) {
			text, _, err := execPeak(t, fn)
			if err != nil {
				t.Fatal(err)
			}
			live := "live at the peak"
			if strings.Contains(text, "no trace") {
				// Only the final state is known: the peaks are bounds.
				live = "live in the final state"
				if !strings.Contains(text, "peak allocated: at least ") {
					t.Errorf("no trace, and the peak is not a bound:\n%s", text)
				}
			}
			for _, want := range []string{"peak allocated", "peak reserved", live, "% of peak", "total"} {
				if !strings.Contains(text, want) {
					t.Errorf("text lacks %q:\n%s", want, text)
				}
			}
			for _, args := range [][]string{{"--json"}, {"--json", "--top", "0", "--by", "frame"}, {"--json", "--top", "3", "--by", "annotation"}, {"--json", "--by", "file", "--all-frames"}} {
				out, _, err := execPeak(t, append(args, fn)...)
				if err != nil {
					t.Fatal(err)
				}
				checkAddsUp(t, fn, out)
			}
		})
	}
}

// TestRecordedExpandable: a recording with expandable segments and
// annotations adds up too, and its phases are reported.
func TestRecordedExpandable(t *testing.T) {
	fn, _ := fixture.Expandable(t)
	out, _, err := execPeak(t, "--json", "--stacks", fn)
	if err != nil {
		t.Fatal(err)
	}
	checkAddsUp(t, fn, out)
	text, _, err := execPeak(t, fn)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"in forward", "peaks by annotation", "backward", "optimizer"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
}

// goldenFiles: an OOM (Nesta, a pickle named .json), the 2.0 format
// (Yiyi), a big mid-run training trace with annotations (sidsoc12), a file
// without a trace (kkaitlyn).
var goldenFiles = []struct{ name, part string }{
	{"nesta-oom", "Nesta-gitU"},
	{"yiyi-2.0", "Yiyi-philosophy"},
	{"sidsoc12-training", "sidsoc12"},
	{"kkaitlyn-notrace", "kkaitlyn111"},
}

func TestGolden(t *testing.T) {
	check := func(t *testing.T, name, fn string, extra ...string) {
		for _, format := range []string{"text", "json", "markdown"} {
			out, errOut, err := execPeak(t, append(append([]string{"--format", format}, extra...), fn)...)
			if err != nil {
				t.Fatal(err)
			}
			if errOut != "" {
				t.Errorf("stderr: %s", errOut)
			}
			golden.Check(t, name+"."+format, []byte(out))
		}
	}
	for _, g := range goldenFiles {
		t.Run(g.name, func(t *testing.T) { check(t, g.name, realdata.File(t, g.part)) })
	}
	t.Run("bcrafton-by-frame-stacks", func(t *testing.T) {
		check(t, "bcrafton-by-frame-stacks", realdata.File(t, "bcrafton"), "--by", "frame", "--stacks", "--top", "5")
	})
	t.Run("recorded-expandable", func(t *testing.T) {
		fn, _ := fixture.Expandable(t)
		check(t, "recorded-expandable", fn, "--stacks")
	})
}

func TestFlags(t *testing.T) {
	for _, c := range []struct {
		args    []string
		wantErr string
		by      analysis.GroupBy
	}{
		{[]string{"a.pickle"}, "", analysis.ByStack},
		{[]string{"--by", "annotation", "--top", "0", "a.pickle"}, "", analysis.ByAnnotation},
		{[]string{"--by", "line", "a.pickle"}, "invalid grouping", ""},
		{[]string{"--top", "-1", "a.pickle"}, "--top", ""},
		{[]string{"--format", "csv", "a.pickle"}, "invalid --format", ""},
		{[]string{}, "want one snapshot", ""},
		{[]string{"a", "b"}, "want one snapshot", ""},
	} {
		got, err := cmdtest.Parse(t, NewCmdPeak, c.args...)
		if c.wantErr != "" {
			if !cmdtest.IsFlagError(err, c.wantErr) {
				t.Errorf("%v: error %v, want a flag error saying %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil || got.by != c.by {
			t.Errorf("%v: %v, by %q", c.args, err, got.by)
		}
	}
}

// TestBadInput: a file that is not a snapshot, and a device without data,
// are one-line errors.
func TestBadInput(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.pickle")
	os.WriteFile(bad, []byte("not a pickle"), 0o644)
	if _, _, err := execPeak(t, bad); err == nil || strings.Contains(err.Error(), "\n") {
		t.Errorf("bad file: %v", err)
	}
	if _, _, err := execPeak(t, "--device", "3", realdata.File(t, "silmont2000")); err == nil || !strings.Contains(err.Error(), "device 3") {
		t.Errorf("device without data: %v", err)
	}
}
