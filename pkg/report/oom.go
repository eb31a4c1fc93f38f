package report

import (
	"fmt"

	"github.com/memstat/memstat/pkg/analysis"
)

// FreeSpaceTable lists the cache's free memory per pool at one moment.
func FreeSpaceTable(ms *analysis.MemoryState) *Table {
	t := &Table{Columns: []Column{
		{Name: "Pool", Key: "pool"},
		{Name: "Cached free", Key: "free_bytes", Align: Right},
		{Name: "Free blocks", Key: "free_blocks", Align: Right},
		{Name: "Largest free block", Key: "largest", Align: Right},
		{Name: "Segments with free space", Key: "segments", Align: Right},
	}}
	for _, f := range ms.Free {
		t.Add(Str(f.Pool), Bytes(f.Bytes), Int(int64(f.Blocks)), Bytes(f.Largest), Int(int64(f.Segments)))
	}
	return t
}

// StateText sums up a memory state in one sentence.
func StateText(ms *analysis.MemoryState) string {
	s := fmt.Sprintf("%s allocated, %s reserved in %s; the cache holds %s free in %s (largest %s",
		Size(ms.Allocated), Size(ms.Reserved), Plural(ms.Segments, "segment", "segments"),
		Size(ms.FreeBytes), Plural(ms.FreeBlocks, "block", "blocks"), Size(ms.LargestFree))
	if ms.FreeBytes > 0 {
		s += fmt.Sprintf(", so %s of it is scattered outside the largest block", Percent(ms.ExternalFragmentation))
	}
	s += ")"
	if ms.PrivateAllocated > 0 || ms.PrivateFree > 0 {
		s += fmt.Sprintf("; private pools (CUDA graphs, MemPool) hold %s of the allocated memory and %s of the free", Size(ms.PrivateAllocated), Size(ms.PrivateFree))
	}
	if ms.Pending > 0 {
		s += fmt.Sprintf("; %s freed but waiting for other streams", Size(ms.Pending))
	}
	if ms.Rounding > 0 {
		s += fmt.Sprintf("; rounding of live blocks %s", Size(ms.Rounding))
	}
	return s
}

// VerdictText explains why the allocation failed, with the figures.
func VerdictText(o *analysis.OOM) string {
	switch o.Verdict {
	case analysis.TooMuchLiveMemory:
		if o.OtherPoolsFree > 0 {
			return fmt.Sprintf("too much live memory: live tensors held %s, and the request needed %s more, but PyTorch could use at most %s (%s free on the device + %s reserved). Even with every free byte it could use reused (%s on the device, %s cached in free blocks of %s), %s was missing: fragmentation is not the problem. %s more sat free in %s, which %s.",
				Size(o.Allocated), Size(o.AllocSize), Size(o.DeviceTotal), Size(o.DeviceFree), Size(o.Reserved),
				Size(o.DeviceFree), Size(o.FreeBytes-o.OtherPoolsFree), requestPool(o), Size(o.Shortfall),
				Size(o.OtherPoolsFree), otherPools(o), neverGiven(o))
		}
		return fmt.Sprintf("too much live memory: live tensors held %s, and the request needed %s more, but PyTorch could use at most %s (%s free on the device + %s reserved). Even with every free byte reused (%s on the device, %s cached in free blocks), %s was missing: fragmentation is not the problem.",
			Size(o.Allocated), Size(o.AllocSize), Size(o.DeviceTotal), Size(o.DeviceFree), Size(o.Reserved),
			Size(o.DeviceFree), Size(o.FreeBytes), Size(o.Shortfall))
	case analysis.OtherPoolsFree:
		return fmt.Sprintf("free memory in other pools: the device had %s free and the cache %s, together at least the %s requested, but %s of the cached free memory sat in %s, which %s; with what it could use (%s on the device, %s cached in %s) %s was missing.",
			Size(o.DeviceFree), Size(o.FreeBytes), Size(o.AllocSize), Size(o.OtherPoolsFree), otherPools(o), neverGiven(o),
			Size(o.DeviceFree), Size(o.FreeBytes-o.OtherPoolsFree), requestPool(o), Size(o.Shortfall))
	case analysis.RequestTooLarge:
		return fmt.Sprintf("the request alone is too large: %s is more than all the %s PyTorch could use (%s free on the device + %s reserved), so it cannot fit whatever else is freed.",
			Size(o.AllocSize), Size(o.DeviceTotal), Size(o.DeviceFree), Size(o.Reserved))
	case analysis.Fragmentation:
		return fmt.Sprintf("fragmentation: the memory existed but not in one piece. The device had %s free and the cache %s in %s, together at least the %s requested, but the largest free block of the %s pool on this stream was %s, and the cached free space lies in segments that also hold live tensors, so it could neither be reused for the request nor released to make room.",
			Size(o.DeviceFree), Size(o.FreeBytes), Plural(o.FreeBlocks, "free block", "free blocks"), Size(o.AllocSize),
			o.Pool, Size(o.LargestInPool))
	}
	return fmt.Sprintf("a limit, not the device: cudaMemGetInfo reported %s free, more than the %s the allocator tried to obtain, yet the allocation failed.",
		Size(o.DeviceFree), Size(o.AllocSize))
}

// requestPool names the pools an OOM's request could use.
func requestPool(o *analysis.OOM) string {
	s := "the default pools"
	if !o.RequestPoolID.IsDefault() {
		s = "its private pool " + PoolID(o.RequestPoolID)
	}
	if !o.RequestPoolKnown {
		s += " (the trace does not say the request's pool before PyTorch 2.9; taken as the default pools)"
	}
	return s
}

// otherPools names the pools an OOM's request could not use.
func otherPools(o *analysis.OOM) string {
	if o.RequestPoolID.IsDefault() {
		return "private pools (CUDA graphs, MemPool)"
	}
	return "other pools than the request's " + PoolID(o.RequestPoolID)
}

// neverGiven says why another pool's free memory could not serve.
func neverGiven(o *analysis.OOM) string {
	if o.RequestPoolID.IsDefault() {
		return "PyTorch never gives to ordinary allocations (and empty_cache() does not release while the graph or MemPool is alive)"
	}
	return "PyTorch does not give to a private pool's allocations"
}

// AdviceText words the remedies of an OOM with its figures.
func AdviceText(o *analysis.OOM) []string {
	var out []string
	for _, a := range o.Advice {
		switch a {
		case analysis.AdviseExpandableSegments:
			out = append(out, fmt.Sprintf("Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: segments then grow in place by mapping pages, so the %s of cached free memory would not be stranded in %s.",
				Size(o.FreeBytes), Plural(o.FreeBlocks, "separate block", "separate blocks")))
		case analysis.AdviseMaxSplitSize:
			out = append(out, fmt.Sprintf("Or set PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:%d: cached blocks of that size or more are then never split for smaller requests, and on an OOM the allocator frees them and retries.",
				suggestMaxSplitMiB(o.AllocSize)))
		case analysis.AdviseReduceBatch:
			switch {
			case o.Verdict == analysis.RequestTooLarge:
				out = append(out, fmt.Sprintf("Make this tensor smaller: a smaller batch, sequence length or vocabulary chunk, or split the computation (chunked loss, attention in blocks); it must shrink by at least %s, more for what else is live.",
					Size(o.Shortfall)))
			case o.Verdict == analysis.TooMuchLiveMemory && o.Shortfall < o.Allocated:
				out = append(out, fmt.Sprintf("Reduce the batch size (or sequence length, or model size): live memory must shrink by at least %s (%s of the %s live) for this allocation to fit, more for the allocations after it.",
					Size(o.Shortfall), Percent(Ratio(o.Shortfall, o.Allocated)), Size(o.Allocated)))
			case o.Verdict == analysis.TooMuchLiveMemory:
				out = append(out, fmt.Sprintf("Reduce the batch size (or sequence length, or model size): %s was missing, more than all the live memory (%s).",
					Size(o.Shortfall), Size(o.Allocated)))
			case o.Verdict == analysis.OtherPoolsFree:
				out = append(out, fmt.Sprintf("Or reduce the batch size (or sequence length, or model size): without the pools' memory, live memory must shrink by at least %s for this allocation to fit.",
					Size(o.Shortfall)))
			default:
				out = append(out, "A smaller batch also helps: less live memory leaves the cache's fragments more room.")
			}
		case analysis.AdviseCheckpointing:
			out = append(out, "If the live memory is mostly activations kept for backward (the stacks above are in forward), use activation checkpointing (torch.utils.checkpoint) to recompute them in backward, or autocast to bf16/fp16 to halve them.")
		case analysis.AdviseFreeReferences:
			out = append(out, "Drop references you no longer need before this point: del temporaries, optimizer.zero_grad(set_to_none=True), torch.no_grad()/inference_mode() for evaluation, loss.item() rather than keeping loss tensors; the largest holders are listed above.")
		case analysis.AdviseEmptyCacheUseless:
			if o.Verdict == analysis.OtherPoolsFree && o.RequestPoolID.IsDefault() {
				out = append(out, fmt.Sprintf("torch.cuda.empty_cache() alone would not help: it keeps the segments of every graph and MemPool still alive, and the allocator already released every other cached segment with no live tensor before raising; the %s free in private pools stays there until the pools are released.",
					Size(o.OtherPoolsFree)))
			} else if o.Verdict == analysis.Fragmentation {
				out = append(out, fmt.Sprintf("torch.cuda.empty_cache() would not help: before raising, the allocator already released every cached segment with no live tensor and retried; the %s still cached is free space inside segments that also hold live tensors, which empty_cache cannot release either.",
					Size(o.FreeBytes)))
			} else {
				out = append(out, fmt.Sprintf("torch.cuda.empty_cache() would not help: before raising, the allocator already released every cached segment with no live tensor and retried; what is left cached (%s) is free space inside segments that still hold live tensors.",
					Size(o.FreeBytes)))
			}
		case analysis.AdviseReleasePools:
			out = append(out, fmt.Sprintf("Release the CUDA graphs and MemPools you no longer replay or use (del the graph or g.reset(); let the MemPool go out of scope), then torch.cuda.empty_cache(): the %s free in private pools then goes back to the device; or capture fewer graphs (fewer batch sizes), or share one pool between graphs (pool=g.pool()).",
				Size(o.OtherPoolsFree)))
		case analysis.AdviseCheckFraction:
			out = append(out, "Check torch.cuda.set_per_process_memory_fraction (and garbage_collection_threshold): a fraction caps what the allocator may obtain below what the device has free.")
		case analysis.AdviseOtherProcesses:
			out = append(out, fmt.Sprintf("PyTorch could use at most %s (free + reserved at the failure); if the GPU is larger, the rest is held by the CUDA context, other libraries (NCCL, cuBLAS workspaces) or other processes (nvidia-smi lists them).",
				Size(o.DeviceTotal)))
		}
	}
	return out
}

// suggestMaxSplitMiB suggests a max_split_size_mb: the largest power of
// two not above the request, and at least 32 (PyTorch refuses values below
// 20 MiB).
func suggestMaxSplitMiB(request int64) int64 {
	mib := request >> 20
	n := int64(32)
	for n*2 <= mib {
		n *= 2
	}
	return n
}
