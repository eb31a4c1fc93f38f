package oom

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/cmdtest"
	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/internal/golden"
	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/snapshot"
)

func execOOM(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return cmdtest.Run(t, func(f *command.Factory) *cobra.Command { return NewCmdOOM(f, nil) }, args...)
}

type oomJSON struct {
	Devices []struct {
		Device int `json:"device"`
		OOMs   []struct {
			Message     string `json:"message"`
			Verdict     string `json:"verdict"`
			Explanation string `json:"explanation"`
			AllocSize   int64  `json:"alloc_size"`
			DeviceFree  int64  `json:"device_free"`
			Advice      []struct{ Kind, Text string }
			State       state `json:"state"`
			Expandable  bool  `json:"expandable_segments"`
		} `json:"ooms"`
		AtPeak *state `json:"at_peak_reserved"`
	} `json:"devices"`
}

type state struct {
	Allocated int64 `json:"allocated_bytes"`
	Reserved  int64 `json:"reserved_bytes"`
	Holders   []struct{ Bytes int64 }
	Rest      *struct{ Bytes int64 } `json:"holders_rest"`
}

// holdersAddUp: the stacks listed and the rest hold all the allocated
// memory.
func (s *state) holdersAddUp() bool {
	var sum int64
	for _, h := range s.Holders {
		sum += h.Bytes
	}
	if s.Rest != nil {
		sum += s.Rest.Bytes
	}
	return sum == s.Allocated
}

func parse(t *testing.T, out string) oomJSON {
	t.Helper()
	var got oomJSON
	if err := json.Unmarshal([]byte(cmdtest.Result(t, out)), &got); err != nil {
		t.Fatalf("not one JSON object: %v", err)
	}
	return got
}

// TestEveryRealSnapshot: one explanation per oom entry, the state at the
// peak where there is none, in text and JSON.
func TestEveryRealSnapshot(t *testing.T) {
	for _, fn := range realdata.Files(t) {
		t.Run(filepath.Base(fn), func(t *testing.T) {
			s, err := snapshot.Load(fn)
			if err != nil {
				t.Fatal(err)
			}
			ooms := 0
			for _, tr := range s.Traces {
				for _, e := range tr.All() {
					if e.Action == snapshot.ActionOOM {
						ooms++
					}
				}
			}
			text, _, err := execOOM(t, fn)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Count(text, "CUDA out of memory. Tried to allocate"); got != ooms {
				t.Errorf("%d messages for %d oom entries:\n%s", got, ooms, text)
			}
			if ooms == 0 && !strings.Contains(text, "no out-of-memory error") {
				t.Errorf("text does not say there is no OOM:\n%s", text)
			}
			out, _, err := execOOM(t, "--json", "--top", "3", fn)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, d := range parse(t, out).Devices {
				n += len(d.OOMs)
				if len(d.OOMs) == 0 && d.AtPeak == nil {
					t.Errorf("device %d: neither OOMs nor the state at the peak", d.Device)
				}
				if d.AtPeak != nil && !d.AtPeak.holdersAddUp() {
					t.Errorf("device %d: holders do not add up to %d", d.Device, d.AtPeak.Allocated)
				}
				for _, o := range d.OOMs {
					if !o.State.holdersAddUp() {
						t.Errorf("device %d: holders do not add up to %d", d.Device, o.State.Allocated)
					}
					if o.Verdict == "" || o.Explanation == "" || len(o.Advice) == 0 || !strings.HasPrefix(o.Message, "CUDA out of memory.") {
						t.Errorf("device %d: incomplete explanation %+v", d.Device, o)
					}
				}
			}
			if n != ooms {
				t.Errorf("JSON has %d OOMs, the trace %d", n, ooms)
			}
		})
	}
}

// TestNestaOOM: the published OOM, a 384 MiB request on a full 22 GiB
// GPU, is too much live memory, with PyTorch 2.2's wording ("capacity":
// the 2.1 typo was fixed with the expandable_segments hint).
func TestNestaOOM(t *testing.T) {
	out, _, err := execOOM(t, "--json", realdata.File(t, "Nesta-gitU"))
	if err != nil {
		t.Fatal(err)
	}
	o := parse(t, out).Devices[0].OOMs[0]
	want := "CUDA out of memory. Tried to allocate 384.00 MiB. GPU 0 has a total capacity of 21.94 GiB of which 252.38 MiB is free. Of the allocated memory 21.68 GiB is allocated by PyTorch, and 16.58 MiB is reserved by PyTorch but unallocated."
	if !strings.HasPrefix(o.Message, want) {
		t.Errorf("message %q", o.Message)
	}
	if o.Verdict != "live memory" || o.AllocSize != 384<<20 || o.DeviceFree != 264634368 {
		t.Errorf("verdict %q, alloc %d, free %d", o.Verdict, o.AllocSize, o.DeviceFree)
	}
}

// TestRecordedMessage: for a recording with expandable segments, the
// message rebuilt from the file is the one `memstat record` printed when
// the simulated workload failed.
func TestRecordedMessage(t *testing.T) {
	fn, msg := fixture.Expandable(t)
	out, _, err := execOOM(t, "--json", fn)
	if err != nil {
		t.Fatal(err)
	}
	d := parse(t, out).Devices[0]
	if len(d.OOMs) != 1 {
		t.Fatalf("%d OOMs", len(d.OOMs))
	}
	if o := d.OOMs[0]; o.Message != msg || !o.Expandable {
		t.Errorf("message\n got %s\nwant %s\n(expandable %v)", o.Message, msg, o.Expandable)
	}
	for _, a := range d.OOMs[0].Advice {
		if a.Kind == "expandable_segments" {
			t.Error("advises expandable segments although they are on")
		}
	}
}

var goldenFiles = []struct{ name, part string }{
	{"nesta-oom", "Nesta-gitU"},
	{"yiyi-2.0", "Yiyi-philosophy"},
	{"sidsoc12-training", "sidsoc12"},
	{"kkaitlyn-notrace", "kkaitlyn111"},
}

func TestGolden(t *testing.T) {
	check := func(t *testing.T, name, fn string, extra ...string) {
		for _, format := range []string{"text", "json", "markdown"} {
			out, errOut, err := execOOM(t, append(append([]string{"--format", format}, extra...), fn)...)
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
		t.Run(g.name, func(t *testing.T) { check(t, g.name, realdata.File(t, g.part), "--top", "5") })
	}
	t.Run("recorded-expandable", func(t *testing.T) {
		fn, _ := fixture.Expandable(t)
		check(t, "recorded-expandable", fn, "--stacks")
	})
}

func TestFlags(t *testing.T) {
	for _, c := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"a.pickle"}, ""},
		{[]string{"--top", "3", "--stacks", "--all-frames", "--device", "1", "a.pickle"}, ""},
		{[]string{"--top", "0", "a.pickle"}, "--top"},
		{[]string{"--json", "--format", "markdown", "a.pickle"}, "disagree"},
		{[]string{}, "want one snapshot"},
	} {
		got, err := cmdtest.Parse(t, NewCmdOOM, c.args...)
		if c.wantErr != "" {
			if !cmdtest.IsFlagError(err, c.wantErr) {
				t.Errorf("%v: error %v, want a flag error saying %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil || got.File != "a.pickle" {
			t.Errorf("%v: %v", c.args, err)
		}
	}
}
