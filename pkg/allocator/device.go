package allocator

import (
	"fmt"

	"github.com/memstat/memstat/pkg/snapshot"
)

// DefaultBaseAddress is where the default address policy places the first
// segment: a typical CUDA device-pointer value.
const DefaultBaseAddress uint64 = 0x7f0000000000

// DefaultTotalMemory is the totalGlobalMem assumed for a device of
// unlimited capacity (80 GiB, an A100/H100-class GPU).
const DefaultTotalMemory = 80 * GiB

// SegmentRequest describes a new range of device addresses the allocator is
// about to create: a cudaMalloc'd segment, or (Expandable) the virtual
// address reservation of a new expandable segment.
type SegmentRequest struct {
	Size       int64
	Stream     int64
	Pool       snapshot.Pool
	Expandable bool
}

// Device is the simulated GPU behind one allocator: its capacity, the bytes
// currently obtained from it (cudaMalloc'd segments plus mapped pages) and
// the policy that places new segments.
//
// The default placement is a bump allocator: 2 MiB-aligned, increasing,
// never reusing an address. Real CUDA returns addresses in no particular
// order and does reuse them, and because best fit breaks ties by lowest
// address, a replay of a recorded trace must take segment addresses from
// the trace; Options.SegmentAddress lets a driver dictate them.
type Device struct {
	index       int
	capacity    int64 // 0 = unlimited
	totalMemory int64
	obtained    int64
	next        uint64
	place       func(SegmentRequest) (uint64, bool)
}

func newDevice(o *Options) *Device {
	d := &Device{
		index:       o.Device,
		capacity:    o.Capacity,
		totalMemory: o.TotalMemory,
		next:        o.BaseAddress,
		place:       o.SegmentAddress,
	}
	if d.totalMemory == 0 {
		d.totalMemory = d.capacity
		if d.totalMemory == 0 {
			d.totalMemory = DefaultTotalMemory
		}
	}
	if d.next == 0 {
		d.next = DefaultBaseAddress
	}
	return d
}

// Index is the device ordinal reported in snapshots and OOM messages.
func (d *Device) Index() int { return d.index }

// Capacity is the physical memory the allocator may obtain; 0 = unlimited.
func (d *Device) Capacity() int64 { return d.capacity }

// TotalMemory is cudaDeviceProp.totalGlobalMem: it sizes the address
// reservations of expandable segments.
func (d *Device) TotalMemory() int64 { return d.totalMemory }

// Obtained is the memory currently taken from the device.
func (d *Device) Obtained() int64 { return d.obtained }

// MemGetInfo is cudaMemGetInfo: (free, total). Without a capacity limit
// the total is TotalMemory.
func (d *Device) MemGetInfo() (free, total int64) {
	total = d.capacity
	if total == 0 {
		total = d.totalMemory
	}
	return max(total-d.obtained, 0), total
}

// fits reports whether n more bytes can be obtained.
func (d *Device) fits(n int64) bool {
	return d.capacity == 0 || d.obtained+n <= d.capacity
}

// reservationSize is the VA an expandable segment reserves.
func (d *Device) reservationSize(page int64) int64 { return ReservationSize(d.totalMemory, page) }

// ReservationSize is the VA an expandable segment reserves on a device of
// totalMemory bytes: 1 1/8 of it, rounded up to whole pages. A replay
// needs it before it has a device, to rebuild the reservations a recording
// started with.
func ReservationSize(totalMemory, page int64) int64 {
	t := totalMemory + totalMemory/8
	return (t + page - 1) / page * page
}

// placeAt returns the address for a new range, from the driver's policy if
// it has one for this request (dictated), else from the bump allocator. The
// address must be 512-aligned and must not overlap a live range.
func (d *Device) placeAt(req SegmentRequest, live *regions) (addr uint64, dictated bool, err error) {
	if d.place != nil {
		if addr, ok := d.place(req); ok {
			if addr%MinBlockSize != 0 || addr == 0 {
				return 0, false, fmt.Errorf("allocator: dictated segment address %#x is not 512-byte aligned", addr)
			}
			if live.overlapping(addr, req.Size) != nil {
				return 0, false, fmt.Errorf("allocator: dictated segment address %#x (+%d) overlaps a live segment", addr, req.Size)
			}
			return addr, true, nil
		}
	}
	const align = SmallBuffer
	next := d.next
	if n := len(live.list); n > 0 {
		// Above every live range: the driver hands out rising addresses,
		// and in a replay the live ranges were placed where the
		// recording put them, not by this allocator.
		next = max(next, live.bounds[n-1].end)
	}
	addr = (next + align - 1) / align * align
	for r := live.overlapping(addr, req.Size); r != nil; r = live.overlapping(addr, req.Size) {
		// Only dictated addresses can be in the way; step past them.
		addr = (r.end() + align - 1) / align * align
	}
	d.next = addr + uint64(req.Size)
	return addr, false, nil
}
