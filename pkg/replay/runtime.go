package replay

import (
	"maps"
	"slices"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Runtime settings (torch.cuda.memory._set_allocator_settings).
//
// What PyTorch does (c10/cuda/CUDAAllocatorConfig.cpp parseArgs 2.0 to
// 2.8, its inline predecessor in CUDACachingAllocator.cpp 2.0, and
// c10/core/AllocatorConfig.cpp AcceleratorAllocatorConfig::parseArgs 2.9
// and 2.10; allocator model §12.1): _set_allocator_settings (2.0+)
// re-parses a settings string at any time. Every parse first resets
// max_split_size (unlimited), the roundup_power2_divisions table (all 0)
// and garbage_collection_threshold (0); expandable_segments (2.1+),
// max_non_split_rounding_mb (2.6+) and the rest keep their value unless
// named. The allocator reads the settings at each decision:
//   - round_size (each malloc): the block size of a request; 2.0 to 2.3
//     leave a request unrounded under a divisions entry of 1;
//   - get_free_block: a request below max_split_size never takes a
//     cached block of at least it; one of at least it takes one only if
//     less than max_non_split_rounding larger;
//   - should_split: a large block is split when the request is below
//     max_split_size and more than 1 MiB remains (expandable segments
//     on: any remainder of 512 bytes);
//   - malloc/free and alloc_block/release_block count oversize_allocations
//     and oversize_segments against the max_split_size of that moment,
//     so a change between the two leaves the counters anywhere (even
//     below 0);
//   - release_available_cached_blocks (only with max_split_size set) and
//     garbage collection (threshold, with a memory fraction) release
//     segments: segment_free entries, shown;
//   - memory_stats' max_split_size is the setting when the device's
//     allocator was made, never refreshed.
// The trace records an alloc's request (orig_size), not its block; the
// snapshot records the settings at its end (2.3+), not their history.
// So the segment events and placements are shown and followed, while a
// block's size is known only where a later placement inside it, the end
// of its segment or the final segments pin it: under Options.RuntimeSettings
// each block lies between the smallest rounding any table gives and the
// largest block any setting lets the request take whole (runtimeBounds),
// and the oversize counters and max_split_size are bounds
// (oversizeBounds). A forced allocation whose recorded-settings rounding
// does not fit takes the smallest rounding. Not covered:
// max_non_split_rounding_mb lowered at runtime (the bound takes the larger
// of 20 MiB and the snapshot's value), and garbage_collection_threshold
// changes only decide releases the trace shows.
//
// A snapshot records the allocator settings in force when it was taken,
// not their history. expandable_segments switched at runtime shows in the
// recording: a new segment is a segment_alloc (cudaMalloc) while it is off
// and a segment_map while it is on. When the recording holds both kinds,
// or a kind the recorded setting cannot make, the setting changed during
// the run: the replay then switches the simulator's setting to the one
// each new segment shows, keeps it for the calls in between, and tries the
// other value where a call diverges from the recording. (Before 2.4 a
// cudaMalloc beside maps is also what a private pool makes while the
// setting is on, its segments never expandable, released before the
// snapshot if the final state shows none: without RuntimeSettings the
// replay takes it as a pool's, poolMallocs, not as a switch.) Which value was in
// force at a cache hit is often not shown, and should_split depends on it
// (a large-pool block splits for any remainder of 512 bytes or more while
// expandable segments are on, only above 1 MiB while they are off), so the
// figures that depend on block sizes become bounds (runtimeBounds).
//
// A switch on and off again between two new segments shows only where a
// block split under it changes a later placement (a recorded allocation
// inside a block the replay handed out whole: splitInside, met mid-trace)
// or is still live at the end (finalSizesDiffer). Otherwise the remainder
// (512 B to 1 MiB, too small for any large request) merges back when the
// block is freed, and the trace is the one an unswitched run writes; an
// oom the recorded setting would have served is no evidence either (an
// unrecorded memory fraction writes the same entry). Bounding every
// recording for such a switch would cost users who never switch: on the
// published traces 646 of 28,436 allocations have a split decision that
// depends on the setting, in 8 of 16 traces (TestSwitchCostOnRealTraces),
// each of which would lose its exact allocated and active peaks. So the
// user says it (Options.RuntimeSettings, --runtime-settings): with it
// the replay treats every such decision as unknown from the start and the
// figures built on block sizes are bounds (reasonRuntimeOption). Without
// it the replay assumes no switch the recording does not show, and where
// that matters (a large-pool cache hit whose split decision depends on
// the setting: noteSplitDependence) says so (Result.Assumptions).

// assumeNoCapture is the assumption a follow replay without
// Options.Captures makes where it counts a retry for every oom (the
// recording allows no private pool: poolsPossible). malloc runs
// release_cached_blocks and the retry only while captures_underway is
// empty (CUDACachingAllocator.cpp DeviceCachingAllocator::malloc,
// C10_LIKELY(captures_underway.empty()), 2.0 to 2.10; use_mem_pool's
// beginAllocateToPool from 2.5), so an oom during a capture or a
// use_mem_pool block has no retry, and where it found nothing to release
// it writes the same oom entry as one after a retry.
// (Releases without num_sync_all_streams name only num_alloc_retries:
// assumeNoCaptureRetries.)
const (
	assumeNoCapture        = "num_alloc_retries and num_sync_all_streams count a retry for every oom entry: " + assumeNoCaptureWhy
	assumeNoCaptureRetries = "num_alloc_retries counts a retry for every oom entry: " + assumeNoCaptureWhy
	assumeNoCaptureWhy     = "this assumes no CUDA graph capture or use_mem_pool block was underway at those ooms (an oom during one has no retry and writes the same entry); --captures prints bounds that allow for one"
)

// AssumesNoCapture says whether an assumption of Result.Assumptions is
// the one about captures (assumeNoCapture), which only num_alloc_retries
// and num_sync_all_streams rest on: check prints it where a rule reads
// them.
func AssumesNoCapture(a string) bool {
	return a == assumeNoCapture || a == assumeNoCaptureRetries
}

// assumeNoSwitch is the assumption a replay without RuntimeSettings makes
// where a split decision depends on expandable_segments.
const assumeNoSwitch = "the allocated and active bytes' peaks and totals (and inactive_split) assume expandable_segments was not switched at runtime without a new segment showing it (a large-pool block served from the cache was split or not by that setting); --runtime-settings prints bounds that allow for a switch"

// noteSplitDependence looks at the allocator call i..j: a large-pool
// allocation served from the cache (no new segment) whose split decision
// depends on expandable_segments (should_split, CUDACachingAllocator.cpp
// 2.1 to 2.10: while the setting is on any remainder of 512 bytes or more
// is split; while it is off only one above 1 MiB, and never for a request
// of at least max_split_size) sets sawDependentSplit.
func (r *Replay) noteSplitDependence(i, j int) {
	e := r.tw.at(j)
	if e.Action != snapshot.ActionAlloc {
		return
	}
	cfg := r.a.Config()
	rounded := cfg.RoundSize(e.Size)
	if rounded <= allocator.SmallSize {
		return
	}
	for _, p := range r.tw.span(i, j) {
		if p.Action == snapshot.ActionSegmentAlloc || p.Action == snapshot.ActionSegmentMap {
			return // new memory: the segment's kind shows the setting
		}
	}
	b, ok := r.a.BlockAt(e.Addr)
	if !ok || b.Address != e.Addr || b.Pool != snapshot.LargePool {
		return
	}
	rem := b.Size - rounded
	if rem == 0 {
		// Split: the remainder is the free block after it.
		n, ok := r.a.BlockAt(b.Address + uint64(b.Size))
		if !ok || n.State != snapshot.Inactive || !n.Mapped || n.RegionAddress != b.RegionAddress {
			return
		}
		rem = n.Size
	}
	if rem >= allocator.MinBlockSize && (rem <= allocator.SmallSize || uint64(rounded) >= cfg.MaxSplitSize) {
		r.sawDependentSplit = true
	}
}

// expandableToggled reports whether the recording shows expandable_segments
// switched at runtime, and the setting its first new segment shows. With
// private pools (pools.any, poolMallocs included) a cudaMalloc'd segment
// may be a pool's, so the kinds show no switch.
func (r *Replay) expandableToggled() (toggled, first bool) {
	if !r.cfg.Version.HasExpandableSegments() || r.pools.any {
		return false, false
	}
	// The trace's action counts say whether it has each kind; only the
	// first new segment is looked for, a walk that stops there (a pass
	// over every entry cost 12 ms of replay.New on torch-100MB).
	sawAlloc := r.trace.Count(snapshot.ActionSegmentAlloc) > 0
	sawMap := r.trace.Count(snapshot.ActionSegmentMap) > 0
	seen := false
	for _, e := range r.trace.All() {
		if !sawAlloc && !sawMap {
			break
		}
		if e.Action == snapshot.ActionSegmentAlloc || e.Action == snapshot.ActionSegmentMap {
			seen, first = true, e.Action == snapshot.ActionSegmentMap
			break
		}
	}
	for _, s := range r.final {
		if s.Expandable {
			sawMap = true
		} else {
			sawAlloc = true
		}
	}
	if !seen {
		first = r.cfg.ExpandableSegments
	}
	exp := r.cfg.ExpandableSegments
	return sawAlloc && sawMap || sawAlloc && exp || sawMap && !exp, first
}

// mayToggle reports whether evidence met later in the replay may still
// show a runtime switch: the release has the setting, no private pool
// complicates which segments it governs, and the trace starts from an
// empty allocator (the bounds then need no starting blocks).
func (r *Replay) mayToggle() bool {
	return !r.toggled && r.cfg.Version.HasExpandableSegments() && !r.pools.any && r.res.History.PreexistingSegments == 0
}

// finalSizesDiffer reports whether a block live at the end has another
// size in the snapshot than in the replay: a split decision the recorded
// setting does not explain.
func (r *Replay) finalSizesDiffer() bool {
	for _, s := range r.final {
		for _, b := range s.Blocks {
			if b.State != snapshot.ActiveAllocated && b.State != snapshot.ActivePendingFree {
				continue
			}
			if got, ok := r.a.BlockAt(b.Address); ok && got.Address == b.Address && got.Size != b.Size &&
				(got.State == snapshot.ActiveAllocated || got.State == snapshot.ActivePendingFree) {
				return true
			}
		}
	}
	return false
}

// setExpandable switches the simulator's expandable_segments setting, as
// the program's _set_allocator_settings did.
func setExpandable(a interface{ SetAllocatorSettings(string) error }, on bool) {
	if on {
		a.SetAllocatorSettings("expandable_segments:True")
	} else {
		a.SetAllocatorSettings("expandable_segments:False")
	}
}

// followSetting sets the simulator's expandable_segments to what the new
// segments of the call i..j show, if they show it.
func (r *Replay) followSetting(i, j int) (shown bool) {
	for _, e := range r.tw.span(i, j+1) {
		var on bool
		switch e.Action {
		case snapshot.ActionSegmentAlloc:
		case snapshot.ActionSegmentMap:
			on = true
		default:
			continue
		}
		if r.a.Config().ExpandableSegments != on {
			setExpandable(r.a, on)
		}
		return true
	}
	return false
}

// tryOtherSetting runs the call i..j on a copy of the allocator with
// expandable_segments switched, and keeps the copy if that reproduces the
// recorded entries: the program switched the setting before the call.
func (r *Replay) tryOtherSetting(i, j int) bool {
	e := r.tw.at(j)
	if e.Action == snapshot.ActionAlloc && !r.a.InRegion(e.Addr) && !mapsMemory(r.tw.span(i, j+1)) {
		// No setting places the block there: it must lie in a region
		// after the call, and regions come only from the segment_alloc
		// or segment_map entries the call would record. Skipping the
		// copy keeps a trace with many such calls (under
		// --runtime-settings, every one of them) from being quadratic.
		return false
	}
	c := r.a.Clone()
	setExpandable(c, !c.Config().ExpandableSegments)
	c.OrderHeldFrees(r.tw.span(i, j+1))
	r.win, r.cur = [2]int{i, j}, c
	_, err := c.Malloc(e.Size, r.streams.of(&e), e.Stack)
	if sameEntries(c.Trace(), r.tw.span(i, j+1)) && (err == nil || e.Action == snapshot.ActionOOM) {
		r.a = c
		r.matched(i, j)
		return true
	}
	return false
}

// mapsMemory reports whether entries make or grow a segment.
func mapsMemory(entries []snapshot.TraceEntry) bool {
	for _, e := range entries {
		if e.Action == snapshot.ActionSegmentAlloc || e.Action == snapshot.ActionSegmentMap {
			return true
		}
	}
	return false
}

// splitInside handles a recorded allocation at addr that lies inside a
// live block of the replayed state, past its start: the real allocator
// split that block (under expandable_segments, which the replay did not
// know was on), so the block is cut back to end at addr. It reports
// whether it cut one.
func (r *Replay) splitInside(addr uint64) bool {
	b, ok := r.a.BlockAt(addr)
	if !ok || b.Address == addr || b.State == snapshot.Inactive || !b.Mapped {
		return false
	}
	return r.a.ResizeAllocated(b.Address, int64(addr-b.Address)) == nil
}

// resizeToFinal gives every live block of the replayed state the size
// the final segments show for it: the recording pins the sizes of the
// blocks still live at the end, whatever split decision the replay made
// under a setting it could not see.
func (r *Replay) resizeToFinal() {
	for _, s := range r.final {
		for _, b := range s.Blocks {
			if b.State != snapshot.ActiveAllocated && b.State != snapshot.ActivePendingFree {
				continue
			}
			if got, ok := r.a.BlockAt(b.Address); ok && got.Address == b.Address && got.Size != b.Size &&
				(got.State == snapshot.ActiveAllocated || got.State == snapshot.ActivePendingFree) {
				r.a.ResizeAllocated(b.Address, b.Size)
			}
		}
	}
}

const reasonRuntimeSplit = "expandable_segments was switched at runtime (the recording has both cudaMalloc'd and mapped segments, or a kind its final setting cannot make): a large-pool block served from the cache was split only if the setting was on at that moment, which the recording does not always show, so block sizes and the figures built on them are known within bounds"

// reasonRuntimeOption: runtimeBounds under Options.RuntimeSettings where
// the recording itself shows no switch.
const reasonRuntimeOption = "the program changed allocator settings at runtime (--runtime-settings): max_split_size_mb and roundup_power2_divisions (and, 2.1+, expandable_segments) may have changed where the recording does not show it, so how a request was rounded, whether a block was split or taken whole and which blocks counted as oversize are not known: block sizes and the figures built on them are known within bounds"

// reasonRuntimeSeen: runtimeBounds under Options.RuntimeSettings where
// a block's size shows a change (splitInside, finalSizesDiffer) but no
// segment's kind says which setting changed.
const reasonRuntimeSeen = "allocator settings were changed at runtime (--runtime-settings), and the recording shows it (a block split or sized as the settings the snapshot records do not make it): max_split_size_mb and roundup_power2_divisions (and, 2.1+, expandable_segments) may have changed anywhere, so how a request was rounded, whether a block was split or taken whole and which blocks counted as oversize are not known: block sizes and the figures built on them are known within bounds"

// reasonRuntimeSizes is added to reasonRuntimeSplit under
// Options.RuntimeSettings.
const reasonRuntimeSizes = "max_split_size_mb and roundup_power2_divisions may have changed too (--runtime-settings), so roundings and oversize counts are bounds as well"

// roundRange is the smallest and largest block size round_size gives a
// request of n bytes under any roundup_power2_divisions table (allocator
// model §3.3): the smallest is 512-byte rounding, or before 2.4 the
// request itself under an entry of 1; the largest is 2 divisions, whose
// step is the coarsest (every finer step's multiples are multiples of
// it... the other way round: a coarser step rounds up at least as far).
func roundRange(n int64, v allocator.Version) (lo, hi int64) {
	def := allocator.DefaultConfig(v)
	one, two := def, def
	for i := range one.RoundupPower2Divisions {
		one.RoundupPower2Divisions[i], two.RoundupPower2Divisions[i] = 1, 2
	}
	d := def.RoundSize(n)
	return min(d, one.RoundSize(n)), max(d, two.RoundSize(n))
}

// sizeRange is what the recording says about one allocation's block size.
type sizeRange struct {
	addr    uint64
	lo, hi  int64
	large   bool
	pre     bool // live before the trace's first entry
	alloc   int  // entry index of the alloc (-1: pre-existing)
	freeReq int  // free_requested (or free) entry; -1 if none
	freeEnd int  // free_completed (or free) entry; -1 if none
}

// runtimeBounds bounds the figures that depend on block sizes for a
// recording that switched expandable_segments at runtime (allocator model
// §7: should_split; CUDACachingAllocator.cpp, 2.1 to 2.10). Each
// allocation's block is between its rounded size (split) and the largest
// block it could have taken unsplit: the whole new segment when the call
// created one (its kind says the setting then), else up to 1 MiB more (a
// remainder of at most kSmallSize is not split while the setting is off)
// or, for a request of at least max_split_size, up to
// max_non_split_rounding more. A later allocation inside that range while
// the block is live caps it; the final segments pin the blocks live at the
// end. Sums of the ranges bound the byte figures: the current value at
// every moment, so the peaks, and the allocated and freed totals. The
// inactive_split figures get the bounds that always hold.
func (r *Replay) runtimeBounds(pre []allocator.BlockInfo) map[string]Bound {
	cfg := r.cfg
	var ranges []sizeRange
	live := map[uint64]int{} // address -> index in ranges
	// starts: the addresses of live large blocks, from those the trace
	// allocates.
	var allocAddrs []uint64
	for _, e := range r.trace.All() {
		if e.Action == snapshot.ActionAlloc {
			allocAddrs = append(allocAddrs, e.Addr)
		}
	}
	starts := newRankSet(allocAddrs)
	allocAddrs = nil
	// wide: the settings that round and split (max_split_size_mb,
	// roundup_power2_divisions) may have changed too, so each block lies
	// between the smallest rounding any table gives and the largest block
	// any setting lets the request take whole.
	wide := r.splitsUnknown
	reason := reasonRuntimeOption
	switch {
	case r.kindsShown && wide:
		reason = reasonRuntimeSplit + "; " + reasonRuntimeSizes
	case r.switchShown && wide:
		reason = reasonRuntimeSeen
	case r.switchShown:
		reason = reasonRuntimeSplit
	}
	// rounding is the block size range of a request of n bytes split off
	// a larger block.
	rounding := func(n int64) (lo, hi int64) {
		if !wide {
			rounded := cfg.RoundSize(n)
			return rounded, rounded
		}
		lo, hi = roundRange(n, cfg.Version)
		if cfg.Version < allocator.V2_4 {
			// Before 2.4 an entry of 1 leaves requests unrounded, so
			// free blocks of any size arise, and a remainder under 512
			// bytes is not split off, whatever the rounding.
			hi += allocator.MinBlockSize - 1
		}
		return lo, hi
	}
	// unsplitMax is the largest block a large request of rounded bytes
	// served from the cache could have taken whole: a remainder of at
	// most 1 MiB below max_split_size, or, from max_split_size on, less
	// than max_non_split_rounding more (get_free_block's oversize rule).
	// max_split_size_mb is at least 20 MiB, so under runtime settings a
	// request below that is below it whatever was set.
	unsplitMax := func(rounded int64) int64 {
		if wide && rounded >= allocator.LargeBuffer || !wide && uint64(rounded) >= cfg.MaxSplitSize {
			return rounded + int64(max(cfg.MaxNonSplitRounding, allocator.LargeBuffer)) - allocator.MinBlockSize
		}
		return rounded + allocator.SmallSize
	}
	for _, b := range pre {
		if b.State != snapshot.ActiveAllocated && b.State != snapshot.ActivePendingFree {
			continue
		}
		live[b.Address] = len(ranges)
		sr := sizeRange{addr: b.Address, lo: b.Size, hi: b.Size, large: b.Pool == snapshot.LargePool, pre: true, alloc: -1, freeReq: -1, freeEnd: -1}
		if (sr.large || wide) && b.RequestedSize > 0 {
			// The starting state's block sizes are the rebuild's, made
			// under one setting: the block was its rounded request
			// split off, or taken whole.
			lo, hi := rounding(b.RequestedSize)
			sr.lo = min(sr.lo, lo)
			if sr.large {
				hi = unsplitMax(hi)
			}
			sr.hi = max(sr.hi, hi)
		}
		ranges = append(ranges, sr)
		if b.State == snapshot.ActivePendingFree {
			ranges[len(ranges)-1].freeReq = -2 // freed before the window
		}
	}
	// The cudaMalloc'd segments live at each moment (start -> end): a
	// block never reaches past its segment's end. Those of the final
	// segments the trace neither makes nor frees were there throughout.
	segs := map[uint64]uint64{}
	touched := map[uint64]bool{}
	for _, e := range r.trace.All() {
		if e.Action == snapshot.ActionSegmentAlloc || e.Action == snapshot.ActionSegmentFree {
			touched[e.Addr] = true
		}
	}
	for _, sg := range r.final {
		if !sg.Expandable && !touched[sg.Address] {
			segs[sg.Address] = sg.End()
		}
	}
	segStarts := slices.Sorted(maps.Keys(segs))
	// segmentRoom is how far a block at addr can reach: to the end of
	// the cudaMalloc'd segment holding it, or to the next live large
	// block, whichever comes first (-1: not known).
	segmentRoom := func(addr uint64) int64 {
		room := int64(-1)
		if k, _ := slices.BinarySearch(segStarts, addr+1); k > 0 {
			if end := segs[segStarts[k-1]]; end > addr {
				room = int64(end - addr)
			}
		}
		if next, ok := starts.after(addr); ok && room >= 0 {
			room = min(room, int64(next-addr))
		}
		return room
	}
	for i, e := range r.trace.All() {
		switch e.Action {
		case snapshot.ActionSegmentAlloc:
			segs[e.Addr] = e.Addr + uint64(e.Size)
			if k, ok := slices.BinarySearch(segStarts, e.Addr); !ok {
				segStarts = slices.Insert(segStarts, k, e.Addr)
			}
		case snapshot.ActionSegmentFree:
			delete(segs, e.Addr)
			if k, ok := slices.BinarySearch(segStarts, e.Addr); ok {
				segStarts = slices.Delete(segStarts, k, k+1)
			}
		case snapshot.ActionAlloc:
			lo, hi := rounding(e.Size)
			sr := sizeRange{addr: e.Addr, lo: lo, hi: hi, large: lo > allocator.SmallSize, alloc: i, freeReq: -1, freeEnd: -1}
			if sr.large {
				// The new segments of this call say the setting.
				var seg *snapshot.TraceEntry
				mapped := false
				for k := i - 1; k >= 0; k-- {
					p := r.tw.at(k)
					if !isSegmentEvent(p.Action) && p.Action != snapshot.ActionFreeCompleted {
						break
					}
					mapped = mapped || p.Action == snapshot.ActionSegmentMap
					if p.Action == snapshot.ActionSegmentAlloc && p.Addr == e.Addr {
						seg = &p
					}
				}
				switch {
				case mapped:
					// On: any remainder of 512 bytes or more is split.
				case seg != nil && !r.pools.any && !wide:
					// Off, a whole cudaMalloc'd segment. (A private
					// pool's segments are cudaMalloc'd under either
					// setting before 2.4.)
					if rem := seg.Size - lo; uint64(lo) >= cfg.MaxSplitSize || rem <= allocator.SmallSize {
						sr.hi = seg.Size
						sr.lo = seg.Size
					}
				case seg != nil && !r.pools.any:
					// A new cudaMalloc'd segment under settings not
					// known: the block is the whole segment or its
					// rounded request. No rounding leaves more than
					// 1 MiB: never split. Every rounding below 20 MiB
					// (so below max_split_size) leaves more than 1 MiB:
					// always split, unless expandable_segments was on
					// (any remainder split: the same).
					switch {
					case seg.Size-lo <= allocator.SmallSize:
						sr.lo, sr.hi = seg.Size, seg.Size
					case hi < allocator.LargeBuffer && seg.Size-hi > allocator.SmallSize:
					default:
						sr.hi = seg.Size
					}
				case seg != nil && wide:
					sr.hi = max(seg.Size, unsplitMax(hi))
				default:
					sr.hi = unsplitMax(hi)
				}
				if room := segmentRoom(e.Addr); room >= sr.lo && room < sr.hi {
					sr.hi = room
				}
				// A live block this one lies inside ends here.
				if prev, ok := starts.before(e.Addr); ok {
					o := &ranges[live[prev]]
					if end := int64(e.Addr - o.addr); end < o.hi {
						o.hi = max(end, o.lo)
					}
				}
				starts.add(e.Addr)
			}
			live[e.Addr] = len(ranges)
			ranges = append(ranges, sr)
		case snapshot.ActionFreeRequested, snapshot.ActionFree, snapshot.ActionFreeCompleted:
			k, ok := live[e.Addr]
			if !ok {
				continue
			}
			sr := &ranges[k]
			if e.Action != snapshot.ActionFreeCompleted && sr.freeReq == -1 {
				sr.freeReq = i
			}
			if e.Action != snapshot.ActionFreeRequested {
				if sr.freeReq == -1 {
					sr.freeReq = i
				}
				sr.freeEnd = i
				delete(live, e.Addr)
				if sr.large {
					starts.remove(e.Addr)
				}
			}
		}
	}
	// The blocks live at the end are pinned by the final segments.
	for _, s := range r.final {
		for _, b := range s.Blocks {
			if k, ok := live[b.Address]; ok && (b.State == snapshot.ActiveAllocated || b.State == snapshot.ActivePendingFree) &&
				b.Size >= ranges[k].lo && b.Size <= ranges[k].hi {
				ranges[k].lo, ranges[k].hi = b.Size, b.Size
			}
		}
	}

	// Sums over time, per pool (0: all, 1: large, 2: small; small only
	// when wide), of the allocated and active bytes.
	type sums struct{ curLo, curHi, peakLo, peakHi, allocLo, allocHi, freeLo, freeHi int64 }
	var alloc, active [3]sums
	add := func(s *[3]sums, sr *sizeRange, sign int64, count bool) {
		for p := 0; p < 3; p++ {
			if p == 1 && !sr.large || p == 2 && (sr.large || !wide) {
				continue
			}
			x := &s[p]
			x.curLo += sign * sr.lo
			x.curHi += sign * sr.hi
			if count && sign > 0 {
				x.allocLo += sr.lo
				x.allocHi += sr.hi
			}
			if count && sign < 0 {
				x.freeLo += sr.lo
				x.freeHi += sr.hi
			}
		}
	}
	peaks := func(s *[3]sums) {
		for p := range s {
			s[p].peakLo = max(s[p].peakLo, s[p].curLo)
			s[p].peakHi = max(s[p].peakHi, s[p].curHi)
		}
	}
	byEntry := map[int][]int{}
	for k := range ranges {
		sr := &ranges[k]
		if sr.pre {
			if sr.freeReq != -2 {
				add(&alloc, sr, 1, false)
			}
			add(&active, sr, 1, false)
		}
		for _, at := range []int{sr.alloc, sr.freeReq, sr.freeEnd} {
			if at >= 0 {
				byEntry[at] = append(byEntry[at], k)
			}
		}
	}
	peaks(&alloc)
	peaks(&active)
	for i := range r.tw.n {
		for _, k := range byEntry[i] {
			sr := &ranges[k]
			switch i {
			case sr.alloc:
				add(&alloc, sr, 1, true)
				add(&active, sr, 1, true)
			}
			if i == sr.freeReq {
				add(&alloc, sr, -1, true)
			}
			if i == sr.freeEnd {
				add(&active, sr, -1, true)
			}
		}
		peaks(&alloc)
		peaks(&active)
	}
	// A block live at the end of the trace that the final segments show
	// free was freed after it (a cut-down file): the reconciliation frees
	// it, and the freed figures count it.
	finalActive := map[uint64]bool{}
	for _, s := range r.final {
		for _, b := range s.Blocks {
			if b.State == snapshot.ActiveAllocated || b.State == snapshot.ActivePendingFree {
				finalActive[b.Address] = true
			}
		}
	}
	for addr, k := range live {
		if finalActive[addr] {
			continue
		}
		sr := &ranges[k]
		if sr.freeReq == -1 {
			add(&alloc, sr, -1, true)
		}
		add(&active, sr, -1, true)
	}

	out := map[string]Bound{}
	bound := func(key string, lo, hi int64) {
		out[key] = Bound{Min: lo, Max: &hi, Reason: reason, Bytes: true}
	}
	pools := []string{"all", "large_pool"}
	if wide && slices.ContainsFunc(ranges, func(sr sizeRange) bool { return !sr.large }) {
		// (A run without small-pool blocks leaves its figures exact.)
		pools = append(pools, "small_pool")
	}
	for p, pool := range pools {
		for _, f := range []struct {
			name string
			s    *sums
		}{{"allocated_bytes", &alloc[p]}, {"active_bytes", &active[p]}} {
			bound(f.name+"."+pool+".peak", f.s.peakLo, f.s.peakHi)
			bound(f.name+"."+pool+".allocated", f.s.allocLo, f.s.allocHi)
			bound(f.name+"."+pool+".freed", f.s.freeLo, f.s.freeHi)
		}
	}
	st := r.a.Stats()
	for p, pool := range pools {
		pi := []int{allocator.PoolAll, allocator.PoolLarge, allocator.PoolSmall}[p]
		// Free split blocks lie inside reserved memory; their peak is at
		// least their final value. How many were made and merged over the
		// run depends on every split.
		reservedPeak := st.ReservedBytes[pi].Peak
		out["inactive_split_bytes."+pool+".peak"] = Bound{Min: st.InactiveSplitBytes[pi].Current, Max: &reservedPeak, Reason: reason, Bytes: true}
		out["inactive_split."+pool+".peak"] = Bound{Min: st.InactiveSplit[pi].Current, Reason: reason}
		for _, name := range []string{"inactive_split", "inactive_split_bytes"} {
			out[name+"."+pool+".allocated"] = Bound{Reason: reason, Bytes: name == "inactive_split_bytes"}
			out[name+"."+pool+".freed"] = Bound{Reason: reason, Bytes: name == "inactive_split_bytes"}
		}
	}
	if wide {
		r.oversizeBounds(out, ranges, reason)
	}
	return out
}

// oversizeBounds bounds the oversize counters and max_split_size when
// max_split_size_mb may have changed at runtime (allocator model §9:
// malloc counts a block of at least max_split_size into
// oversize_allocations, free() out of it, each under the setting of its
// own moment; alloc_block and release_block do the same for
// oversize_segments with cudaMalloc'd segments). max_split_size_mb is at
// least 20 MiB, so only blocks and segments that may be that large may
// count; a block counted in but not out (or out but not in) leaves the
// current value anywhere between minus the frees and the allocations,
// and peaks start at 0. The max_split_size figure is the setting when the
// device's allocator was made, which a later call does not show.
func (r *Replay) oversizeBounds(out map[string]Bound, ranges []sizeRange, reason string) {
	var allocs, frees, segAllocs, segFrees int64
	for _, sr := range ranges {
		if sr.hi < allocator.LargeBuffer {
			continue
		}
		if !sr.pre {
			allocs++
		}
		if sr.freeReq >= 0 {
			frees++
		}
	}
	for _, e := range r.trace.All() {
		if e.Size < allocator.LargeBuffer {
			continue
		}
		switch e.Action {
		case snapshot.ActionSegmentAlloc:
			segAllocs++
		case snapshot.ActionSegmentFree:
			segFrees++
		}
	}
	// A trace that starts mid-run: what the counters held then is not
	// known (a switch may have left them anywhere).
	midRun := r.res.History.PreexistingSegments > 0 || len(r.preBlocks) > 0
	for name, n := range map[string][2]int64{"oversize_allocations": {allocs, frees}, "oversize_segments": {segAllocs, segFrees}} {
		in, outs := n[0], n[1]
		if midRun {
			out[name+".current"] = Bound{Min: NoLowerEnd, Reason: reason}
			out[name+".peak"] = Bound{Reason: reason}
			out[name+".allocated"] = Bound{Reason: reason}
			out[name+".freed"] = Bound{Reason: reason}
			continue
		}
		out[name+".current"] = Bound{Min: -outs, Max: &in, Reason: reason}
		out[name+".peak"] = Bound{Max: &in, Reason: reason}
		out[name+".allocated"] = Bound{Max: &in, Reason: reason}
		out[name+".freed"] = Bound{Max: &outs, Reason: reason}
	}
	out["max_split_size"] = Bound{Min: -1, Reason: reason}
}
