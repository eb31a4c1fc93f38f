package snapshot

import (
	"fmt"
	"io"
	"strconv"

	"github.com/memstat/memstat/internal/atomicfile"
	"github.com/memstat/memstat/pkg/pickle"
)

// Memo key spaces of the objects Write shares.
const (
	spaceStack uint32 = iota + 1
	spaceFrame
)

// settingsKeys are the allocator_settings keys of PyTorch 2.10, in its
// order. Write writes all of them except graph_capture_record_stream_reuse,
// which 2.9 added (docs/versions.md): that one only when Settings.Other
// has it, so that a 2.3-2.8 snapshot keeps its eight keys.
var settingsKeys = [...]string{
	"PYTORCH_CUDA_ALLOC_CONF", "max_split_size", "garbage_collection_threshold", "expandable_segments",
	"pinned_num_register_threads", "release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
	"graph_capture_record_stream_reuse", "roundup_power2_divisions",
}

// Write writes s as the pickle torch.cuda.memory._dump_snapshot() writes in
// the newest PyTorch release: a protocol-4 pickle, in the opcode subset
// PyTorch's web viewer reads, of
//
//	{"segments": [...], "device_traces": [[...], ...],
//	 "allocator_settings": {...}, "external_annotations": [...]}
//
// with dict keys in PyTorch's order; a snapshot with
// Features.BlockHistory is written in PyTorch 2.0's form instead:
// segments without segment_pool_id, is_expandable and frames, blocks
// without address and frames, each block's allocations in a "history"
// list of {addr, real_size, frames} items (Snapshot.History's chains when
// set; otherwise one item, for active blocks and free blocks with a
// stack), and frames keyed filename, name, line:
//
//   - segment: device, address, total_size, allocated_size, active_size,
//     requested_size, stream, segment_type, segment_pool_id (a 2-tuple),
//     is_expandable, frames, blocks;
//   - block: address, size, requested_size, state, frames;
//   - trace entry: action, addr (device_free for oom), size, stream, then
//     time_us, compile_context and user_metadata when s.Features says the
//     snapshot has them, and frames when the entry has a stack;
//   - frame: name, filename, line.
//
// device_traces has one list per device (s.Devices()). allocator_settings
// is left out when s.Settings is nil; otherwise it has the 2.10 key set
// (values the model lacks take PyTorch's defaults; keys kept in
// Settings.Other follow them). external_annotations ({name, stage, device,
// time_us}) is written when s.Features.Annotations is set or s has
// annotations.
//
// As in PyTorch's own files every distinct frame dict and every distinct
// stack list is written once and referenced by the memo after, and so are
// repeated strings. Integers are written exactly; addresses, streams and
// times of real snapshots are far below 2^53, the limit of the viewer's
// JavaScript numbers. The output depends only on s.
//
// Write fails on a model that refers to a stack or string its tables do not
// hold, and on errors from w; w may then hold part of a pickle (WriteFile
// never leaves one behind).
func Write(w io.Writer, s *Snapshot) error {
	sw := &writer{e: pickle.NewEncoder(w), s: s}
	sw.snapshot()
	if sw.err != nil {
		return sw.err
	}
	return sw.e.Close()
}

// WriteFile writes s to path atomically: into a temporary file in the same
// folder, synced to disk, then renamed over path. Readers of path see the
// old file or the complete new one, never a part; on an error the
// temporary file is removed and path is left as it was. A new file gets
// mode 0644; a replaced one keeps its mode.
func WriteFile(path string, s *Snapshot) error {
	return atomicfile.Write(path, func(w io.Writer) error { return Write(w, s) })
}

type writer struct {
	e   *pickle.Encoder
	s   *Snapshot
	err error // a model inconsistency (the encoder keeps its own errors)
}

func (w *writer) fail(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("snapshot: "+format, args...)
	}
}

func (w *writer) snapshot() {
	e, s := w.e, w.s
	e.BeginDict()
	e.Key("segments")
	e.BeginList()
	for i := range s.Segments {
		w.segment(&s.Segments[i])
		if w.err != nil {
			return
		}
	}
	e.EndList()

	e.Key("device_traces")
	e.BeginList()
	for d := range s.Devices() {
		e.BeginList()
		for _, en := range s.Trace(d).All() {
			w.entry(&en)
			if w.err != nil {
				return
			}
		}
		e.EndList()
	}
	e.EndList()

	if s.Settings != nil {
		e.Key("allocator_settings")
		w.settings(s.Settings)
	}
	if r := s.Recorder; r != nil {
		e.Key("memstat")
		e.BeginDict()
		for _, kv := range [][2]string{{"tool", r.Tool}, {"workload", r.Workload}, {"time_model", r.TimeModel}} {
			e.Key(kv[0])
			e.Str(kv[1])
		}
		e.EndDict()
	}
	if s.Features.Annotations || len(s.Annotations) > 0 {
		e.Key("external_annotations")
		e.BeginList()
		for _, a := range s.Annotations {
			e.BeginDict()
			e.Key("name")
			e.Str(a.Name)
			e.Key("stage")
			e.Str(a.Stage)
			e.Key("device")
			e.Int(int64(a.Device))
			e.Key("time_us")
			e.Int(a.TimeUS)
			e.EndDict()
		}
		e.EndList()
	}
	e.EndDict()
}

func (w *writer) segment(sg *Segment) {
	e := w.e
	v20 := w.s.Features.BlockHistory
	e.BeginDict()
	e.Key("device")
	e.Int(int64(sg.Device))
	e.Key("address")
	e.Uint(sg.Address)
	e.Key("total_size")
	e.Int(sg.TotalSize)
	e.Key("allocated_size")
	e.Int(sg.AllocatedSize)
	e.Key("active_size")
	e.Int(sg.ActiveSize)
	e.Key("requested_size")
	e.Int(sg.RequestedSize)
	e.Key("stream")
	e.Int(sg.Stream)
	e.Key("segment_type")
	e.Str(sg.Pool.String())
	if !v20 {
		e.Key("segment_pool_id")
		e.BeginTuple(2)
		e.Int(sg.PoolID[0])
		e.Int(sg.PoolID[1])
		e.EndTuple()
		e.Key("is_expandable")
		e.Bool(sg.Expandable)
		e.Key("frames")
		w.stack(sg.Stack, "segment", sg.Address)
	}
	e.Key("blocks")
	e.BeginList()
	for i := range sg.Blocks {
		b := &sg.Blocks[i]
		e.BeginDict()
		if !v20 {
			e.Key("address")
			e.Uint(b.Address)
		}
		e.Key("size")
		e.Int(b.Size)
		e.Key("requested_size")
		e.Int(b.RequestedSize)
		e.Key("state")
		e.Str(b.State.String())
		switch {
		case !v20:
			e.Key("frames")
			w.stack(b.Stack, "block", b.Address)
		case w.s.History != nil:
			// The simulator's chains (Snapshot.History); a block without
			// one has no "history" key, as in PyTorch.
			if h := w.s.History[HistoryKey{sg.Device, b.Address}]; len(h) > 0 {
				e.Key("history")
				e.BeginList()
				for _, it := range h {
					e.BeginDict()
					e.Key("addr")
					e.Uint(it.Addr)
					e.Key("real_size")
					e.Int(it.RealSize)
					if it.Stack != NoStack {
						e.Key("frames")
						w.stack(it.Stack, "block", b.Address)
					}
					e.EndDict()
				}
				e.EndList()
			}
		case b.State.Active() || b.Stack != NoStack:
			// A snapshot without chains (not recorded by the
			// simulator): one item, the block's allocation (a free
			// block keeps its last one).
			e.Key("history")
			e.BeginList()
			e.BeginDict()
			e.Key("addr")
			e.Uint(b.Address)
			e.Key("real_size")
			e.Int(b.RequestedSize)
			if b.Stack != NoStack {
				e.Key("frames")
				w.stack(b.Stack, "block", b.Address)
			}
			e.EndDict()
			e.EndList()
		}
		e.EndDict()
	}
	e.EndList()
	e.EndDict()
}

func (w *writer) entry(te *TraceEntry) {
	e, s := w.e, w.s
	e.BeginDict()
	e.Key("action")
	e.Str(te.Action.String())
	if te.Action == ActionOOM {
		e.Key("device_free")
	} else {
		e.Key("addr")
	}
	e.Uint(te.Addr)
	e.Key("size")
	e.Int(te.Size)
	if s.Contexts != nil && int(te.Context) >= s.Contexts.Len() || s.Contexts == nil && te.Context != 0 {
		w.fail("trace entry context id %d is not in the snapshot's context table", te.Context)
		return
	}
	c := s.Context(te)
	e.Key("stream")
	e.Int(c.Stream)
	if s.Features.TimeUS {
		e.Key("time_us")
		e.Int(te.TimeUS)
	}
	if s.Features.CompileContext {
		e.Key("compile_context")
		w.str(c.CompileContext)
	}
	if s.Features.UserMetadata {
		e.Key("user_metadata")
		w.str(c.UserMetadata)
	}
	// pool_id only on entries of a private pool: the published 2.9 and
	// 2.10 snapshots (default pools only) have no pool_id key on any entry
	// (docs/versions.md, "Snapshot keys").
	if s.Features.TracePoolID && !c.Pool.IsDefault() {
		e.Key("pool_id")
		e.BeginTuple(2)
		e.Int(c.Pool[0])
		e.Int(c.Pool[1])
		e.EndTuple()
	}
	if te.Stack != NoStack {
		e.Key("frames")
		w.stack(te.Stack, "trace entry", te.Addr)
	}
	e.EndDict()
}

func (w *writer) str(id StrID) {
	if int(id) >= len(w.s.Strings) && id != 0 {
		w.fail("trace entry string id %d is not in the snapshot's string table (%d strings)", id, len(w.s.Strings))
		return
	}
	w.e.Str(w.s.String(id))
}

// stack writes a frames list: [] for no stack, else the shared list of the
// stack (memoized on first use), whose frame dicts are shared too.
func (w *writer) stack(id StackID, what string, addr uint64) {
	e := w.e
	if id == NoStack {
		e.BeginList()
		e.EndList()
		return
	}
	st := w.s.Stacks
	if st == nil || int(id) >= st.NumStacks() {
		w.fail("%s at 0x%x: stack id %d is not in the snapshot's stack table", what, addr, id)
		return
	}
	key := pickle.Key{Space: spaceStack, ID: uint64(id)}
	if e.Ref(key) {
		return
	}
	e.BeginList()
	e.Memo(key)
	for _, f := range st.Stack(id) {
		fk := pickle.Key{Space: spaceFrame, ID: uint64(f)}
		if e.Ref(fk) {
			continue
		}
		fr := st.Frame(f)
		e.BeginDict()
		e.Memo(fk)
		if w.s.Features.BlockHistory { // 2.0's StackContext order
			e.Key("filename")
			e.Str(fr.Filename)
			e.Key("name")
			e.Str(fr.Name)
		} else { // py_symbolize's order
			e.Key("name")
			e.Str(fr.Name)
			e.Key("filename")
			e.Str(fr.Filename)
		}
		e.Key("line")
		e.Int(fr.Line)
		e.EndDict()
	}
	e.EndList()
}

func (w *writer) settings(st *AllocatorSettings) {
	e := w.e
	other := func(key string) (string, bool) {
		for _, kv := range st.Other {
			if kv.Key == key {
				return kv.Value, true
			}
		}
		return "", false
	}
	boolOther := func(key string) bool {
		v, _ := other(key)
		return v == "True" || v == "true" || v == "1"
	}
	e.BeginDict()
	for _, k := range settingsKeys {
		if _, ok := other(k); k == optionalSettingsKey && !ok {
			continue
		}
		e.Key(k)
		switch k {
		case "PYTORCH_CUDA_ALLOC_CONF":
			e.Str(st.AllocConf)
		case "max_split_size":
			e.Int(st.MaxSplitSize)
		case "garbage_collection_threshold":
			e.Float(st.GarbageCollectionThreshold)
		case "expandable_segments":
			e.Bool(st.ExpandableSegments)
		case "pinned_num_register_threads":
			n := int64(1)
			if v, ok := other(k); ok {
				if x, err := strconv.ParseInt(v, 10, 64); err == nil {
					n = x
				}
			}
			e.Int(n)
		case "release_lock_on_cudamalloc":
			e.Bool(st.ReleaseLockOnCudaMalloc)
		case "pinned_use_cuda_host_register", "graph_capture_record_stream_reuse":
			e.Bool(boolOther(k))
		case "roundup_power2_divisions":
			e.BeginDict()
			for i, n := range st.RoundupPower2Divisions {
				e.Key(strconv.Itoa(1 << i))
				e.Int(n)
			}
			e.EndDict()
		}
	}
	// Keys memstat does not interpret, in file order, typed back from their
	// text as well as it can.
	for _, kv := range st.Other {
		if isSettingsKey(kv.Key) {
			continue
		}
		e.Key(kv.Key)
		otherValue(e, kv.Value)
	}
	e.EndDict()
}

// optionalSettingsKey is the one settings key older releases lack
// (graph_capture_record_stream_reuse, 2.9+).
const optionalSettingsKey = "graph_capture_record_stream_reuse"

func isSettingsKey(k string) bool {
	for _, s := range settingsKeys {
		if s == k {
			return true
		}
	}
	return false
}

// otherValue writes the text of an uninterpreted setting as the value it
// was displayed from: True/False, None, an int or a float when the text is
// exactly how that value displays, else the text as a str (integers beyond
// int64 too, which keeps the pickle inside what every viewer reads).
func otherValue(e *pickle.Encoder, v string) {
	switch v {
	case "True":
		e.Bool(true)
		return
	case "False":
		e.Bool(false)
		return
	case "None":
		e.None()
		return
	}
	if x, err := strconv.ParseInt(v, 10, 64); err == nil && strconv.FormatInt(x, 10) == v {
		e.Int(x)
		return
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil && fmt.Sprint(f) == v {
		e.Float(f)
		return
	}
	e.Str(v)
}
