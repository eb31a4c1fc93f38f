package record

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/stats"
	"github.com/memstat/memstat/internal/golden"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/snapshot"
	"github.com/memstat/memstat/pkg/workload"
)

// runCommand runs `memstat record ARGS` (split at spaces) and returns its
// stdout, stderr and error.
func runCommand(t *testing.T, args string) (string, string, error) {
	t.Helper()
	ios, _, stdout, stderr := iostreams.Test()
	cmd := NewCmdRecord(&command.Factory{IO: ios}, nil)
	cmd.SetArgs(strings.Fields(args))
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SilenceUsage = true
	cmd.SilenceErrors = true
	_, err := cmd.ExecuteC()
	return stdout.String(), stderr.String(), err
}

func TestNewCmdRecordFlags(t *testing.T) {
	for _, tc := range []struct {
		args    string
		wantErr string
		check   func(*Options) bool
	}{
		{args: "-o x.pickle", check: func(o *Options) bool {
			return o.Workload == "train" && o.DeviceMemory == "80GiB" && o.TorchVersion == "2.10" && len(o.Params) == 0 && o.Seed == 1
		}},
		{args: "-w inference --layers 2 --kv-cache static -o x", check: func(o *Options) bool {
			return o.Workload == "inference" && o.Params["layers"] == "2" && o.Params["kv-cache"] == "static" && len(o.Params) == 2
		}},
		{args: "--file w.mem --max-entries 100 --alloc-conf expandable_segments:True -o x", check: func(o *Options) bool {
			return o.File == "w.mem" && o.MaxEntries == 100 && o.AllocConf == "expandable_segments:True"
		}},
		{args: "--list", check: func(o *Options) bool { return o.List }},
		{args: "", wantErr: "the snapshot file is missing: -o OUT.pickle"},
		{args: "--file w.mem -w train -o x", wantErr: "--workload and --file exclude each other"},
		{args: "--file w.mem --layers 2 -o x", wantErr: "--layers sets a built-in workload's parameter; a workload file sets its own sizes"},
		{args: "--max-entries -1 -o x", wantErr: "--max-entries must not be negative"},
	} {
		ios, _, _, _ := iostreams.Test()
		var got *Options
		cmd := NewCmdRecord(&command.Factory{IO: ios}, func(o *Options) error { got = o; return nil })
		cmd.SetArgs(strings.Fields(tc.args))
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		err := cmd.Execute()
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("%q: error %v, want %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !tc.check(got) {
			t.Errorf("%q: err %v, options %+v", tc.args, err, got)
		}
	}
}

// moduleRoot is the folder holding go.mod.
func moduleRoot(t *testing.T) string {
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found")
		}
		dir = parent
	}
}

// checkSnapshot runs the shared checker (../shared/tools/check_snapshot.py
// beside the checkout): PyTorch's own unpickler and the viewer's opcode set
// must accept the file, with consistent segments.
func checkSnapshot(t *testing.T, files ...string) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on the PATH; skipping check_snapshot.py")
	}
	tool := filepath.Join(moduleRoot(t), "..", "shared", "tools", "check_snapshot.py")
	if _, err := os.Stat(tool); err != nil {
		t.Skipf("%s not found; skipping", tool)
	}
	out, err := exec.Command(py, append([]string{tool}, files...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("check_snapshot.py: %v\n%s", err, out)
	}
}

// Every built-in workload's recording is a snapshot PyTorch's readers
// accept.
func TestBuiltinsPassCheckSnapshot(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for _, b := range workload.Builtins {
		f := filepath.Join(dir, b.Name+".pickle")
		if _, stderr, err := runCommand(t, "-w "+b.Name+" -o "+f); err != nil {
			t.Fatalf("%s: %v\n%s", b.Name, err, stderr)
		}
		files = append(files, f)
	}
	for _, w := range []string{"fragmentation", "side_stream", "training_loop"} {
		f := filepath.Join(dir, w+".pickle")
		src := filepath.Join(moduleRoot(t), "testdata", "workloads", w+".mem")
		if _, stderr, err := runCommand(t, "--file "+src+" -o "+f); err != nil {
			t.Fatalf("%s: %v\n%s", w, err, stderr)
		}
		files = append(files, f)
	}
	f := filepath.Join(dir, "v23.pickle")
	if _, _, err := runCommand(t, "--torch-version 2.3 --alloc-conf expandable_segments:True -o "+f); err != nil {
		t.Fatal(err)
	}
	g := filepath.Join(dir, "graphs.pickle")
	if _, _, err := runCommand(t, "-w inference --cuda-graphs --new-tokens 8 -o "+g); err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, append(files, f, g)...)
}

// The same command gives the same bytes; another seed changes varlen.
func TestDeterministic(t *testing.T) {
	dir := t.TempDir()
	read := func(args, name string) []byte {
		p := filepath.Join(dir, name)
		if _, _, err := runCommand(t, args+" -o "+p); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, args := range []string{"", "-w varlen --seed 7", "-w inference --new-tokens 8", "-w oom"} {
		if !bytes.Equal(read(args, "a.pickle"), read(args, "b.pickle")) {
			t.Errorf("%q: two runs wrote different files", args)
		}
	}
	if bytes.Equal(read("-w varlen --seed 1", "a.pickle"), read("-w varlen --seed 2", "b.pickle")) {
		t.Error("varlen: seeds 1 and 2 wrote the same file")
	}
}

// runStats runs `memstat stats ARGS` and returns its stdout.
func runStats(t *testing.T, args ...string) string {
	t.Helper()
	ios, _, stdout, stderr := iostreams.Test()
	cmd := stats.NewCmdStats(&command.Factory{IO: ios}, nil)
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("memstat stats %v: %v\n%s", args, err, stderr)
	}
	return stdout.String()
}

// `memstat stats` on a recorded file gives exactly the memory_stats the
// simulator held at the end of the run, and record's headline is the one
// stats prints; the file's segments are the simulator's final state.
func TestStatsOfRecordingAreTheSimulators(t *testing.T) {
	for _, tc := range []struct{ workload, conf string }{
		{"train", ""}, {"inference", ""}, {"varlen", "expandable_segments:True"}, {"oom", ""},
		{"train", "max_split_size_mb:64,roundup_power2_divisions:4"},
	} {
		b, _ := workload.Lookup(tc.workload)
		w, err := b.New(nil, 1)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := allocator.ParseConfig(tc.conf, allocator.Latest)
		if err != nil {
			t.Fatal(err)
		}
		e, _ := workload.NewEnv(workload.Options{Config: cfg, DeviceMemory: 80 << 30})
		w.Run(e)
		want := map[string]int64{}
		for _, kv := range e.Allocator().MemoryStats() {
			want[kv.Key] = kv.Value
		}

		p := filepath.Join(t.TempDir(), "r.pickle")
		args := "-w " + tc.workload + " -o " + p
		if tc.conf != "" {
			args += " --alloc-conf " + tc.conf
		}
		recorded, _, err := runCommand(t, args)
		if err != nil {
			t.Fatal(err)
		}
		var js struct {
			Files []struct {
				Devices []struct {
					MemoryStats map[string]int64 `json:"memory_stats"`
					Bounds      map[string]struct {
						Min int64  `json:"min"`
						Max *int64 `json:"max"`
					} `json:"bounds"`
					Headline struct {
						Partial bool `json:"partial_history"`
					} `json:"headline"`
				} `json:"devices"`
			} `json:"results"`
		}
		if err := json.Unmarshal([]byte(runStats(t, "--json", p)), &js); err != nil {
			t.Fatal(err)
		}
		dev := js.Files[0].Devices[0]
		if dev.Headline.Partial {
			t.Errorf("%s: stats calls the history partial", tc.workload)
		}
		// A figure the trace does not determine is a bound that holds
		// the simulator's value; every other figure equals it.
		for k, b := range dev.Bounds {
			if v, ok := want[k]; !ok || v < b.Min || b.Max != nil && v > *b.Max {
				t.Errorf("%s %q: %s: bound %d-%v does not hold the simulator's %d", tc.workload, tc.conf, k, b.Min, b.Max, v)
			}
			delete(want, k)
		}
		if !maps.Equal(dev.MemoryStats, want) {
			for k, v := range want {
				if dev.MemoryStats[k] != v {
					t.Errorf("%s %q: %s: stats says %d, simulator held %d", tc.workload, tc.conf, k, dev.MemoryStats[k], v)
				}
			}
			t.Errorf("%s: %d keys from stats, %d from the simulator", tc.workload, len(dev.MemoryStats), len(want))
		}
		text := strings.Split(runStats(t, p), "\n")
		lines := strings.Split(strings.TrimSpace(recorded), "\n")
		if len(text) < 2 || text[1] != lines[len(lines)-1] {
			t.Errorf("%s: record's headline %q, stats' %q", tc.workload, lines[len(lines)-1], text[1])
		}

		s, err := snapshot.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		var reserved, allocated int64
		for _, sg := range s.Segments {
			reserved += sg.TotalSize
			allocated += sg.AllocatedSize
		}
		if reserved != want["reserved_bytes.all.current"] || allocated != want["allocated_bytes.all.current"] {
			t.Errorf("%s: segments hold %d reserved / %d allocated, simulator %d / %d", tc.workload,
				reserved, allocated, want["reserved_bytes.all.current"], want["allocated_bytes.all.current"])
		}
	}
}

// The default recording's stdout: what ran, what the formulas say, and the
// stats headline.
func TestStdoutGolden(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, args string }{
		{"default", "-o " + filepath.Join(dir, "default.pickle")},
		{"inference", "-w inference --kv-cache static --new-tokens 16 -o " + filepath.Join(dir, "gen.pickle")},
		{"list", "--list"},
	} {
		stdout, stderr, err := runCommand(t, tc.args)
		if err != nil || stderr != "" {
			t.Fatalf("%s: %v\n%s", tc.name, err, stderr)
		}
		golden.Check(t, "stdout_"+tc.name, []byte(strings.ReplaceAll(stdout, dir, "OUT")))
	}
}

// A workload file's prints come first, then the recording's lines.
func TestFileStdout(t *testing.T) {
	src := filepath.Join(moduleRoot(t), "testdata", "workloads", "fragmentation.mem")
	dir := t.TempDir()
	stdout, _, err := runCommand(t, "--file "+src+" -o "+filepath.Join(dir, "frag.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "stdout_fragmentation", []byte(strings.ReplaceAll(stdout, dir, "OUT")))
}

// An OOM is recorded, not lost: the file is written and ends with the oom
// entry, PyTorch's message goes to stderr, and the command succeeds.
func TestOOMIsRecorded(t *testing.T) {
	p := filepath.Join(t.TempDir(), "oom.pickle")
	stdout, stderr, err := runCommand(t, "--layers 32 --hidden 4096 --heads 32 --seq 2048 --batch 1 --device-memory 24GiB -o "+p)
	if err != nil {
		t.Fatal(err)
	}
	const msg = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
	if !strings.HasPrefix(stderr, msg) || !strings.Contains(stderr, "GPU 0 has a total capacity of 24.00 GiB") ||
		!strings.Contains(stderr, "holds the state at the failure (its trace ends with the oom entry)") {
		t.Errorf("stderr:\n%s", stderr)
	}
	if !strings.Contains(stdout, "peak allocated") {
		t.Errorf("stdout:\n%s", stdout)
	}
	s, err := snapshot.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	trace := s.Trace(0)
	if last := trace.Last(); last.Action != snapshot.ActionOOM {
		t.Errorf("last trace entry %v, want oom", last.Action)
	}
}

// Bad input fails with exit status 2 and names the problem; nothing is
// written.
func TestErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "train.mem")
	os.WriteFile(bad, []byte("alloc w 4MiB\n\nfree w\nfree x\n"), 0o644)
	out := filepath.Join(dir, "out.pickle")
	for _, tc := range []struct{ args, want string }{
		{"--file " + bad, bad + ":4: unknown tensor \"x\""},
		{"--file " + filepath.Join(dir, "missing.mem"), "no such file or directory"},
		{"-w nope", `unknown workload "nope" (built-in workloads: train, inference, varlen, oom)`},
		{"--new-tokens 3", "--new-tokens does not apply to the train workload"},
		{"--device-memory lots", `--device-memory "lots": want a positive size such as 24GiB or 80GB`},
		{"--torch-version 1.13", `--torch-version: allocator: version "1.13": only PyTorch 2.x is modelled`},
		{"--alloc-conf max_split_size_mb:5", "--alloc-conf: "},
	} {
		_, _, err := runCommand(t, tc.args+" -o "+out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.want)
		}
		if code := command.ExitCode(err); code != command.ExitError {
			t.Errorf("%q: exit status %d, want 2", tc.args, code)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%q wrote %s", tc.args, out)
		}
	}
}

// A recording with private pools (graph capture, a graph sharing another's
// pool, a MemPool used twice, a pool released mid-run, empty_cache while
// pools are alive) round-trips: `stats --json` gives the simulator's
// memory_stats and its per-pool figures, every placement and segment
// event is reproduced, and PyTorch's readers accept the file. At 2.9+ the
// trace names each entry's pool; at 2.8 the replay works it out from the
// addresses.
func TestPoolsRoundTrip(t *testing.T) {
	src := filepath.Join(moduleRoot(t), "internal", "command", "testdata", "cuda_graphs.mem")
	var files []string
	for _, v := range []string{"2.10", "2.8"} {
		f, err := workload.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		ver, _ := allocator.ParseVersion(v)
		e, _ := workload.NewEnv(workload.Options{Config: allocator.DefaultConfig(ver), DeviceMemory: 80 << 30})
		f.Run(e)
		if err := e.Err(); err != nil {
			t.Fatal(err)
		}
		a := e.Allocator()
		want := map[string]int64{}
		for _, kv := range a.MemoryStats() {
			want[kv.Key] = kv.Value
		}
		res, _ := a.PrivatePoolStats()
		if res.Peak == 0 {
			t.Fatalf("%s: the workload put nothing in private pools", v)
		}

		p := filepath.Join(t.TempDir(), "graphs-"+v+".pickle")
		if _, stderr, err := runCommand(t, "--torch-version "+v+" --file "+src+" -o "+p); err != nil {
			t.Fatalf("%s: %v\n%s", v, err, stderr)
		}
		files = append(files, p)
		var js struct {
			Files []struct {
				Devices []struct {
					MemoryStats map[string]int64 `json:"memory_stats"`
					Bounds      map[string]struct {
						Min int64  `json:"min"`
						Max *int64 `json:"max"`
					} `json:"bounds"`
					PrivatePools struct {
						ReservedPeak *int64 `json:"reserved_bytes_peak"`
						Pools        []struct {
							ID          [2]int64 `json:"pool_id"`
							Segments    int      `json:"segments"`
							Reserved    int64    `json:"reserved_bytes"`
							Allocated   int64    `json:"allocated_bytes"`
							LargestFree int64    `json:"largest_free_block"`
						} `json:"pools"`
					} `json:"private_pools"`
				} `json:"devices"`
			} `json:"results"`
		}
		if err := json.Unmarshal([]byte(runStats(t, "--json", p)), &js); err != nil {
			t.Fatal(err)
		}
		dev := js.Files[0].Devices[0]
		for k, w := range want {
			// A forced release says nothing of the synchronization
			// before it (see allocator's TestReplayRoundTrip).
			if v == "2.8" && k == "num_sync_all_streams" {
				continue
			}
			// A figure the trace does not determine is a bound that
			// must hold the simulator's value.
			if b, ok := dev.Bounds[k]; ok {
				if w < b.Min || b.Max != nil && w > *b.Max {
					t.Errorf("%s: %s: bound %d-%v does not hold the simulator's %d", v, k, b.Min, b.Max, w)
				}
				continue
			}
			if dev.MemoryStats[k] != w {
				t.Errorf("%s: %s: stats --json says %d, the simulator %d", v, k, dev.MemoryStats[k], w)
			}
		}
		pp := dev.PrivatePools
		b, bounded := dev.Bounds["private_pool_reserved"]
		switch {
		case v == "2.10" && (pp.ReservedPeak == nil || *pp.ReservedPeak != res.Peak || bounded):
			t.Errorf("%s: private peak %v (bound %v), simulator %d", v, pp.ReservedPeak, b, res.Peak)
		case v == "2.8" && (pp.ReservedPeak != nil || !bounded || b.Max == nil || b.Min > res.Peak || *b.Max < res.Peak || b.Min == *b.Max):
			// The prefill graph's segments are created and freed
			// inside the trace: their pool is open, the peak an
			// ordinary bound that holds the simulator's value.
			t.Errorf("%s: private peak %v, bound %+v, simulator %d", v, pp.ReservedPeak, b, res.Peak)
		}
		var got, wantPools []string
		for _, u := range pp.Pools {
			got = append(got, fmt.Sprint(u.ID, u.Segments, u.Reserved, u.Allocated, u.LargestFree))
		}
		for _, u := range a.PoolUsages() {
			if u.Segments > 0 || u.ID == (snapshot.PoolID{}) {
				wantPools = append(wantPools, fmt.Sprint(u.ID, u.Segments, u.Reserved, u.Allocated, u.LargestFree))
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(wantPools) || len(got) < 3 {
			t.Errorf("%s: per-pool figures\n got %v\nwant %v", v, got, wantPools)
		}

		s, err := snapshot.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := replay.New(s, replay.Options{})
		if err != nil {
			t.Fatal(err)
		}
		rr, err := r.Run()
		if err != nil {
			t.Fatal(err)
		}
		if f := rr.Fidelity; f.Unapplied != 0 || !rr.Agreement.Exact() || v == "2.10" && (!f.Placements.Complete() || !f.SegmentEvents.Complete() || f.Divergences != 0) {
			t.Errorf("%s: fidelity %+v, agreement %+v", v, *f, *rr.Agreement)
		}
	}
	checkSnapshot(t, files...)
	mvCheck(t, files...)
}

// MemoryVizEnv names a folder holding PyTorch's torch/utils/viz/MemoryViz.js
// and process_alloc_data.js (never committed here); with it, mvCheck runs
// ../shared/tools/mv_check.cjs, the web viewer's own parser and timeline
// code, on the recordings.
const MemoryVizEnv = "MEMSTAT_MEMORYVIZ"

// mvCheck runs ../shared/tools/mv_check.cjs on each file, in a scratch
// folder beside the viewer's two files from $MEMSTAT_MEMORYVIZ: the viewer
// must parse the file and draw its timelines, and its segment timeline
// must peak at the recording's peak reserved memory (every pool's
// segments counted). It skips, saying how to run it, without node or the
// viewer's files.
func mvCheck(t *testing.T, files ...string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not on the PATH; skipping mv_check.cjs")
	}
	viz := os.Getenv(MemoryVizEnv)
	if viz == "" {
		t.Skipf("mv_check.cjs skipped: set %s to a folder holding PyTorch's torch/utils/viz/MemoryViz.js and process_alloc_data.js to run it", MemoryVizEnv)
	}
	dir := t.TempDir()
	for _, src := range []string{
		filepath.Join(moduleRoot(t), "..", "shared", "tools", "mv_check.cjs"),
		filepath.Join(viz, "MemoryViz.js"),
		filepath.Join(viz, "process_alloc_data.js"),
	} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatalf("mv_check.cjs needs %s: %v", src, err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(src)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	peakRe := regexp.MustCompile(`Active Cached Segment Timeline: .* peak_bytes=(\d+)`)
	for _, f := range files {
		out, err := exec.Command(node, filepath.Join(dir, "mv_check.cjs"), f).CombinedOutput()
		if err != nil {
			t.Errorf("mv_check.cjs %s: %v\n%s", f, err, out)
			continue
		}
		s, err := snapshot.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		rp, err := analysis.Replay(s, 0)
		if err != nil {
			t.Fatal(err)
		}
		m := peakRe.FindSubmatch(out)
		if m == nil || string(m[1]) != strconv.FormatInt(rp.Result.PeakReserved.Bytes, 10) {
			t.Errorf("mv_check.cjs %s: the viewer's segment timeline does not peak at the %d bytes reserved at the peak:\n%s", f, rp.Result.PeakReserved.Bytes, out)
		}
	}
}

// inference --cuda-graphs captures decode once per batch size, each graph
// in a pool of its own, and replays exactly: every placement reproduced,
// the pools' figures the simulator's.
func TestInferenceCUDAGraphs(t *testing.T) {
	p := filepath.Join(t.TempDir(), "g.pickle")
	out, stderr, err := runCommand(t, "-w inference --cuda-graphs --batch 6 --new-tokens 8 -o "+p)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(out, "decode captured as CUDA graphs for batch sizes 6, 4, 2, 1, each in a private pool of its own") {
		t.Errorf("stdout:\n%s", out)
	}
	s, err := snapshot.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	pools := map[snapshot.PoolID]bool{}
	for _, sg := range s.Segments {
		pools[sg.PoolID] = true
	}
	for _, id := range []snapshot.PoolID{{1, 0}, {2, 0}, {3, 0}, {4, 0}} {
		if !pools[id] {
			t.Errorf("no segment of graph pool %v", id)
		}
	}
	r, err := replay.New(s, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run()
	if err != nil {
		t.Fatal(err)
	}
	if f := res.Fidelity; !f.Placements.Complete() || !f.SegmentEvents.Complete() || !res.Agreement.Exact() || len(res.Pools.Final) != 5 {
		t.Errorf("fidelity %+v, agreement %+v, %d pools", *f, *res.Agreement, len(res.Pools.Final))
	}
}
