// Package snapshot is memstat's typed model of a PyTorch CUDA memory snapshot
// (what torch.cuda.memory._snapshot() returns and _dump_snapshot() pickles):
// segments with their blocks, one trace of allocator events per device, the
// allocator settings and the external annotations. It also reads every
// published variant of the file (pickle protocols 2-5, gzip, JSON; PyTorch
// 1.13 to today) into that model and writes the model back as a pickle that
// PyTorch's own viewer opens.
//
// Stacks are interned: every distinct frame and every distinct stack is stored
// once (see Stacks), so the sharing that PyTorch's pickles express with memo
// references stays sharing in memory.
package snapshot

import (
	"maps"
	"slices"
)

// Snapshot is one snapshot file, all devices.
type Snapshot struct {
	// Segments of every device, in file order (PyTorch sorts them by device,
	// then address).
	Segments []Segment
	// Traces holds the trace of each device allocator, indexed by device
	// ordinal, oldest entry first, compact (see Trace). A device with no
	// recorded history has an empty trace; a nil element is one too.
	Traces []*Trace
	// Settings is nil when the file has no allocator_settings (before 2.3).
	Settings *AllocatorSettings
	// Annotations are the external_annotations (2.5+), in file order.
	Annotations []Annotation
	// Stacks owns every frame and stack the segments, blocks and trace
	// entries refer to.
	Stacks *Stacks
	// Strings holds the interned compile_context and user_metadata texts of
	// trace entries; index 0 is the empty string.
	Strings []string
	// Contexts holds the stream, compile_context and user_metadata of the
	// trace entries (TraceEntry.Context). Nil is an empty table.
	Contexts *Contexts
	// Recorder is set when memstat record wrote the file (its "memstat"
	// key): the allocator, the stacks and the times are simulated, and
	// Recorder says how. Nil for files PyTorch wrote.
	Recorder *Recorder
	// Warnings are inconsistencies found while reading (blocks that do not
	// tile their segment, ...); analysis goes on regardless.
	Warnings []string
	// History is each block's history chain in a snapshot written in
	// PyTorch 2.0's form (Features.BlockHistory), keyed by device and block
	// address: BlockInfo.history, a block's allocations with the newest
	// first, and after merges the merged blocks' chains in address order.
	// Only the simulator fills it; nil means the writer falls back to one
	// entry built from the block's Stack.
	History map[HistoryKey][]HistoryItem
	// Features says which optional parts of the schema the file had, so that
	// reports can say what a figure rests on.
	Features Features
}

// Features records which schema variant a file used. Detection is by the keys
// present, never by a version number (forks copy the schema at odd points).
type Features struct {
	BareSegmentList  bool // 1.13: the file is a bare list of segments
	BlockHistory     bool // 2.0: blocks carry "history" instead of frames
	BlockAddresses   bool // 2.1+: blocks carry "address"
	TimeUS           bool // 2.2+: trace entries carry time_us
	CompileContext   bool // trace entries carry compile_context
	UserMetadata     bool // trace entries carry user_metadata
	TracePoolID      bool // 2.9+: trace entries carry pool_id
	AllocatorSetting bool // 2.3+: allocator_settings present
	Annotations      bool // 2.5+: external_annotations present
	JSON             bool // the file was JSON, not a pickle
	Gzip             bool // the file was gzip-compressed
	PickleProtocol   int  // 0 for JSON
}

// Devices returns the number of devices the snapshot describes: the larger
// of the trace count and one past the highest segment device.
func (s *Snapshot) Devices() int {
	n := len(s.Traces)
	for i := range s.Segments {
		if d := s.Segments[i].Device + 1; d > n {
			n = d
		}
	}
	return n
}

// DeviceSegments returns the segments of one device, in file order.
func (s *Snapshot) DeviceSegments(device int) []*Segment {
	var out []*Segment
	for i := range s.Segments {
		if s.Segments[i].Device == device {
			out = append(out, &s.Segments[i])
		}
	}
	return out
}

// Trace returns the trace of one device: an empty one, never nil, when
// there is none.
func (s *Snapshot) Trace(device int) *Trace {
	if device < 0 || device >= len(s.Traces) || s.Traces[device] == nil {
		return &Trace{}
	}
	return s.Traces[device]
}

// String returns an interned trace-entry string (compile_context,
// user_metadata).
func (s *Snapshot) String(id StrID) string {
	if int(id) < len(s.Strings) {
		return s.Strings[id]
	}
	return ""
}

// Context returns the stream, compile_context and user_metadata of e.
func (s *Snapshot) Context(e *TraceEntry) EntryContext {
	if s.Contexts == nil {
		return EntryContext{}
	}
	return s.Contexts.Get(e.Context)
}

// Stream returns the stream of e.
func (s *Snapshot) Stream(e *TraceEntry) int64 { return s.Context(e).Stream }

// StrID indexes Snapshot.Strings. 0 is the empty string.
type StrID uint32

// Pool is the kind of block pool a segment belongs to.
type Pool uint8

const (
	// LargePool holds blocks of more than 1 MiB (segment_type "large").
	LargePool Pool = iota
	// SmallPool holds blocks of at most 1 MiB in 2 MiB segments
	// (segment_type "small").
	SmallPool
)

func (p Pool) String() string {
	if p == SmallPool {
		return "small"
	}
	return "large"
}

// PoolID is a segment's segment_pool_id: (0, 0) for the default pools,
// anything else for a CUDA-graph or MemPool private pool.
type PoolID [2]int64

// IsDefault reports whether the id names the default pools.
func (p PoolID) IsDefault() bool { return p == PoolID{} }

// Segment is one cudaMalloc'd range, or one contiguous mapped range of an
// expandable segment's reservation.
type Segment struct {
	Device        int
	Address       uint64
	TotalSize     int64
	AllocatedSize int64
	ActiveSize    int64
	RequestedSize int64
	Stream        int64
	Pool          Pool
	PoolID        PoolID
	Expandable    bool
	Stack         StackID // stack of the cudaMalloc / first map; 0 if none
	Blocks        []Block // in address order, tiling the segment
}

// End returns the first address past the segment.
func (s *Segment) End() uint64 { return s.Address + uint64(s.TotalSize) }

// BlockState is the state string of a snapshot block.
type BlockState uint8

const (
	// Inactive: free, cached by the allocator ("inactive").
	Inactive BlockState = iota
	// ActiveAllocated: handed out to a tensor ("active_allocated").
	ActiveAllocated
	// ActivePendingFree: freed by the user but waiting for CUDA events of
	// other streams ("active_pending_free"; the docstring's
	// "active_awaiting_free" is read as the same state).
	ActivePendingFree
)

func (s BlockState) String() string {
	switch s {
	case ActiveAllocated:
		return "active_allocated"
	case ActivePendingFree:
		return "active_pending_free"
	}
	return "inactive"
}

// Active reports whether the block counts as active (allocated or pending).
func (s BlockState) Active() bool { return s != Inactive }

// HistoryKey names a block of Snapshot.History.
type HistoryKey struct {
	Device  int
	Address uint64
}

// HistoryItem is one entry of a PyTorch 2.0 block history ({addr,
// real_size, frames}).
type HistoryItem struct {
	Addr     uint64
	RealSize int64
	Stack    StackID
}

// Block is one contiguous part of a segment.
type Block struct {
	Address uint64
	Size    int64
	// RequestedSize is what the user asked for in the block's last
	// allocation. PyTorch never resets it on free, so for inactive blocks
	// it is a stale value and may even exceed Size.
	RequestedSize int64
	State         BlockState
	Stack         StackID
}

// Action is the kind of a trace entry.
type Action uint8

// The trace actions PyTorch records. ActionFree is the viewer's merged
// free_requested+free_completed pair; readers treat it as free_completed.
const (
	ActionUnknown Action = iota
	ActionAlloc
	ActionFreeRequested
	ActionFreeCompleted
	ActionSegmentAlloc
	ActionSegmentFree
	ActionSegmentMap
	ActionSegmentUnmap
	ActionOOM
	ActionSnapshot
	ActionUserDefined
	ActionAnnotate
	ActionFree
)

var actionNames = [...]string{
	ActionUnknown:       "unknown",
	ActionAlloc:         "alloc",
	ActionFreeRequested: "free_requested",
	ActionFreeCompleted: "free_completed",
	ActionSegmentAlloc:  "segment_alloc",
	ActionSegmentFree:   "segment_free",
	ActionSegmentMap:    "segment_map",
	ActionSegmentUnmap:  "segment_unmap",
	ActionOOM:           "oom",
	ActionSnapshot:      "snapshot",
	ActionUserDefined:   "user_defined",
	ActionAnnotate:      "annotate",
	ActionFree:          "free",
}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "unknown"
}

// ParseAction maps a trace action string to an Action (ActionUnknown if the
// string is not one PyTorch writes).
func ParseAction(s string) Action {
	for i, n := range actionNames {
		if n == s && i != int(ActionUnknown) {
			return Action(i)
		}
	}
	return ActionUnknown
}

// TraceEntry is one event of a device's allocator trace.
//
// A gigabyte snapshot holds about ten million entries, so the entry is kept
// at 40 bytes and free of pointers (the garbage collector never scans the
// trace): the stream, compile_context and user_metadata, which take few
// distinct values in a trace, are interned together in the snapshot's
// Contexts table and the entry holds their index.
type TraceEntry struct {
	// Addr is the block or segment address; for ActionOOM it holds the
	// device_free figure instead (PyTorch reuses the field the same way).
	Addr uint64
	// Size: the unrounded request for alloc, the block's requested_size for
	// frees, the segment size for segment events, the rounded request for
	// oom, total active bytes for snapshot.
	Size int64
	// TimeUS is Unix-epoch microseconds; 0 when the file has no time_us.
	TimeUS int64
	Stack  StackID
	// Context indexes the Contexts table of the snapshot (or of the
	// simulator) that holds the entry; 0 is stream 0 with empty strings.
	Context ContextID
	Action  Action
}

// ContextID indexes a Contexts table.
type ContextID uint32

// EntryContext is the part of a trace entry that takes few distinct values.
type EntryContext struct {
	Stream         int64
	CompileContext StrID
	UserMetadata   StrID
	// Pool is the entry's pool_id (2.9+): the mempool of the block or
	// segment; (0, 0) for the default pools and in older files.
	Pool PoolID
}

// Contexts interns EntryContexts. The zero value is ready to use; ID 0 is
// always the zero EntryContext.
type Contexts struct {
	list []EntryContext
	// ids indexes list once it is longer than a short scan; traces have
	// a handful of streams and strings, so it is rarely made.
	ids map[EntryContext]ContextID
}

const contextsScan = 16

// Intern returns the ID of c, adding it when it is new.
func (t *Contexts) Intern(c EntryContext) ContextID {
	if c == (EntryContext{}) {
		return 0
	}
	if t.ids != nil {
		if id, ok := t.ids[c]; ok {
			return id
		}
	} else {
		for i, x := range t.list {
			if x == c {
				return ContextID(i)
			}
		}
	}
	if len(t.list) == 0 {
		t.list = append(t.list, EntryContext{})
	}
	id := ContextID(len(t.list))
	t.list = append(t.list, c)
	if t.ids == nil && len(t.list) > contextsScan {
		t.ids = make(map[EntryContext]ContextID, len(t.list))
		for i, x := range t.list[1:] {
			t.ids[x] = ContextID(i + 1)
		}
	} else if t.ids != nil {
		t.ids[c] = id
	}
	return id
}

// Get returns the context with the given ID (the zero context for an ID
// the table does not have).
func (t *Contexts) Get(id ContextID) EntryContext {
	if int(id) < len(t.list) {
		return t.list[id]
	}
	return EntryContext{}
}

// Len is the number of distinct contexts, the zero one included.
func (t *Contexts) Len() int { return max(len(t.list), 1) }

// Clone returns an independent copy of the table.
func (t *Contexts) Clone() *Contexts {
	c := &Contexts{list: slices.Clone(t.list)}
	if t.ids != nil {
		c.ids = maps.Clone(t.ids)
	}
	return c
}

// DeviceFree returns the device_free figure of an oom entry.
func (e *TraceEntry) DeviceFree() int64 { return int64(e.Addr) }

// Recorder is the "memstat" key memstat record adds to the files it
// writes (PyTorch's readers ignore keys they do not know): what made the
// file and how its trace times were made, so that nothing simulated is
// mistaken for a measurement.
type Recorder struct {
	// Tool is "memstat record" and its version.
	Tool string
	// Workload names the built-in workload or the workload file.
	Workload string
	// TimeModel says how time_us was made ("modelled: ..." or
	// "synthetic: ...").
	TimeModel string
}

// AllocatorSettings is the allocator_settings dict (2.3+).
type AllocatorSettings struct {
	AllocConf                  string // PYTORCH_CUDA_ALLOC_CONF as last parsed
	MaxSplitSize               int64  // -1 when unlimited
	GarbageCollectionThreshold float64
	ExpandableSegments         bool
	ReleaseLockOnCudaMalloc    bool
	// RoundupPower2Divisions is the 16-entry divisions table, index i for
	// requests in [2^i MiB, 2^(i+1) MiB).
	RoundupPower2Divisions [16]int64
	// Other keeps keys memstat does not interpret, as text, in file order,
	// so that reports can show them.
	Other []KeyValue
}

// KeyValue is one uninterpreted setting.
type KeyValue struct {
	Key, Value string
}

// Annotation is one external_annotations entry (a record_function START or
// END, or any user metadata PyTorch attaches).
type Annotation struct {
	Device int
	TimeUS int64
	Name   string
	Stage  string // "START", "END" or ""
}
