package record

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/memstat/memstat/pkg/pickle"
)

// releaseKeys is what each release's torch.cuda.memory._dump_snapshot
// writes (docs/versions.md, "Snapshot keys"): the top-level keys, the keys
// of segments, blocks, a 2.0 block's history items and trace entries, and
// the allocator_settings keys. Sources: 2.0 THCPModule_memorySnapshot
// (Module.cpp, blocks with "history", no "address"), 2.1 (segment_pool_id,
// is_expandable, frames on segments and blocks), 2.2 time_us (PR #112266),
// 2.3 allocator_settings, 2.5 external_annotations, v2.6.0's Module.cpp
// (read: eight settings keys, no compile_context), 2.8 compile_context,
// 2.9 graph_capture_record_stream_reuse, 2.10 user_metadata (PR #165490);
// the real snapshots in shared/testdata/real agree with every row they
// cover (2.0, 2.1, 2.2, 2.3-2.4, 2.5-2.7, 2.9, 2.10).
type releaseKeys struct {
	top, segment, block, history, entry, settings []string
	// label is what `memstat stats` reports for the release: the release,
	// or the range of releases whose files have the same keys.
	label string
}

func keysOf(v string) func(extra ...string) []string {
	base := strings.Fields(v)
	return func(extra ...string) []string {
		out := append(slices.Clone(base), extra...)
		sort.Strings(out)
		return out
	}
}

func wantKeys(v string) releaseKeys {
	// "memstat" is memstat record's own key (snapshot.Recorder: the
	// workload and how its times were made); PyTorch's readers ignore it,
	// as check_snapshot.py confirms below.
	top := keysOf("segments device_traces memstat")
	seg20 := keysOf("device address total_size allocated_size active_size requested_size stream segment_type blocks")
	seg21 := seg20("segment_pool_id", "is_expandable", "frames")
	entry := keysOf("action addr size stream frames")
	settings := keysOf("PYTORCH_CUDA_ALLOC_CONF max_split_size garbage_collection_threshold expandable_segments " +
		"pinned_num_register_threads release_lock_on_cudamalloc pinned_use_cuda_host_register roundup_power2_divisions")
	blk21 := keysOf("address size requested_size state frames")()
	switch v {
	case "2.0":
		return releaseKeys{top: top(), segment: seg20(), block: keysOf("size requested_size state history")(),
			history: keysOf("addr real_size frames")(), entry: entry(), label: "2.0"}
	case "2.1":
		return releaseKeys{top: top(), segment: seg21, block: blk21, entry: entry(), label: "2.1"}
	case "2.2":
		return releaseKeys{top: top(), segment: seg21, block: blk21, entry: entry("time_us"), label: "2.2"}
	case "2.3", "2.4":
		return releaseKeys{top: top("allocator_settings"), segment: seg21, block: blk21, entry: entry("time_us"),
			settings: settings(), label: "2.3-2.4"}
	case "2.5", "2.6", "2.7":
		return releaseKeys{top: top("allocator_settings", "external_annotations"), segment: seg21, block: blk21,
			entry: entry("time_us"), settings: settings(), label: "2.5-2.7"}
	case "2.8":
		return releaseKeys{top: top("allocator_settings", "external_annotations"), segment: seg21, block: blk21,
			entry: entry("time_us", "compile_context"), settings: settings(), label: "2.8"}
	case "2.9":
		return releaseKeys{top: top("allocator_settings", "external_annotations"), segment: seg21, block: blk21,
			entry: entry("time_us", "compile_context"), settings: settings("graph_capture_record_stream_reuse"), label: "2.9"}
	}
	return releaseKeys{top: top("allocator_settings", "external_annotations"), segment: seg21, block: blk21,
		entry: entry("time_us", "compile_context", "user_metadata"), settings: settings("graph_capture_record_stream_reuse"), label: "2.10"}
}

// fileKeys reads the key sets of a written snapshot with memstat's own
// unpickler (no Python needed): the union over all segments, blocks,
// history items and trace entries.
func fileKeys(t *testing.T, path string) releaseKeys {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	root, vs, err := pickle.Loads(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	sets := map[string]map[string]bool{}
	add := func(what string, dict pickle.Value) {
		if sets[what] == nil {
			sets[what] = map[string]bool{}
		}
		items := vs.Items(dict)
		for i := 0; i+1 < len(items); i += 2 {
			sets[what][vs.Text(items[i])] = true
		}
	}
	get := func(d pickle.Value, k string) pickle.Value {
		v, ok := vs.Get(d, k)
		if !ok {
			t.Fatalf("%s: no %q", path, k)
		}
		return v
	}
	add("top", root)
	for _, sg := range vs.Items(get(root, "segments")) {
		add("segment", sg)
		for _, b := range vs.Items(get(sg, "blocks")) {
			add("block", b)
			if h, ok := vs.Get(b, "history"); ok {
				for _, item := range vs.Items(h) {
					add("history", item)
				}
			}
		}
	}
	for _, tr := range vs.Items(get(root, "device_traces")) {
		for _, e := range vs.Items(tr) {
			add("entry", e)
		}
	}
	if st, ok := vs.Get(root, "allocator_settings"); ok {
		add("settings", st)
	}
	list := func(what string) []string {
		var out []string
		for k := range sets[what] {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	return releaseKeys{top: list("top"), segment: list("segment"), block: list("block"), history: list("history"),
		entry: list("entry"), settings: list("settings")}
}

// For every release 2.0 to 2.10, `record --torch-version V` writes exactly
// that release's snapshot keys, CPython and the viewer's opcode set accept
// the file (check_snapshot.py; skipped without python3), and `memstat
// stats` reads it back as V, or as the range of releases whose files have
// the same keys.
func TestRecordWritesEachReleasesFormat(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(moduleRoot(t), "testdata", "workloads", "side_stream.mem")
	var files []string
	for minor := 0; minor <= 10; minor++ {
		v := "2." + string(rune('0'+minor%10))
		if minor == 10 {
			v = "2.10"
		}
		t.Run(v, func(t *testing.T) {
			f := filepath.Join(dir, "v"+v+".pickle")
			if _, stderr, err := runCommand(t, "--file "+src+" --torch-version "+v+" -o "+f); err != nil {
				t.Fatalf("record: %v\n%s", err, stderr)
			}
			files = append(files, f)
			got, want := fileKeys(t, f), wantKeys(v)
			for _, c := range []struct {
				what      string
				got, want []string
			}{
				{"top level", got.top, want.top}, {"segment", got.segment, want.segment},
				{"block", got.block, want.block}, {"block history", got.history, want.history},
				{"trace entry", got.entry, want.entry}, {"allocator_settings", got.settings, want.settings},
			} {
				// A recording has an oom entry only when it runs out of
				// memory; device_free replaces addr there.
				g := slices.DeleteFunc(slices.Clone(c.got), func(k string) bool { return k == "device_free" })
				if !slices.Equal(g, c.want) {
					t.Errorf("%s keys:\n got %v\nwant %v", c.what, c.got, c.want)
				}
			}
			out := runStats(t, f)
			if title := "(PyTorch " + want.label + ")"; !strings.Contains(out, title) {
				t.Errorf("stats does not say %s:\n%s", title, firstLines(out, 3))
			}
		})
	}
	checkSnapshot(t, files...)
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// The traceback line record prints names the exception class the release
// raised (OOMError.ExceptionName): torch.cuda.OutOfMemoryError up to 2.3,
// torch.OutOfMemoryError from 2.4.
func TestRecordNamesEachReleasesException(t *testing.T) {
	dir := t.TempDir()
	for v, want := range map[string]string{"2.3": "torch.cuda.OutOfMemoryError: CUDA out of memory.", "2.4": "torch.OutOfMemoryError: CUDA out of memory."} {
		_, stderr, err := runCommand(t, "-w oom --torch-version "+v+" -o "+filepath.Join(dir, v+".pickle"))
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if !strings.Contains(stderr, "\n"+want) && !strings.HasPrefix(stderr, want) {
			t.Errorf("%s: stderr has no %q:\n%s", v, want, stderr)
		}
	}
}

// record refuses backend:cudaMallocAsync in one line: with that backend
// _record_memory_history fails (CudaMallocAsyncAllocator::recordHistory,
// "cudaMallocAsync does not yet support recordHistory", 2.0-2.10), so
// PyTorch writes no snapshot, and simulating the native allocator instead
// would write a file PyTorch never could.
func TestRecordRefusesAsyncBackend(t *testing.T) {
	f := filepath.Join(t.TempDir(), "x.pickle")
	_, _, err := runCommand(t, "-w train --alloc-conf backend:cudaMallocAsync -o "+f)
	if err == nil || !strings.Contains(err.Error(), "--alloc-conf: backend:cudaMallocAsync is not simulated") || strings.Contains(err.Error(), "\n") {
		t.Errorf("error %v, want one line refusing backend:cudaMallocAsync", err)
	}
	if _, statErr := os.Stat(f); statErr == nil {
		t.Error("a snapshot was written")
	}
}

// A 2.0 recording writes each block's HistoryChain as 2.0's
// DeviceCachingAllocator::snapshot does (block_info.history from
// block->history): an active block lists its own allocation only (its
// chain is trimmed up to its end before the push in alloc_found_block), a
// free block made of merged blocks lists each one's last allocation
// (try_merge_blocks joins the chains), as the merged inactive blocks of
// the 2.0 real file do.
func TestRecord20WritesHistoryChains(t *testing.T) {
	f := filepath.Join(t.TempDir(), "v2.0.pickle")
	if _, stderr, err := runCommand(t, "--torch-version 2.0 -o "+f); err != nil {
		t.Fatalf("record: %v\n%s", err, stderr)
	}
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	root, vs, err := pickle.Loads(data)
	if err != nil {
		t.Fatal(err)
	}
	segs, _ := vs.Get(root, "segments")
	merged := 0
	for _, sg := range vs.Items(segs) {
		blocks, _ := vs.Get(sg, "blocks")
		for _, b := range vs.Items(blocks) {
			st, _ := vs.Get(b, "state")
			h, ok := vs.Get(b, "history")
			n := len(vs.Items(h))
			switch {
			case vs.Text(st) == "active_allocated" && (!ok || n != 1):
				t.Errorf("active block with %d history items, want 1", n)
			case vs.Text(st) == "inactive" && n > 1:
				merged++
			}
		}
	}
	if merged == 0 {
		t.Error("no free block lists the allocations of the blocks merged into it")
	}
}
