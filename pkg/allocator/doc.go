// Package allocator simulates PyTorch's CUDA caching allocator (the native
// DeviceCachingAllocator of c10/cuda/CUDACachingAllocator.cpp) on a
// simulated device, without CUDA, Python or torch.
//
// It follows the allocator decision for decision, as described in the
// project's allocator model (docs/allocator-model.md): round_size with
// roundup_power2_divisions, small and large pools, 2 MiB / 20 MiB /
// 2 MiB-rounded segments, per-stream best fit ordered by (stream, size,
// address), the max_split_size oversize rules, splitting that hands out the
// front of a block, merging on free, record_stream and deferred frees,
// expandable segments, garbage collection, the out-of-memory fallbacks,
// empty_cache, every memory_stats counter, the OOM message, the trace
// recorder and the snapshot. Exact block placement matters because a
// simulation is only useful if it predicts where PyTorch puts memory: the
// simulator reproduces recorded PyTorch traces placement for placement.
//
// Behaviour that changed between releases is selected by Version (2.0 to
// 2.10, newest by default); a Config carries its Version because both the
// PYTORCH_CUDA_ALLOC_CONF grammar and the decisions depend on it.
//
// Typical use:
//
//	cfg, err := allocator.ParseConfig("expandable_segments:True", allocator.Latest)
//	a, err := allocator.New(cfg, allocator.Options{Capacity: 80 << 30})
//	addr, err := a.Malloc(4096, stream, stack)
//	err = a.Free(addr, stack)
//	stats := a.MemoryStats()
//
// Memory is identified by address, as PyTorch identifies storages by data
// pointer. An Allocator keeps no global state and is not safe for
// concurrent use; run independent Allocators in parallel instead.
//
// The simulator is a pure model: following a recording (rebuilding the
// start state, replaying a trace, comparing with the final segments,
// bounding what the recording does not determine) is pkg/replay's job. What
// such a driver needs of the simulator is exported here and nowhere used by
// the decision path: dictated segment addresses (Options.SegmentAddress),
// a starting state (SeedSegment, SeedReservation), placements forced where
// the simulation diverges from a recording (the Force* methods,
// FreeDeferred, CompletePendingFree), trial runs (Clone, PredictMalloc) and
// read-only views of the state (follow.go, clone.go).
//
// Private pools (CUDA-graph capture, torch.cuda.MemPool) are simulated in
// pools.go: BeginAllocateToPool / EndAllocateToPool / ReleasePool, their
// own block sets, empty_cache's freeable pools, and per-pool figures
// (PoolUsages, PrivatePoolStats). The captured graph's topology is not
// (graph_capture_record_stream_reuse assumes joined streams).
//
// Not simulated: the cudaMallocAsync backend, IPC,
// NVML process information in OOM messages, and the timing effects of
// release_lock_on_cudamalloc.
package allocator
