package parallel

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// HeapLimit keeps the heap of a command that works on one large snapshot
// near what it needs. Go's collector lets the heap grow to twice what is
// live between collections, so replaying a 1 GB snapshot whose data takes
// 430 MB let the heap reach 730 MB; a soft memory limit
// (runtime/debug.SetMemoryLimit) makes the collector work harder near the
// limit instead, and never fails an allocation.
//
// The limit follows the need, in two steps. While a file loads it is a
// share of the file's size (loadShare: what decoding holds at its peak,
// the decoded snapshot and the decoder's memo). Once the snapshot is
// loaded it is the live heap measured then, plus what its replay adds
// (per block of the final segments and per trace entry), with a margin:
// a snapshot whose state outweighs its file (few trace entries, a
// million blocks) gets what it needs, and one whose replay needs much
// less than its file is not let grow to the file's size. The margin is
// what keeps the collector from running without end near the peak: a
// limit at the live heap itself doubles the CPU.
//
// That estimate is a replay's (stats). A command that holds more, such as
// peak's captured states (a limit at stats' need made peak 2.2x slower on
// torch-1GB), says what it holds per entry and per block (Hold) and gets
// the same need-based limit with its holding counted; one that does not
// keeps the files' size as a floor (NewHeapLimit; LimitHeapToFile is
// stats').
type HeapLimit struct {
	budget int64
	// files is the size of every file added; a floor of the limit when
	// fileFloor is set.
	files     int64
	fileFloor bool
	// pending are the sizes of the files added and not yet loaded, in
	// order; loaded is the live heap measured after the last load, replay
	// what the loaded snapshots' replays add to it.
	pending []int64
	loaded  int64
	replay  int64
	kept    int64
	// holdPerEntry and holdPerBlock are what the command keeps besides
	// each replay's state (Hold); held says Hold was called (the lower
	// floor, minHeldLimit).
	holdPerEntry, holdPerBlock int64
	held                       bool
	// alone: the limit of a replay alone (LimitHeapToFile), from the
	// closer estimate (replayAloneNeed, aloneLoadShare, aloneMargin).
	alone       bool
	prev        int64
	active      bool
	measureHeap func() int64
}

const (
	// minHeapLimit: below this the limit saves nothing worth the
	// collector's time (the runtime's own memory counts in the limit).
	// It is the floor of stats' limit and of the commands that keep the
	// files' size as their floor.
	minHeapLimit = 256 << 20
	// minHeldLimit is the floor of a command that said what it holds
	// (Hold): its need, counted with the margin, is what keeps the
	// collector from thrashing, so the floor only covers the runtime's
	// own memory and a small file's load. At 256 MiB no limit bound on a
	// 100 MB file and the heap doubled its live peak: replay's two
	// simulators, report's model and states (replay, torch-100MB:
	// live peak 52 MB, heap 90 MB, peak RSS 120 MB).
	minHeldLimit = 64 << 20
	// loadShare is the limit while a file loads, per byte of the file:
	// the decoder's live peak (the decoded snapshot, the pickle memo at
	// 8 bytes an object, the input buffer) was 0.35x the file on
	// torch-1GB and 0.2x on torch-100MB.
	loadShare = 0.5
	// What a replay adds to the loaded snapshot's live heap, measured on
	// torch-1GB (1.72 M blocks, 8.6 M entries): replay.New's simulator
	// state, 212 MB (123 bytes a block: the simulator's 80-byte block,
	// its address-table slot and free-set share), and the address sets of
	// its start-state rebuild while they last, 74 MB (8.6 bytes an entry).
	replayPerBlock = 128
	replayPerEntry = 10
	// needMargin is the room left above the estimated peak (the live heap
	// after loading plus the replay's share, 498 MB on torch-1GB against
	// a live peak of 478-487 MB): at a limit of 1.18x that peak the
	// collector cost +8% user CPU, at 1.1x +34%, at 1.0x it doubled.
	// The estimate of a replay alone (below) is 402 MB on torch-1GB
	// against a live peak of 392 MB; the margin holds the runtime's own
	// memory too (35 MiB there: span slack, free spans, metadata), so the
	// heap's room is less. There, at 0.2 the collector marked 1.05-1.15x
	// the bytes it marked at the old file-sized limit (peak RSS 0.50x
	// the file), at 0.18 1.1-1.2x (0.49x), at 0.16 1.25x, at 0.12 1.6x.
	needMargin = 0.2

	// A replay alone (stats: LimitHeapToFile) is measured closer. On
	// torch-1GB (live heap 160 MiB after loading) two moments compete for
	// its peak:
	//   - the start-state rebuild's address sets, before the simulator
	//     exists: 89 MiB at most (11 bytes an entry: the two halves' hash
	//     sets, 8 bytes a slot sized for the trace's allocations, and the
	//     sorted addresses made from them);
	//   - the seeded simulator, 188 MiB after replay.New (115 bytes a
	//     block: its 80-byte block, the address tables' 8-byte slots and
	//     the free sets' share), and what the state gains during Run, 26
	//     MiB at its end (3.2 bytes an entry): the live peak, 374 MiB.
	// The commands that Hold more keep the coarser shares above, which
	// their holdings were measured against.
	aloneRebuildPerEntry = 11
	aloneReplayPerBlock  = 116
	aloneReplayPerEntry  = 4
	// aloneLoadShare: at half the file, the heap grew to 426 MiB while
	// torch-1GB loaded (live 0.31-0.35x the file), more than the replay's
	// whole limit after it: the run's peak RSS.
	aloneLoadShare = 0.44
	// aloneMargin is needMargin for a replay alone. With the decoder's
	// read-ahead and 4-byte memo (fca8582, 756f0ac) the load leaves less
	// garbage: at 0.2 stats on torch-1GB marked 2997-3028 MiB over the run
	// (the old file-sized limit: 3121-3470) and peaked at 0.500-0.507x the
	// file; at 0.19 3630 MiB, 0.493x; at 0.18 4024 MiB, 0.492x.
	aloneMargin = 0.19
)

// replayAloneNeed is what replaying a snapshot of entries trace entries
// and blocks blocks adds to its live heap at the peak: the start
// rebuild's sets or the simulator and its growth, whichever is larger
// (the sets are garbage before the simulator is seeded).
func replayAloneNeed(entries, blocks int) int64 {
	e, b := int64(entries), int64(blocks)
	return max(e*aloneRebuildPerEntry, b*aloneReplayPerBlock+e*aloneReplayPerEntry)
}

// LimitHeapToFile sets the limit for reading path (see Add) and
// replaying it, and nothing more (stats: only the replay's figures are
// kept), at most budget; the caller leaves it out when the user set
// GOMEMLIMIT.
func LimitHeapToFile(path string, budget int64) *HeapLimit {
	h := &HeapLimit{budget: budget, alone: true, measureHeap: liveHeapNow}
	h.Add(path)
	return h
}

// NewHeapLimit returns a limit of at most budget that files are added to,
// never below their size (a command that keeps more than a replay's
// state); it sets nothing yet.
func NewHeapLimit(budget int64) *HeapLimit {
	return &HeapLimit{budget: budget, fileFloor: true, measureHeap: liveHeapNow}
}

// Add adds path to the files being loaded (a command that reads several,
// diff, adds each) and sets the limit. It sets nothing for a file it
// cannot stat or a gzip-compressed one (the decoded size is unknown).
func (h *HeapLimit) Add(path string) {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || isGzip(path) {
		return
	}
	h.pending = append(h.pending, fi.Size())
	h.files += fi.Size()
	h.apply()
}

// Loaded sets the limit for replaying the loaded snapshot of the one file
// added, of entries trace entries and blocks blocks: the live heap now,
// plus what the replay adds, plus the margin.
func (h *HeapLimit) Loaded(entries, blocks int) {
	if !h.active {
		return
	}
	h.replay = 0
	h.AddLoaded(entries, blocks)
}

// Keep adds n bytes to the need: what the command keeps besides the
// replay's state, such as stats' sparkline (8 bytes an entry on a
// terminal). Call it before Loaded, which sets the limit.
func (h *HeapLimit) Keep(n int64) { h.kept += n }

// Hold says what the command keeps besides each replay's state, per trace
// entry and per block of the final segments of every snapshot loaded
// (peak: the figures after each entry and the captured states' blocks),
// and drops the files' floor: the limit follows the need, that holding
// counted, as stats' does. Call it before the first Add.
func (h *HeapLimit) Hold(perEntry, perBlock int64) {
	h.fileFloor, h.held = false, true
	h.holdPerEntry, h.holdPerBlock = perEntry, perBlock
}

// AddLoaded is Loaded for one more snapshot, the first file added and not
// yet loaded: the replays' needs add up.
func (h *HeapLimit) AddLoaded(entries, blocks int) { h.AddLoadedAside(entries, blocks, 0) }

// AddLoadedAside is AddLoaded where aside bytes of the live heap are
// already the replay's (the start rebuild's address sets, scanned while
// the file was read: replay.StartScan), which its need counts: the heap
// measured now less aside, so that they do not count twice.
func (h *HeapLimit) AddLoadedAside(entries, blocks int, aside int64) {
	if !h.active {
		return
	}
	if len(h.pending) > 0 {
		h.pending = h.pending[1:]
	}
	h.loaded = max(0, h.measureHeap()-aside)
	if h.alone {
		h.replay += replayAloneNeed(entries, blocks)
	} else {
		h.replay += int64(entries)*(replayPerEntry+h.holdPerEntry) + int64(blocks)*(replayPerBlock+h.holdPerBlock)
	}
	h.apply()
}

// liveHeapNow collects and returns the live heap: once per loaded file,
// when the decoder's garbage is freshly dropped (30 ms on a 1 GB file).
func liveHeapNow() int64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	return int64(s[0].Value.Uint64())
}

// limitFor is the limit: what the files still loading may hold plus what
// the loaded ones' replays need, with the margin, at least the floor.
func (h *HeapLimit) limitFor() int64 {
	floor := int64(minHeapLimit)
	if h.held {
		floor = minHeldLimit
	}
	if h.fileFloor {
		floor = max(floor, h.files)
	}
	share, margin := loadShare, needMargin
	if h.alone {
		share, margin = aloneLoadShare, aloneMargin
	}
	var loading int64
	for _, n := range h.pending {
		loading += int64(float64(n) * share)
	}
	need := h.loaded + h.replay + h.kept
	if need == 0 {
		return max(loading, floor)
	}
	return max(loading+need+int64(float64(need)*margin), floor)
}

func (h *HeapLimit) apply() { h.set(h.limitFor()) }

// Release restores the limit there was before.
func (h *HeapLimit) Release() {
	if h.active {
		debug.SetMemoryLimit(h.prev)
		h.active = false
	}
}

func (h *HeapLimit) set(n int64) {
	if h.budget > 0 {
		n = min(n, h.budget)
	}
	if !h.active {
		h.prev = debug.SetMemoryLimit(n)
		h.active = true
		return
	}
	debug.SetMemoryLimit(n)
}

// SetTo sets the limit to n (at most the budget) once it is active: for a
// command that knows its heap better than the estimate does.
func (h *HeapLimit) SetTo(n int64) {
	if h.active {
		h.set(n)
	}
}
