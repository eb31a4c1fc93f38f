package allocator

import (
	"strconv"
	"strings"
)

// OOMError is torch.cuda.OutOfMemoryError: the figures PyTorch puts into
// its message, and the message itself (Error) in the wording of the
// simulated version.
type OOMError struct {
	Version Version
	Device  int
	// RequestedSize is the caller's request; AllocSize the segment size the
	// allocator failed to obtain (the "Tried to allocate" figure).
	RequestedSize int64
	AllocSize     int64
	// DeviceTotal and DeviceFree are cudaMemGetInfo at the failure.
	DeviceTotal int64
	DeviceFree  int64
	// Allocated and Reserved are allocated_bytes.all.current and
	// reserved_bytes.all.current after the fallbacks ran.
	Allocated int64
	Reserved  int64
	// PrivatePools is the free memory cached in CUDA-graph / MemPool
	// private pools (what malloc's message calls "allocated in private
	// pools": the sizes of their free blocks).
	PrivatePools int64
	// FractionSet and AllowedMax report set_per_process_memory_fraction.
	FractionSet bool
	AllowedMax  int64
	// ProcessInfo is the NVML per-process usage text PyTorch inserts when
	// NVML is available; the simulator leaves it empty.
	ProcessInfo string
	// OverOneEiB marks the up-front guard for requests of 1 EiB or more.
	OverOneEiB bool
}

// ExceptionName is the Python name a traceback prints for the error:
// torch.cuda.OutOfMemoryError up to 2.3, torch.OutOfMemoryError from 2.4,
// when the device-generic exception class became the one raised (and
// torch.cuda.OutOfMemoryError an alias of it). docs/versions.md, "OOM".
func (e *OOMError) ExceptionName() string {
	if e.Version < V2_4 {
		return "torch.cuda.OutOfMemoryError"
	}
	return "torch.OutOfMemoryError"
}

// Error returns the message DeviceCachingAllocator::malloc raises in the
// simulated release (docs/versions.md, "OOM message"):
//
//   - 2.0: "(GPU n; X total capacity; ... free; [A allowed; ]R reserved
//     in total by PyTorch)" and the max_split_size_mb hint;
//   - 2.1 (PR #99699): "GPU n has a total capacty of", the NVML process
//     lines, no "allowed" clause (computed, never printed), the
//     max_split_size_mb hint;
//   - 2.2-2.3: "capacity", the expandable_segments:True hint with the
//     #environment-variables link, still no "allowed" clause;
//   - 2.4: the private-pool clause (PR #124673, April 2024, before the
//     2.4 branch cut), still no "allowed" clause;
//   - 2.5-2.9: "A allowed; " after the process lines when a memory
//     fraction is set (PR #129546, "Restore allowed_info in OOM message",
//     merged 2024-06-29, after the 2.4 branch cut); read in v2.6.0;
//   - 2.10: the hint names PYTORCH_ALLOC_CONF (PR #172327 of 2026-01-13
//     put PYTORCH_CUDA_ALLOC_CONF and the newer docs link back on main,
//     after the 2.10 branch).
func (e *OOMError) Error() string {
	if e.OverOneEiB {
		return "CUDA out of memory. Tried to allocate more than 1EB memory."
	}
	var b strings.Builder
	allowed := ""
	if e.FractionSet {
		allowed = FormatSize(e.AllowedMax) + " allowed; "
	}
	dev := strconv.Itoa(e.Device)
	if e.Version < V2_1 {
		b.WriteString("CUDA out of memory. Tried to allocate " + FormatSize(e.AllocSize) +
			" (GPU " + dev + "; " + FormatSize(e.DeviceTotal) + " total capacity; " +
			FormatSize(e.Allocated) + " already allocated; " + FormatSize(e.DeviceFree) + " free; " +
			allowed + FormatSize(e.Reserved) + " reserved in total by PyTorch)" +
			" If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation. " +
			" See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
		return b.String()
	}
	capacity := "capacity"
	if e.Version < V2_2 {
		capacity = "capacty"
	}
	if !e.Version.printsAllowedInfo() {
		allowed = ""
	}
	pools := e.PrivatePools
	if e.Version < V2_4 {
		pools = 0
	}
	b.WriteString("CUDA out of memory. Tried to allocate " + FormatSize(e.AllocSize) + ". GPU " + dev +
		" has a total " + capacity + " of " + FormatSize(e.DeviceTotal) + " of which " +
		FormatSize(e.DeviceFree) + " is free. " + e.ProcessInfo + allowed +
		"Of the allocated memory " + FormatSize(e.Allocated+pools) + " is allocated by PyTorch, ")
	if pools > 0 {
		b.WriteString("with " + FormatSize(pools) + " allocated in private pools (e.g., CUDA Graphs), ")
	}
	b.WriteString("and " + FormatSize(e.Reserved-e.Allocated-pools) + " is reserved by PyTorch but unallocated.")
	switch {
	case e.Version < V2_2:
		b.WriteString(" If reserved but unallocated memory is large try setting max_split_size_mb to avoid" +
			" fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
	case e.Version < V2_10:
		b.WriteString(" If reserved but unallocated memory is large try setting" +
			" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for" +
			" Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
	default:
		b.WriteString(" If reserved but unallocated memory is large try setting" +
			" PYTORCH_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for" +
			" Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
	}
	return b.String()
}

// FormatSize is PyTorch's format_size: bytes up to 1 KiB, then KiB, MiB and
// GiB with two decimals (the bounds are inclusive, so 1 MiB prints as
// "1024.00 KiB").
func FormatSize(n int64) string {
	u := uint64(n) // size_t in PyTorch
	switch {
	case u <= KiB:
		return strconv.FormatUint(u, 10) + " bytes"
	case u <= MiB:
		return strconv.FormatFloat(float64(u)/KiB, 'f', 2, 64) + " KiB"
	case u <= GiB:
		return strconv.FormatFloat(float64(u)/MiB, 'f', 2, 64) + " MiB"
	}
	return strconv.FormatFloat(float64(u)/GiB, 'f', 2, 64) + " GiB"
}
