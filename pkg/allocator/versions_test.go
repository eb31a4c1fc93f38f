package allocator

import (
	"errors"
	"slices"
	"testing"

	"github.com/memstat/memstat/pkg/snapshot"
)

// Tests that pin a behaviour of one PyTorch release to the function of
// c10/cuda/CUDACachingAllocator.cpp (or its Python side) that has it; each
// names the release and the function. docs/versions.md has the table.

// TestGCAverageAgeIsFloatingPoint: garbage_collect_cached_blocks in every
// release from 2.0 (v2.0.0: `double total_age = 0.0; ... double
// age_threshold = total_age / freeable_block_count;`) to 2.6 and later
// (`size_t total_age`, then `static_cast<double>(total_age) /
// freeable_block_count`) averages the ages in floating point. Ages 2 and 1
// average 1.5, so only the older block is freed and the pass stops at its
// target; an integer average (1) would free both segments.
func TestGCAverageAgeIsFloatingPoint(t *testing.T) {
	for _, v := range []Version{V2_0, V2_1, V2_2, V2_3, V2_4, V2_6, Latest} {
		s := newSim(t, "garbage_collection_threshold:0.5", v, Options{Capacity: 1000 * mib})
		if err := s.SetMemoryFraction(0.5); err != nil { // allowed 500 MiB, GC above 250 MiB
			t.Fatal(err)
		}
		a := s.alloc(100*mib, s0)
		s.free(a)
		b := s.alloc(200*mib, s0)
		s.free(b) // ages at the next search: a 2, b 1
		before := len(s.Trace())
		s.alloc(250*mib, s0) // 300 MiB cached, target 50 MiB
		if got, want := traceString(s.Trace()[before:], base),
			"segment_free(+0,104857600) segment_alloc(+314572800,262144000) alloc(+314572800,262144000)"; got != want {
			t.Errorf("%s: trace after GC:\n got %s\nwant %s", v, got, want)
		}
		if st := s.Stats(); st.NumDeviceFree != 1 && v.HasDeviceCounters() {
			t.Errorf("%s: num_device_free %d, want 1", v, st.NumDeviceFree)
		}
	}
}

// TestOOMMessagePerRelease: the text DeviceCachingAllocator::malloc raises
// when the last retry fails, release by release, with a memory fraction
// set (allowed_info) and memory cached in private pools
// (allocated_in_private_pools). 2.0 prints "allowed" in its parenthesis;
// 2.1 (PR #99699) to 2.4 compute allowed_info but never print it; 2.4
// adds the private-pool clause (PR #124673, April 2024, before the 2.4
// branch cut); 2.5 prints allowed_info again after the process lines (PR
// #129546, merged 2024-06-29, after the 2.4 branch cut), as v2.6.0's
// DeviceCachingAllocator::malloc does.
func TestOOMMessagePerRelease(t *testing.T) {
	const (
		head21   = "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacty of 1000.00 MiB of which 890.00 MiB is free. "
		head     = "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 1000.00 MiB of which 890.00 MiB is free. "
		noPools  = "Of the allocated memory 110.00 MiB is allocated by PyTorch, and 15.00 MiB is reserved by PyTorch but unallocated."
		pools24  = "Of the allocated memory 118.00 MiB is allocated by PyTorch, with 8.00 MiB allocated in private pools (e.g., CUDA Graphs), and 7.00 MiB is reserved by PyTorch but unallocated."
		pools    = "125.00 MiB allowed; Of the allocated memory 118.00 MiB is allocated by PyTorch, with 8.00 MiB allocated in private pools (e.g., CUDA Graphs), and 7.00 MiB is reserved by PyTorch but unallocated."
		splitTip = " If reserved but unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
		expTip   = " If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
		expTip10 = " If reserved but unallocated memory is large try setting PYTORCH_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
	)
	for _, tc := range []struct {
		v          Version
		want, name string
	}{
		{V2_0, "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 1000.00 MiB total capacity; 110.00 MiB already allocated; 890.00 MiB free; 125.00 MiB allowed; 125.00 MiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF", "torch.cuda.OutOfMemoryError"},
		{V2_1, head21 + noPools + splitTip, "torch.cuda.OutOfMemoryError"},
		{V2_2, head + noPools + expTip, "torch.cuda.OutOfMemoryError"},
		{V2_3, head + noPools + expTip, "torch.cuda.OutOfMemoryError"},
		{V2_4, head + pools24 + expTip, "torch.OutOfMemoryError"},
		{V2_5, head + pools + expTip, "torch.OutOfMemoryError"},
		{V2_6, head + pools + expTip, "torch.OutOfMemoryError"},
		{V2_9, head + pools + expTip, "torch.OutOfMemoryError"},
		{V2_10, head + pools + expTip10, "torch.OutOfMemoryError"},
	} {
		e := &OOMError{Version: tc.v, AllocSize: 20 * mib, DeviceTotal: 1000 * mib, DeviceFree: 890 * mib,
			Allocated: 110 * mib, Reserved: 125 * mib, PrivatePools: 8 * mib, FractionSet: true, AllowedMax: 125 * mib}
		if tc.v < V2_4 {
			e.PrivatePools = 0 // no private-pool clause before 2.4: the figure is not part of the text
		}
		if got := e.Error(); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.v, got, tc.want)
		}
		if got := e.ExceptionName(); got != tc.name {
			t.Errorf("%s: raised as %s, want %s", tc.v, got, tc.name)
		}
	}
}

// TestRingBufferResize: a second _record_memory_history(max_entries=2)
// after five entries calls RingBuffer::setMaxEntries, which only changes
// the bound (v2.6.0, DeviceCachingAllocator::recordHistory). insertEntries
// then overwrites slots 0 and 1 and wraps at 2, so slots 2-4 keep entries
// 3-5 for good, and getEntries lists slots from alloc_trace_next to the end,
// then the start: after entries 6, 7, 8 the buffer is [8 7 3 4 5], next 1,
// and the trace reads 7 3 4 5 8.
func TestRingBufferResize(t *testing.T) {
	var r ring
	r.setMax(5)
	for i := int64(1); i <= 5; i++ {
		r.insert(snapshot.TraceEntry{Size: i})
	}
	r.setMax(2)
	for i := int64(6); i <= 8; i++ {
		r.insert(snapshot.TraceEntry{Size: i})
	}
	var got []int64
	for _, e := range r.entries() {
		got = append(got, e.Size)
	}
	if want := []int64{7, 3, 4, 5, 8}; !slices.Equal(got, want) {
		t.Errorf("trace sizes %v, want %v", got, want)
	}
}

// TestLoweredMaxSplitSizeReleaseFails: a 100 MiB segment split for 30 MiB
// leaves a 70 MiB free split block; _set_allocator_settings lowers
// max_split_size_mb to 40; a 200 MiB request that cudaMalloc cannot satisfy
// makes release_available_cached_blocks pick the 70 MiB block (oversize
// now) and release_block records segment_free, then cudaFree fails on a
// pointer inside the segment (every release 2.0-2.10). The simulator
// raises that error and keeps the segment, live block included.
func TestLoweredMaxSplitSizeReleaseFails(t *testing.T) {
	for _, v := range []Version{V2_0, V2_5, Latest} {
		s := newSim(t, "", v, Options{Capacity: 250 * mib})
		a := s.alloc(100*mib, s0)
		s.free(a)
		s.alloc(30*mib, s0) // splits the cached 100 MiB segment
		if err := s.SetAllocatorSettings("max_split_size_mb:40"); err != nil {
			t.Fatal(err)
		}
		before := len(s.Trace())
		_, err := s.Malloc(200*mib, s0, snapshot.NoStack)
		if !errors.Is(err, ErrCudaFreeInvalid) {
			t.Fatalf("%s: Malloc error %v, want the CUDA error", v, err)
		}
		// (The full invariant check recounts oversize_segments under the
		// new bound, which PyTorch's counter does not do either.)
		if got, want := traceString(s.Trace()[before:], base), "segment_free(+31457280,73400320)"; got != want {
			t.Errorf("%s: trace %s, want %s", v, got, want)
		}
		segs := s.Segments()
		if len(segs) != 1 || segs[0].TotalSize != 100*mib || len(segs[0].Blocks) != 2 ||
			segs[0].Blocks[0].Size != 30*mib || !segs[0].Blocks[0].State.Active() || segs[0].Blocks[1].Size != 70*mib {
			t.Errorf("%s: segments %+v, want the 100 MiB segment with its live 30 MiB block kept", v, segs)
		}
	}
}

// TestHistoryChain20: PyTorch 2.0 keeps a block's allocations in a
// HistoryChain (2.0's CUDACachingAllocator.cpp). alloc_found_block trims
// the chain's leading entries before the end of the handed-out part
// (trimHistoryBefore) and pushes the allocation; a block split off the
// front starts empty, and the rest drops the entries before its new start;
// try_merge_blocks joins the chains lowest address first. So two freed
// neighbours leave one free block listing both allocations (as the 2.0
// real file's merged inactive blocks do), and a new allocation at its
// front leaves the rest with the upper one. From 2.1 there is no chain.
func TestHistoryChain20(t *testing.T) {
	type item = snapshot.HistoryItem
	s := newSim(t, "", V2_0, Options{})
	a := s.alloc(512, s0)
	b := s.alloc(1024, s0)
	s.free(a)
	s.free(b)
	key := func(addr uint64) snapshot.HistoryKey { return snapshot.HistoryKey{Address: addr} }
	h := s.Snapshot().History
	if got, want := h[key(a)], []item{{Addr: a, RealSize: 512}, {Addr: b, RealSize: 1024}}; !slices.Equal(got, want) {
		t.Errorf("merged free block: history %v, want %v", got, want)
	}
	c := s.alloc(512, s0)
	h = s.Snapshot().History
	if c != a {
		t.Fatalf("third allocation at %#x, want the front %#x", c, a)
	}
	if got, want := h[key(c)], []item{{Addr: c, RealSize: 512}}; !slices.Equal(got, want) {
		t.Errorf("active block: history %v, want %v", got, want)
	}
	if got, want := h[key(a+512)], []item{{Addr: b, RealSize: 1024}}; !slices.Equal(got, want) {
		t.Errorf("rest after the split: history %v, want %v", got, want)
	}
	if len(h) != 2 {
		t.Errorf("%d blocks with a history, want 2: %v", len(h), h)
	}

	s21 := newSim(t, "", V2_1, Options{})
	s21.free(s21.alloc(512, s0))
	if h := s21.Snapshot().History; h != nil {
		t.Errorf("2.1 snapshot has history chains %v", h)
	}
}
