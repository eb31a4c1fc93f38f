package allocator

import (
	"sort"
	"strconv"
)

// Stat is one of PyTorch's statistics: the current value, its peak since
// the last ResetPeakStats, and the totals added and removed since the last
// ResetAccumulatedStats.
type Stat struct {
	Current   int64
	Peak      int64
	Allocated int64
	Freed     int64
}

func (s *Stat) increase(x int64) {
	s.Current += x
	if s.Current > s.Peak {
		s.Peak = s.Current
	}
	s.Allocated += x
}

func (s *Stat) decrease(x int64) {
	s.Current -= x
	s.Freed += x
}

// Indexes of a StatArray, as PyTorch's StatType.
const (
	PoolAll   = 0 // "all": aggregate of both pools
	PoolSmall = 1 // "small_pool"
	PoolLarge = 2 // "large_pool"
)

// StatArray holds a statistic for all pools and for each pool kind; every
// update goes to PoolAll and to the block's own pool.
type StatArray [3]Stat

func (a *StatArray) increase(pool int, x int64) {
	a[PoolAll].increase(x)
	a[pool].increase(x)
}

func (a *StatArray) decrease(pool int, x int64) {
	a[PoolAll].decrease(x)
	a[pool].decrease(x)
}

// Stats is the allocator's DeviceStats, the figures behind
// torch.cuda.memory_stats(). The field comments give the flat key prefix.
type Stats struct {
	Allocation         StatArray // "allocation": blocks handed out
	Segment            StatArray // "segment": cudaMalloc'd segments
	Active             StatArray // "active": allocated or awaiting events
	InactiveSplit      StatArray // "inactive_split": free blocks of split segments
	AllocatedBytes     StatArray // "allocated_bytes"
	ReservedBytes      StatArray // "reserved_bytes": obtained from the device
	ActiveBytes        StatArray // "active_bytes"
	InactiveSplitBytes StatArray // "inactive_split_bytes"
	RequestedBytes     StatArray // "requested_bytes": unrounded request sizes

	OversizeAllocations Stat // "oversize_allocations": blocks >= max_split_size
	OversizeSegments    Stat // "oversize_segments": segments >= max_split_size

	NumAllocRetries   int64 // "num_alloc_retries"
	NumOOMs           int64 // "num_ooms"
	NumSyncAllStreams int64 // "num_sync_all_streams" (2.3+)
	NumDeviceAlloc    int64 // "num_device_alloc" (2.3+)
	NumDeviceFree     int64 // "num_device_free" (2.3+)
	// MaxSplitSize is the configured max_split_size when the allocator was
	// created, -1 when unlimited. Like PyTorch it is not refreshed when the
	// settings change at runtime.
	MaxSplitSize int64
}

func (s *Stats) arrays() []*StatArray {
	return []*StatArray{&s.Allocation, &s.Segment, &s.Active, &s.InactiveSplit,
		&s.AllocatedBytes, &s.ReservedBytes, &s.ActiveBytes, &s.InactiveSplitBytes, &s.RequestedBytes}
}

func (s *Stats) resetPeak() {
	for _, a := range s.arrays() {
		for i := range a {
			a[i].Peak = a[i].Current
		}
	}
	s.OversizeAllocations.Peak = s.OversizeAllocations.Current
	s.OversizeSegments.Peak = s.OversizeSegments.Current
}

func (s *Stats) resetAccumulated() {
	for _, a := range s.arrays() {
		for i := range a {
			a[i].Allocated, a[i].Freed = 0, 0
		}
	}
	s.OversizeAllocations.Allocated, s.OversizeAllocations.Freed = 0, 0
	s.OversizeSegments.Allocated, s.OversizeSegments.Freed = 0, 0
	s.NumAllocRetries, s.NumOOMs = 0, 0
	s.NumSyncAllStreams, s.NumDeviceAlloc, s.NumDeviceFree = 0, 0, 0
}

// KeyValue is one entry of memory_stats().
type KeyValue struct {
	Key   string
	Value int64
}

// MemoryStats flattens s the way torch.cuda.memory_stats() does: nested
// names joined with ".", sorted by plain string comparison. The 2.3 counters
// exist only from 2.3 on, so earlier versions have 119 keys instead of 122.
func (s *Stats) MemoryStats(v Version) []KeyValue {
	out := make([]KeyValue, 0, 122)
	stat := func(prefix string, st *Stat) {
		out = append(out,
			KeyValue{prefix + ".allocated", st.Allocated},
			KeyValue{prefix + ".current", st.Current},
			KeyValue{prefix + ".freed", st.Freed},
			KeyValue{prefix + ".peak", st.Peak})
	}
	arrays := []struct {
		name string
		a    *StatArray
	}{
		{"allocation", &s.Allocation}, {"segment", &s.Segment}, {"active", &s.Active},
		{"inactive_split", &s.InactiveSplit}, {"allocated_bytes", &s.AllocatedBytes},
		{"reserved_bytes", &s.ReservedBytes}, {"active_bytes", &s.ActiveBytes},
		{"inactive_split_bytes", &s.InactiveSplitBytes}, {"requested_bytes", &s.RequestedBytes},
	}
	for _, a := range arrays {
		stat(a.name+".all", &a.a[PoolAll])
		stat(a.name+".small_pool", &a.a[PoolSmall])
		stat(a.name+".large_pool", &a.a[PoolLarge])
	}
	stat("oversize_allocations", &s.OversizeAllocations)
	stat("oversize_segments", &s.OversizeSegments)
	out = append(out,
		KeyValue{"num_alloc_retries", s.NumAllocRetries},
		KeyValue{"num_ooms", s.NumOOMs},
		KeyValue{"max_split_size", s.MaxSplitSize})
	if v.HasDeviceCounters() {
		out = append(out,
			KeyValue{"num_sync_all_streams", s.NumSyncAllStreams},
			KeyValue{"num_device_alloc", s.NumDeviceAlloc},
			KeyValue{"num_device_free", s.NumDeviceFree})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// String renders one entry as "key: value", handy in test failures.
func (kv KeyValue) String() string { return kv.Key + ": " + strconv.FormatInt(kv.Value, 10) }
