package allocator

import "math/bits"

// The allocator's size constants (allocator model §1).
const (
	KiB = 1024
	MiB = 1024 * KiB
	GiB = 1024 * MiB

	// MinBlockSize (kMinBlockSize): every block size is a multiple of it.
	MinBlockSize = 512
	// SmallSize (kSmallSize): rounded sizes up to 1 MiB use the small pool;
	// a large block is split only if more than this would remain.
	SmallSize = 1 * MiB
	// SmallBuffer (kSmallBuffer): the segment size of every small-pool
	// cudaMalloc and the page of small-pool expandable segments.
	SmallBuffer = 2 * MiB
	// MinLargeAlloc (kMinLargeAlloc): large requests below it get a
	// LargeBuffer segment.
	MinLargeAlloc = 10 * MiB
	// LargeBuffer (kLargeBuffer): segment size for 1-10 MiB requests, page of
	// large-pool expandable segments, default oversize tolerance.
	LargeBuffer = 20 * MiB
	// RoundLarge (kRoundLarge): requests of 10 MiB and more are cudaMalloc'd
	// rounded up to a multiple of it.
	RoundLarge = 2 * MiB
	// RoundupIntervals is the length of the roundup_power2_divisions table;
	// entry i covers requests in [2^i MiB, 2^(i+1) MiB).
	RoundupIntervals = 16

	// OneEiB is the allocate() guard: requests this large fail before the
	// allocator is consulted.
	OneEiB = 1 << 60
)

// roundSize is round_size: the block size a request of n bytes needs under
// the given divisions table. Requests below 512 bytes take 512; otherwise n
// is rounded up to a multiple of 512, or, when the table's entry for n asks
// for power-of-two divisions, to the next division of n's power-of-two
// interval.
func roundSize(n int64, divisions *[RoundupIntervals]int64, v Version) int64 {
	if n < MinBlockSize {
		return MinBlockSize
	}
	d := divisions[divisionIndex(n)]
	if v.roundsUnitDivisionsRaw() {
		// 2.0-2.3: the guard was divisions > 0, and the helper returned the
		// size untouched for a single division, so an entry of 1 meant "do
		// not round at all" and produced sizes that are not multiples of 512.
		if d > 0 && n > MinBlockSize*d {
			if d <= 1 {
				return n
			}
			return roundupPow2Division(n, d)
		}
	} else if d > 1 && n > MinBlockSize*d {
		return roundupPow2Division(n, d)
	}
	return (n + MinBlockSize - 1) / MinBlockSize * MinBlockSize
}

// divisionIndex maps a request to its roundup_power2_divisions entry:
// floor(log2(n)) - 20, clamped to [0, 15].
func divisionIndex(n int64) int {
	i := bits.Len64(uint64(n)) - 1 - 20
	if i < 0 {
		return 0
	}
	if i >= RoundupIntervals {
		return RoundupIntervals - 1
	}
	return i
}

// roundupPow2Division rounds n up to the next of d equal steps between the
// powers of two around it (d is a power of two >= 2).
func roundupPow2Division(n, d int64) int64 {
	u := uint64(n)
	if u&(u-1) == 0 {
		return n
	}
	floor := uint64(1) << (bits.Len64(u) - 1)
	step := floor >> (bits.Len64(uint64(d)) - 1)
	if step == 0 {
		return int64(floor << 1)
	}
	lo := u &^ (step - 1)
	if lo == u {
		return n
	}
	return int64(lo + step)
}

// AllocationSize is get_allocation_size: how much a cache miss for a block
// of the given (rounded) size asks cudaMalloc for.
func AllocationSize(size int64) int64 {
	switch {
	case size <= SmallSize:
		return SmallBuffer
	case size < MinLargeAlloc:
		return LargeBuffer
	}
	return (size + RoundLarge - 1) / RoundLarge * RoundLarge
}
