package report

import (
	"fmt"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/replay"
)

// PoolID renders a pool id as PyTorch prints a MempoolId_t: "(0, 1)".
func PoolID(id [2]int64) string { return fmt.Sprintf("(%d, %d)", id[0], id[1]) }

// poolKind is the kind column: "default", "graph", "MemPool", or what the
// id alone allows ("graph or MemPool").
func poolKind(u allocator.PoolUsage) string {
	switch {
	case u.ID == [2]int64{}:
		return "default"
	case u.Kind != allocator.PoolKindUnknown:
		return u.Kind.String()
	case allocator.KindOfPoolID(u.ID) == allocator.PoolKindGraph:
		return "graph"
	}
	return "graph or MemPool"
}

// PoolTable lists the pools of a replay's final state: the default pools,
// then each private pool (segments, reserved, allocated, largest free
// block). Nil when the replay saw no private pool.
func PoolTable(res *replay.Result) *Table {
	if !res.Pools.Any() {
		return nil
	}
	t := &Table{Columns: []Column{
		{Name: "Pool", Key: "pool_id"},
		{Name: "Kind", Key: "kind"},
		{Name: "Segments", Key: "segments", Align: Right},
		{Name: "Reserved", Key: "reserved_bytes", Align: Right},
		{Name: "Allocated", Key: "allocated_bytes", Align: Right},
		{Name: "Largest free", Key: "largest_free_block", Align: Right},
	}}
	for _, u := range res.Pools.Final {
		t.Add(Str(PoolID(u.ID)), Str(poolKind(u)), Int(int64(u.Segments)), Bytes(u.Reserved), Bytes(u.Allocated), Bytes(u.LargestFree))
	}
	return t
}

// PoolLine says in one sentence what the private pools held: now, at
// their peak, and what the peak is worth where the trace leaves some
// segments' pool open (a bound, explained in the notes: BoundNotes).
// Empty without private pools.
func PoolLine(res *replay.Result) string {
	p := &res.Pools
	if !p.Any() {
		return ""
	}
	n := len(p.Final) - 1
	s := fmt.Sprintf("private pools (CUDA graphs, MemPool): %d now, %s reserved and %s allocated in them; ",
		n, Size(p.Reserved.Current), Size(p.Allocated.Current))
	if b, ok := res.Bounds[replay.PrivatePoolReserved]; ok {
		return s + "peak " + b.Format(Size) + " reserved (a bound: see the notes)"
	}
	return s + "peak " + Size(p.Reserved.Peak) + " reserved"
}

// PoolJSON is the per-pool part of a device's JSON.
type PoolJSON struct {
	// The private pools' totals, now and at peak. A peak the trace does
	// not determine (it leaves some segments' pool open) is absent here
	// and given in the device's bounds, as private_pool_reserved and
	// private_pool_allocated; the current figures are always exact.
	ReservedCurrent  int64          `json:"reserved_bytes_current"`
	ReservedPeak     *int64         `json:"reserved_bytes_peak,omitempty"`
	AllocatedCurrent int64          `json:"allocated_bytes_current"`
	AllocatedPeak    *int64         `json:"allocated_bytes_peak,omitempty"`
	Pools            []PoolJSONItem `json:"pools"`
}

// PoolJSONItem is one pool at the end.
type PoolJSONItem struct {
	ID          [2]int64 `json:"pool_id"`
	Kind        string   `json:"kind"`
	Segments    int      `json:"segments"`
	Reserved    int64    `json:"reserved_bytes"`
	Allocated   int64    `json:"allocated_bytes"`
	Active      int64    `json:"active_bytes"`
	LargestFree int64    `json:"largest_free_block"`
}

// PoolsJSON is the per-pool JSON of a replay; nil without private pools.
func PoolsJSON(res *replay.Result) *PoolJSON {
	p := &res.Pools
	if !p.Any() {
		return nil
	}
	out := &PoolJSON{ReservedCurrent: p.Reserved.Current, AllocatedCurrent: p.Allocated.Current, Pools: []PoolJSONItem{}}
	if _, ok := res.Bounds[replay.PrivatePoolReserved]; !ok {
		out.ReservedPeak = &p.Reserved.Peak
	}
	if _, ok := res.Bounds[replay.PrivatePoolAllocated]; !ok {
		out.AllocatedPeak = &p.Allocated.Peak
	}
	for _, u := range p.Final {
		out.Pools = append(out.Pools, PoolJSONItem{ID: u.ID, Kind: poolKind(u), Segments: u.Segments,
			Reserved: u.Reserved, Allocated: u.Allocated, Active: u.Active, LargestFree: u.LargestFree})
	}
	return out
}
