package analysis

import (
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/snapshot"
	"strings"
)

// FreeSpace sums the cached free blocks of one pool.
type FreeSpace struct {
	Pool   string `json:"pool"`
	Bytes  int64  `json:"bytes"`
	Blocks int    `json:"blocks"`
	// Largest is the largest free block and LargestSegment the segment
	// holding it.
	Largest        int64  `json:"largest"`
	LargestSegment uint64 `json:"largest_segment,omitempty"`
	// Segments counts the segments with free space.
	Segments int `json:"segments"`
}

// MemoryState describes a device's memory at one moment: what is live,
// what the cache holds free and how it is scattered, and who holds the
// memory.
type MemoryState struct {
	Moment    Moment `json:"moment"`
	Allocated int64  `json:"allocated_bytes"`
	Reserved  int64  `json:"reserved_bytes"`
	// Pending is freed memory waiting for other streams' events
	// (record_stream); it cannot be reused yet.
	Pending int64 `json:"pending_free_bytes"`
	// Free is the cached free memory of the large and small pools.
	Free []FreeSpace `json:"free"`
	// FreeBytes, FreeBlocks and LargestFree are over both pools.
	FreeBytes   int64 `json:"free_bytes"`
	FreeBlocks  int   `json:"free_blocks"`
	LargestFree int64 `json:"largest_free_block"`
	// ExternalFragmentation is 1 - LargestFree/FreeBytes: the share of
	// the cached free memory that is not in the largest free block.
	ExternalFragmentation float64 `json:"external_fragmentation"`
	// Rounding is size - requested of the live blocks (internal
	// fragmentation).
	Rounding int64 `json:"rounding_bytes"`
	Segments int   `json:"segments"`
	// PrivateFree is free memory in private pools (CUDA graphs, MemPool),
	// which PyTorch's message counts separately.
	PrivateFree int64 `json:"private_pool_free_bytes"`
	// PrivateAllocated is the allocated memory that sat in private pools.
	PrivateAllocated int64 `json:"private_pool_allocated_bytes,omitempty"`
	// Holders group the live memory by allocation stack, largest first;
	// HoldersRest sums the stacks cut from the list (Count 0: none).
	Holders     []Group `json:"holders"`
	HoldersRest Group   `json:"-"`
}

// Describe summarizes a state; holders keeps the top n stacks (all when
// n <= 0).
func (rp *Replayed) Describe(st *State, fr *Frames, top int) MemoryState {
	ms := MemoryState{Moment: rp.MomentAt(st.Index)}
	free := map[snapshot.Pool]*FreeSpace{
		snapshot.LargePool: {Pool: snapshot.LargePool.String()},
		snapshot.SmallPool: {Pool: snapshot.SmallPool.String()},
	}
	for _, seg := range st.Segments {
		ms.Segments++
		ms.Reserved += seg.TotalSize
		fs := free[seg.Pool]
		hasFree := false
		for _, b := range seg.Blocks {
			switch b.State {
			case snapshot.ActiveAllocated:
				ms.Allocated += b.Size
				ms.Rounding += b.Size - b.RequestedSize
				if !seg.PoolID.IsDefault() {
					ms.PrivateAllocated += b.Size
				}
			case snapshot.ActivePendingFree:
				ms.Pending += b.Size
				ms.Rounding += b.Size - b.RequestedSize
			default:
				if !seg.PoolID.IsDefault() {
					ms.PrivateFree += b.Size
				}
				hasFree = true
				fs.Bytes += b.Size
				fs.Blocks++
				if b.Size > fs.Largest {
					fs.Largest, fs.LargestSegment = b.Size, seg.Address
				}
			}
		}
		if hasFree {
			fs.Segments++
		}
	}
	for _, p := range []snapshot.Pool{snapshot.LargePool, snapshot.SmallPool} {
		fs := free[p]
		ms.Free = append(ms.Free, *fs)
		ms.FreeBytes += fs.Bytes
		ms.FreeBlocks += fs.Blocks
		ms.LargestFree = max(ms.LargestFree, fs.Largest)
	}
	if ms.FreeBytes > 0 {
		ms.ExternalFragmentation = 1 - float64(ms.LargestFree)/float64(ms.FreeBytes)
	}
	ms.Holders, ms.HoldersRest = TopGroups(GroupBlocks(rp.LiveBlocks(st), ByStack, fr, rp.Phases, ms.Allocated), top)
	return ms
}

// Verdict is why an allocation ran out of memory.
type Verdict string

// Verdicts.
const (
	// TooMuchLiveMemory: the live tensors plus the request exceed what the
	// process could get, even with every cached byte reused.
	TooMuchLiveMemory Verdict = "live memory"
	// Fragmentation: the device's free memory plus the cache's free blocks
	// would have held the request, but no free range was large enough.
	Fragmentation Verdict = "fragmentation"
	// RequestTooLarge: the request alone exceeds all the memory the
	// process could have had (free + reserved), whatever else is freed.
	RequestTooLarge Verdict = "request too large"
	// OtherPoolsFree: the free memory that would have held the request
	// sat in other pools than the request's: in private pools (CUDA
	// graphs, MemPool), whose free blocks PyTorch never gives to ordinary
	// allocations and which empty_cache() does not release while the
	// pool is alive (or, for a request into a private pool, in the
	// default pools and the other private ones).
	OtherPoolsFree Verdict = "free memory in other pools"
	// OtherLimit: the device had the memory free, yet the allocation
	// failed: a memory fraction (set_per_process_memory_fraction) or a
	// driver limit refused it.
	OtherLimit Verdict = "limit"
)

// Advice names a remedy; pkg/report words it with the figures.
type Advice string

// Remedies.
const (
	AdviseExpandableSegments Advice = "expandable_segments"
	AdviseMaxSplitSize       Advice = "max_split_size_mb"
	AdviseReduceBatch        Advice = "reduce_batch"
	AdviseCheckpointing      Advice = "activation_checkpointing"
	AdviseFreeReferences     Advice = "free_references"
	AdviseEmptyCacheUseless  Advice = "empty_cache_useless"
	AdviseCheckFraction      Advice = "check_memory_fraction"
	AdviseOtherProcesses     Advice = "other_processes"
	AdviseReleasePools       Advice = "release_private_pools"
)

// OOM is one recorded out-of-memory error and the state it happened in.
type OOM struct {
	MemoryState
	// Requested is the rounded request (the oom entry's size) and
	// AllocSize what the allocator tried to obtain for it (PyTorch's
	// "Tried to allocate").
	Requested int64  `json:"requested_bytes"`
	AllocSize int64  `json:"alloc_size"`
	Stream    int64  `json:"stream"`
	Pool      string `json:"pool"`
	// DeviceFree is cudaMemGetInfo's free memory at the failure, from the
	// entry; DeviceTotal is DeviceFree + Reserved, the memory PyTorch
	// could have had: the snapshot does not record the GPU's size, whose
	// rest went to the CUDA context and other processes.
	DeviceFree  int64 `json:"device_free"`
	DeviceTotal int64 `json:"device_total_lower_bound"`
	// LargestInPool is the largest cached free block of the request's pool
	// and stream: had it been at least Requested, there would have been no
	// error.
	LargestInPool int64 `json:"largest_free_in_pool"`
	// Message is PyTorch's error message, rebuilt in the wording of the
	// snapshot's PyTorch version.
	Message string `json:"message"`
	// Site and Stack are where the failing allocation was requested.
	Site         snapshot.Frame   `json:"-"`
	Stack        []snapshot.Frame `json:"-"`
	HiddenFrames int              `json:"hidden_frames"`
	Verdict      Verdict          `json:"verdict"`
	// Shortfall is how much memory was missing with every free byte the
	// request could use (the device's, and the cache's in its own pool)
	// counted, for TooMuchLiveMemory and OtherPoolsFree; for
	// RequestTooLarge, how much the request exceeds DeviceTotal.
	Shortfall int64 `json:"shortfall_bytes"`
	// RequestPoolID is the pool the request went to: the oom entry's
	// pool_id where the trace carries it (2.9+); otherwise the default
	// pools (0, 0), and RequestPoolKnown is false.
	RequestPoolID    snapshot.PoolID `json:"request_pool_id"`
	RequestPoolKnown bool            `json:"request_pool_known"`
	// OtherPoolsFree is the part of FreeBytes cached in other pools than
	// the request's (for an ordinary request: free memory in private
	// pools), which could not serve it: PyTorch never gives a private
	// pool's free blocks to another pool's allocations.
	OtherPoolsFree int64 `json:"free_in_other_pools_bytes"`
	// ExpandableSegments says whether expandable segments were on.
	ExpandableSegments bool     `json:"expandable_segments"`
	Advice             []Advice `json:"advice"`
}

// OOMReport is `memstat oom` for one device.
type OOMReport struct {
	Device int   `json:"device"`
	OOMs   []OOM `json:"ooms"`
	// AtPeak is the state at the peak of reserved memory, given when the
	// trace has no oom entry.
	AtPeak *MemoryState `json:"at_peak_reserved,omitempty"`
}

// HolderCount is how many stacks an OOM or peak state lists.
const HolderCount = 10

// ExplainOOMs rebuilds the state at every oom entry of a device's trace
// and says why each allocation failed; without one, it describes the
// state at the peak of reserved memory. It lists the HolderCount stacks
// holding the most memory.
func ExplainOOMs(rp *Replayed, fr *Frames) (*OOMReport, error) {
	return ExplainOOMsTop(rp, fr, HolderCount)
}

// ExplainOOMsTop is ExplainOOMs listing the top stacks holding memory
// (all when top <= 0).
func ExplainOOMsTop(rp *Replayed, fr *Frames, top int) (*OOMReport, error) {
	rep := &OOMReport{Device: rp.Device}
	var idx []int
	for i, e := range rp.Trace().All() {
		if len(idx) == rp.Trace().Count(snapshot.ActionOOM) {
			break // every oom found
		}
		if e.Action == snapshot.ActionOOM {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		var st *State
		if rp.Result.History.Coverage == replay.CoverageNone {
			st = rp.FinalState()
			st.Index = -1
		} else {
			sts, err := rp.States(rp.Result.PeakReserved.Index)
			if err != nil {
				return nil, err
			}
			st = sts[0]
		}
		ms := rp.Describe(st, fr, top)
		rep.AtPeak = &ms
		return rep, nil
	}
	states, err := rp.States(idx...)
	if err != nil {
		return nil, err
	}
	// A guessed release may be a range ("2.3-2.4"): its oldest release's
	// rules were applied, and its wording is used.
	first, _, _ := strings.Cut(rp.Result.Version, "-")
	v, verr := allocator.ParseVersion(first)
	if verr != nil {
		v = replay.GuessVersion(rp.Snap)
	}
	for k, i := range idx {
		rep.OOMs = append(rep.OOMs, rp.explainOOM(rp.Trace().At(i), states[k], fr, v, top))
	}
	return rep, nil
}

func (rp *Replayed) explainOOM(e snapshot.TraceEntry, st *State, fr *Frames, v allocator.Version, top int) OOM {
	o := OOM{
		MemoryState:        rp.Describe(st, fr, top),
		Requested:          e.Size,
		AllocSize:          allocator.AllocationSize(e.Size),
		Stream:             rp.Snap.Stream(&e),
		DeviceFree:         e.DeviceFree(),
		ExpandableSegments: rp.Config.ExpandableSegments,
		Site:               fr.Site(e.Stack),
	}
	o.Stack, o.HiddenFrames = fr.Shown(e.Stack)
	pool := snapshot.LargePool
	if e.Size <= allocator.SmallSize {
		pool = snapshot.SmallPool
	}
	o.Pool = pool.String()
	o.DeviceTotal = o.DeviceFree + o.Reserved
	if rp.Snap.Features.TracePoolID {
		o.RequestPoolID, o.RequestPoolKnown = rp.Snap.Context(&e).Pool, true
	}
	for _, seg := range st.Segments {
		if seg.PoolID != o.RequestPoolID {
			// PyTorch's malloc looks only in the request's pool
			// (get_pool), and releasing cached blocks keeps a live
			// private pool's segments (release_cached_blocks).
			for _, b := range seg.Blocks {
				if b.State == snapshot.Inactive {
					o.OtherPoolsFree += b.Size
				}
			}
			continue
		}
		if seg.Pool != pool || seg.Stream != o.Stream {
			continue
		}
		for _, b := range seg.Blocks {
			if b.State == snapshot.Inactive && b.Size > o.LargestInPool {
				o.LargestInPool = b.Size
			}
		}
	}
	usable := o.FreeBytes - o.OtherPoolsFree
	o.Message = (&allocator.OOMError{
		Version:       v,
		Device:        rp.Device,
		RequestedSize: e.Size,
		AllocSize:     o.AllocSize,
		DeviceTotal:   o.DeviceTotal,
		DeviceFree:    o.DeviceFree,
		Allocated:     o.Allocated,
		Reserved:      o.Reserved,
		PrivatePools:  o.PrivateFree,
	}).Error()

	switch {
	case o.AllocSize > o.DeviceTotal:
		o.Verdict = RequestTooLarge
		o.Shortfall = o.AllocSize - o.DeviceTotal
		o.Advice = []Advice{AdviseReduceBatch, AdviseOtherProcesses}
	case o.DeviceFree >= o.AllocSize:
		o.Verdict = OtherLimit
		o.Advice = []Advice{AdviseCheckFraction, AdviseEmptyCacheUseless}
	case o.DeviceFree+usable >= o.AllocSize:
		o.Verdict = Fragmentation
		if !o.ExpandableSegments {
			o.Advice = append(o.Advice, AdviseExpandableSegments)
		}
		if pool == snapshot.LargePool && rp.Config.MaxSplitSize == allocator.NoMaxSplit {
			o.Advice = append(o.Advice, AdviseMaxSplitSize)
		}
		o.Advice = append(o.Advice, AdviseEmptyCacheUseless, AdviseReduceBatch)
	case o.DeviceFree+o.FreeBytes >= o.AllocSize:
		o.Verdict = OtherPoolsFree
		o.Shortfall = o.AllocSize - o.DeviceFree - usable
		o.Advice = []Advice{AdviseReleasePools, AdviseEmptyCacheUseless, AdviseReduceBatch}
	default:
		o.Verdict = TooMuchLiveMemory
		o.Shortfall = o.AllocSize - o.DeviceFree - usable
		o.Advice = []Advice{AdviseReduceBatch, AdviseCheckpointing, AdviseFreeReferences, AdviseEmptyCacheUseless, AdviseOtherProcesses}
		if o.OtherPoolsFree > 0 && o.RequestPoolID.IsDefault() {
			o.Advice = append(o.Advice, AdviseReleasePools)
		}
	}
	return o
}
