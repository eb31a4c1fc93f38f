package replay

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/cmdtest"
	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/golden"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/snapshot"
)

// execReplay runs `memstat replay ARGS` and returns stdout and stderr with
// the real-snapshot folder cut from paths.
func execReplay(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ios, _, out, errOut := iostreams.Test()
	cmd := NewCmdReplay(&command.Factory{IO: ios}, nil)
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	dir := realdata.Dir(t) + string(os.PathSeparator)
	return strings.ReplaceAll(out.String(), dir, ""), strings.ReplaceAll(errOut.String(), dir, ""), err
}

type tally struct {
	Recorded   int `json:"recorded"`
	Reproduced int `json:"reproduced"`
}

type pairJSON struct {
	Recorded  int64 `json:"recorded"`
	Simulated int64 `json:"simulated"`
}

type replayJSON struct {
	Files []struct {
		File    string `json:"file"`
		Devices []struct {
			Device       int              `json:"device"`
			WhatIf       bool             `json:"what_if"`
			AllocConf    string           `json:"alloc_conf"`
			DeviceMemory int64            `json:"device_memory"`
			Coverage     string           `json:"coverage"`
			Recorded     map[string]int64 `json:"recorded"`
			Simulated    map[string]int64 `json:"simulated"`
			Fidelity     *struct {
				SegmentEvents    tally `json:"segment_events"`
				Placements       tally `json:"placements"`
				ForcedOperations int64 `json:"forced_operations"`
			} `json:"fidelity"`
			OOMs pairJSON `json:"ooms"`
		} `json:"devices"`
	} `json:"results"`
}

func replayJSONOf(t *testing.T, args ...string) replayJSON {
	t.Helper()
	out, _, err := execReplay(t, append([]string{"--json"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	var got replayJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	if len(got.Files) != 1 || len(got.Files[0].Devices) == 0 {
		t.Fatalf("files %+v", got.Files)
	}
	return got
}

// fromEmpty and midRun name the published traces by how they start (the
// MANIFEST and allocator model §16): the replay must say so too.
var fromEmpty = map[string]bool{
	"Nesta-gitU": true, "ZidongLiu": true, "drisspg": true, "mryab": true, "shreyansh26": true, "silmont2000": true,
}

// TestFidelityOnEveryRealTrace: with the recorded settings, the simulator
// itself reproduces 100% of the recorded segment events (same size, same
// order) and of the placements (same offset in the same segment), on every
// published trace, from empty and mid-run, with nothing forced. The counts
// are taken from the files here, independently of the replay.
//
// drisspg's mini_snapshot is a cut-down test fixture: its trace stops
// before the snapshot's final state (24 blocks still live at its end are
// free in the snapshot). Its 14 segment events and 28 placements are all
// reproduced; the missing frees only matter to the final state, which
// `memstat stats` reconciles and reports.
func TestFidelityOnEveryRealTrace(t *testing.T) {
	traces := 0
	var events, placements int
	for _, fn := range realdata.Files(t) {
		snap, err := snapshot.Load(fn)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Trace(0).Len() == 0 {
			continue
		}
		traces++
		name := filepath.Base(fn)
		t.Run(name, func(t *testing.T) {
			var wantEvents, wantPlacements, wantOOMs int
			for _, e := range snap.Trace(0).All() {
				switch e.Action {
				case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentFree, snapshot.ActionSegmentMap, snapshot.ActionSegmentUnmap:
					wantEvents++
				case snapshot.ActionAlloc:
					wantPlacements++
				case snapshot.ActionOOM:
					wantOOMs++
				}
			}
			d := replayJSONOf(t, "--device", "0", fn).Files[0].Devices[0]
			f := d.Fidelity
			if d.WhatIf || f == nil {
				t.Fatal("no fidelity with the recorded settings")
			}
			if f.SegmentEvents != (tally{wantEvents, wantEvents}) || f.Placements != (tally{wantPlacements, wantPlacements}) || f.ForcedOperations != 0 {
				t.Errorf("fidelity %+v, want %d/%d segment events and %d/%d placements", *f, wantEvents, wantEvents, wantPlacements, wantPlacements)
			}
			if d.OOMs.Recorded != int64(wantOOMs) || d.Recorded["num_ooms"] != int64(wantOOMs) {
				t.Errorf("ooms %+v, num_ooms %d, want %d", d.OOMs, d.Recorded["num_ooms"], wantOOMs)
			}
			start := strings.SplitN(name, "__", 2)[0]
			if want := map[bool]string{true: "complete", false: "partial"}[fromEmpty[start]]; d.Coverage != want {
				t.Errorf("coverage %s, want %s", d.Coverage, want)
			}
			events += wantEvents
			placements += wantPlacements
		})
	}
	if traces != 17 {
		t.Errorf("%d published traces, want 17", traces)
	}
	t.Logf("%d traces: %d segment events and %d placements, all reproduced", traces, events, placements)
}

// TestWhatIf: under other settings the figures stay plausible (the same
// tensors are allocated; an expandable-segments run has no cudaMalloc'd
// segments), there is no fidelity claim, and a small device runs out of
// memory. The simulator's state is checked after every entry by the
// replay package's TestRealWhatIf; here it is the command's output.
func TestWhatIf(t *testing.T) {
	fn := realdata.File(t, "ZidongLiu")
	for _, conf := range []string{"max_split_size_mb:128", "expandable_segments:True"} {
		d := replayJSONOf(t, fn, "--alloc-conf", conf).Files[0].Devices[0]
		if !d.WhatIf || d.Fidelity != nil || d.AllocConf != conf {
			t.Errorf("%s: what_if %v, fidelity %v, alloc_conf %q", conf, d.WhatIf, d.Fidelity, d.AllocConf)
		}
		for _, k := range []string{"requested_bytes.all.peak", "allocation.all.peak", "allocation.all.allocated"} {
			if d.Simulated[k] != d.Recorded[k] {
				t.Errorf("%s: simulated %s = %d, recorded %d", conf, k, d.Simulated[k], d.Recorded[k])
			}
		}
		if d.Simulated["reserved_bytes.all.peak"] < d.Simulated["allocated_bytes.all.peak"] || d.OOMs.Simulated != 0 {
			t.Errorf("%s: implausible: %+v", conf, d)
		}
		if conf == "expandable_segments:True" && (d.Simulated["segment.all.peak"] != 0 || d.Simulated["reserved_bytes.all.peak"] > d.Recorded["reserved_bytes.all.peak"]) {
			t.Errorf("expandable: segments %d, reserved peak %d (recorded %d)", d.Simulated["segment.all.peak"],
				d.Simulated["reserved_bytes.all.peak"], d.Recorded["reserved_bytes.all.peak"])
		}
		if conf == "max_split_size_mb:128" && (d.Simulated["max_split_size"] != 128<<20 || d.Recorded["max_split_size"] != -1) {
			t.Errorf("max_split_size simulated %d, recorded %d", d.Simulated["max_split_size"], d.Recorded["max_split_size"])
		}
	}
	d := replayJSONOf(t, fn, "--device-memory", "512MiB").Files[0].Devices[0]
	if d.DeviceMemory != 512<<20 || d.OOMs.Simulated == 0 || d.Simulated["num_ooms"] != d.OOMs.Simulated || d.Simulated["reserved_bytes.all.peak"] > 512<<20 {
		t.Errorf("512MiB device: memory %d, ooms %+v, reserved peak %d", d.DeviceMemory, d.OOMs, d.Simulated["reserved_bytes.all.peak"])
	}
	text, _, err := execReplay(t, fn, "--device-memory", "512MiB")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "what-if") || !strings.Contains(text, "fidelity: not claimed") {
		t.Errorf("what-if text:\n%s", text)
	}
}

// goldenReplays: a from-empty trace with an OOM (recorded settings, with
// the device capacity derived from the oom entry), and a mid-run training
// trace under expandable segments.
var goldenReplays = []struct {
	name, part string
	args       []string
}{
	{"nesta-oom", "Nesta-gitU", nil},
	{"bcrafton-expandable", "bcrafton", []string{"--alloc-conf", "expandable_segments:True"}},
}

func TestGolden(t *testing.T) {
	for _, g := range goldenReplays {
		t.Run(g.name, func(t *testing.T) {
			fn := realdata.File(t, g.part)
			for _, format := range []string{"text", "json"} {
				out, errOut, err := execReplay(t, append([]string{fn, "--format", format}, g.args...)...)
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

func TestFlags(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	for _, c := range []struct {
		args     []string
		wantErr  string
		whatIf   bool
		capacity int64
	}{
		{[]string{"a.pickle"}, "", false, 0},
		{[]string{"a.pickle", "--what-if"}, "", true, 0},
		{[]string{"a.pickle", "--alloc-conf", ""}, "", true, 0},
		{[]string{"a.pickle", "--device-memory", "24GiB"}, "", true, 24 << 30},
		{[]string{"a.pickle", "--device-memory", "80GB"}, "", true, 80e9},
		{[]string{"a.pickle", "--device-memory", "1.5G"}, "", true, 3 << 29},
		{[]string{"a.pickle", "--torch-version", "2.4"}, "", false, 0},
		{[]string{"a.pickle", "--device-memory", "lots"}, "--device-memory", false, 0},
		{[]string{"a.pickle", "--device-memory", "0"}, "positive", false, 0},
		{[]string{"a.pickle", "--torch-version", "1.13"}, "--torch-version", false, 0},
		{[]string{}, "want one snapshot", false, 0},
		{[]string{"a.pickle", "b.pickle"}, "want one snapshot", false, 0},
	} {
		var got *Options
		cmd := NewCmdReplay(&command.Factory{IO: ios}, func(o *Options) error { got = o; return nil })
		cmd.SetArgs(c.args)
		cmd.SetOut(ios.Out)
		cmd.SetErr(ios.ErrOut)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.Execute()
		if c.wantErr != "" {
			if _, ok := err.(*command.FlagError); !ok || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%v: error %v, want a flag error saying %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil || got.WhatIf != c.whatIf || got.capacity != c.capacity {
			t.Errorf("%v: %v, what-if %v, capacity %d", c.args, err, got.WhatIf, got.capacity)
		}
	}
}

// TestBadAllocConf: a settings string the version's parser rejects is a
// usage error naming the option.
func TestBadAllocConf(t *testing.T) {
	fn := realdata.File(t, "silmont2000")
	_, _, err := execReplay(t, fn, "--alloc-conf", "max_split_size_mb:10")
	if _, ok := err.(*command.FlagError); !ok || !strings.Contains(err.Error(), "--alloc-conf") || strings.Contains(err.Error(), "\n") {
		t.Errorf("error %v", err)
	}
}

// In markdown a line right after a table is read as one more row, so every
// table must end with a blank line.
func TestMarkdownTablesEnd(t *testing.T) {
	out, _, err := execReplay(t, realdata.File(t, "Nesta-gitU"), "--format", "markdown")
	if err != nil {
		t.Fatal(err)
	}
	tables := cmdtest.MarkdownTables(t, out)
	if tables == 0 {
		t.Fatalf("no markdown table in:\n%s", out)
	}
}

// backend:cudaMallocAsync is refused with one line: PyTorch's async
// backend records no history (CudaMallocAsyncAllocator::recordHistory is a
// TORCH_CHECK(false) in every release 2.0-2.10), so there is no native
// allocator to stand in for.
func TestAsyncBackendRefused(t *testing.T) {
	_, _, err := execReplay(t, realdata.File(t, "ZidongLiu"), "--alloc-conf", "backend:cudaMallocAsync")
	if err == nil || !strings.Contains(err.Error(), "backend:cudaMallocAsync is not simulated") || strings.Contains(err.Error(), "\n") {
		t.Errorf("error %v, want one line refusing backend:cudaMallocAsync", err)
	}
}
