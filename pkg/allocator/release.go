package allocator

import (
	"errors"
	"fmt"
	"math"

	"github.com/memstat/memstat/pkg/snapshot"
)

// InternalAssertError is returned where the simulated PyTorch version would
// stop with "INTERNAL ASSERT FAILED": before 2.5, garbage collection and
// release_available_cached_blocks could reach a block of an expandable
// segment and assert that it was not one (PR #134338 fixed this). The
// allocator's state is left as it was just before the assert.
type InternalAssertError struct {
	Condition string
}

func (e *InternalAssertError) Error() string {
	return fmt.Sprintf("%s INTERNAL ASSERT FAILED (simulated PyTorch allocator)", e.Condition)
}

// expandableAssert is the assert an expandable block trips in
// release_block before 2.5.
func expandableAssert() error {
	return &InternalAssertError{Condition: "!block->expandable_segment_"}
}

// EmptyCache is torch.cuda.empty_cache(): wait for every outstanding event,
// then return every fully free segment (and every free page of expandable
// segments) of the default pools and of the freeable private pools to the
// device. A private pool still used by a graph or MemPool keeps its
// segments.
func (a *Allocator) EmptyCache(stack snapshot.StackID) {
	a.releaseCachedBlocks(a.context(ContextAll, stack))
}

// releaseCachedBlocks is release_cached_blocks: synchronize, then release
// the large pool, then the small pool, then the freeable private pools
// (2.9: the default pools only when no capture is underway).
func (a *Allocator) releaseCachedBlocks(ctx snapshot.StackID) {
	if len(a.captures) == 0 || !a.v.CapturesGuardEmptyCache() {
		a.synchronizeAndFreeEvents(ctx)
		a.releaseBlocks(&a.large, ctx)
		a.releaseBlocks(&a.small, ctx)
	}
	a.releaseFreeablePools(ctx)
}

// releaseBlocks walks the pool in (stream, size, address) order: whole free
// cudaMalloc'd segments are freed during the walk, free expandable blocks
// are unmapped after it (in the same order).
func (a *Allocator) releaseBlocks(pool *blockPool, ctx snapshot.StackID) {
	var toUnmap []*block
	for _, b := range pool.blocks.blocks() {
		switch {
		case b.expandable():
			toUnmap = append(toUnmap, b)
		case !b.isSplit():
			a.releaseBlock(b, ctx)
		}
	}
	for _, b := range toUnmap {
		a.unmapBlock(b, ctx)
		if b.prev == nil && b.next == nil {
			a.releaseReservation(b)
		}
	}
}

// releaseBlock is release_block: cudaFree a whole free segment.
func (a *Allocator) releaseBlock(b *block, ctx snapshot.StackID) {
	a.stats.NumDeviceFree++
	a.record(snapshot.ActionSegmentFree, b.addr, b.size, b.stream(), b.pool(), orStack(ctx, b.segStack))
	a.dev.obtained -= b.size
	pi := b.pool().statIndex()
	a.stats.Segment.decrease(pi, 1)
	a.stats.ReservedBytes.decrease(pi, b.size)
	a.noteReserved(b.pool(), -b.size, -1)
	if uint64(b.size) >= a.cfg.MaxSplitSize {
		a.stats.OversizeSegments.decrease(1)
	}
	b.pool().removeFree(b)
	a.regions.remove(b.region)
	a.recycle(b)
}

// ErrCudaFreeInvalid is the CUDA error PyTorch raises when
// release_available_cached_blocks hands release_block a free block that is
// part of a split segment: cudaFree of a pointer that is not a segment
// base fails with cudaErrorInvalidValue (C10_CUDA_CHECK).
var ErrCudaFreeInvalid = errors.New("CUDA error: invalid argument (cudaFree of a block inside a segment: max_split_size_mb was lowered at runtime below a split block's size)")

// releaseOversizeBlock is release_block as release_available_cached_blocks
// calls it. Oversize blocks are never split, unless max_split_size_mb was
// lowered at runtime (_set_allocator_settings) after a larger block was
// split: then PyTorch (every release 2.0-2.10) counts num_device_free,
// records segment_free and fails in cudaFree, leaving the block cached.
// The simulator does the same and returns ErrCudaFreeInvalid; the state
// stays consistent. docs/versions.md, "Decisions".
func (a *Allocator) releaseOversizeBlock(b *block, ctx snapshot.StackID) error {
	if b.isSplit() {
		a.stats.NumDeviceFree++
		a.record(snapshot.ActionSegmentFree, b.addr, b.size, b.stream(), b.pool(), orStack(ctx, b.segStack))
		return ErrCudaFreeInvalid
	}
	a.releaseBlock(b, ctx)
	return nil
}

// releaseAvailableCachedBlocks is release_available_cached_blocks, the
// first fallback after a failed cudaMalloc when max_split_size is set: free
// the smallest oversize block that is large enough, or else oversize blocks
// from the largest down until enough was freed. Blocks freed by a walk that
// does not free enough stay freed.
func (a *Allocator) releaseAvailableCachedBlocks(p *allocParams, ctx snapshot.StackID) (bool, error) {
	maxSplit := a.cfg.MaxSplitSize
	if maxSplit == NoMaxSplit {
		return false, nil
	}
	pool := p.pool
	need := max(uint64(p.size), maxSplit)
	// No block is 2^63 bytes or more, so clamping the search key keeps the
	// lower bound where size_t arithmetic would put it.
	key := freeKey{stream: p.stream, size: int64(min(need, math.MaxInt64))}
	skipExpandable := a.v.skipsExpandableInRelease()
	it, ok := pool.blocks.lowerBound(key)
	if ok && it.k.stream == p.stream && !(skipExpandable && it.b.expandable()) {
		if it.b.expandable() {
			return false, expandableAssert()
		}
		if err := a.releaseOversizeBlock(it.b, ctx); err != nil {
			return false, err
		}
		return true, nil
	}
	prev, ok := pool.blocks.before(key)
	if !ok {
		return false, nil
	}
	released := uint64(0)
	for cur := prev.b; released < need && uint64(cur.size) >= maxSplit && cur.stream() == p.stream; {
		next, more := pool.blocks.before(cur.key())
		if cur.expandable() {
			if !skipExpandable {
				return false, expandableAssert()
			}
		} else {
			released += uint64(cur.size)
			if err := a.releaseOversizeBlock(cur, ctx); err != nil {
				return false, err
			}
		}
		if !more {
			break
		}
		cur = next.b
	}
	return released >= need, nil
}

// garbageCollect is garbage_collect_cached_blocks: once reserved memory is
// above the threshold fraction of the allowed maximum, free whole cached
// large-pool segments whose age is at least the average, pass after pass,
// until enough was reclaimed. It does not synchronize streams.
func (a *Allocator) garbageCollect(ctx snapshot.StackID) error {
	threshold := int64(a.cfg.GarbageCollectionThreshold * float64(a.allowedMax))
	if a.dev.obtained <= threshold {
		return nil
	}
	target := a.dev.obtained - threshold
	pool := &a.large
	age := func(b *block) uint64 { return uint64(pool.freeCalls - b.gcCountBase) }
	var totalAge uint64
	count := 0
	pool.blocks.ascend(func(it freeItem) bool {
		if !it.b.isSplit() {
			totalAge += age(it.b)
			count++
		}
		return true
	})
	if count == 0 {
		return nil
	}
	skipExpandable := a.v.skipsExpandableInRelease()
	reclaimed := int64(0)
	for freed := true; reclaimed < target && freed && count > 0; {
		// Every release averages in floating point (2.0-2.3: a double
		// total_age; 2.4+: static_cast<double>(total_age) / count), so a
		// block of the average age or older goes. docs/versions.md, "GC".
		avg := float64(totalAge) / float64(count)
		freed = false
		// The pass does not stop when the target is reached: freeing
		// generously keeps GC from running again right away.
		for _, b := range pool.blocks.blocks() {
			if b.isSplit() || (skipExpandable && b.expandable()) || float64(age(b)) < avg {
				continue
			}
			if b.expandable() {
				return expandableAssert()
			}
			freed = true
			reclaimed += b.size
			totalAge -= age(b)
			count--
			a.releaseBlock(b, ctx)
		}
	}
	return nil
}

// outOfMemory records the failure (trace entry, num_ooms) and builds the
// error PyTorch raises.
func (a *Allocator) outOfMemory(p *allocParams, orig int64, ctx snapshot.StackID) error {
	free, total := a.dev.MemGetInfo()
	a.record(snapshot.ActionOOM, uint64(free), p.size, p.stream, p.pool, ctx)
	a.stats.NumOOMs++
	return &OOMError{
		Version:       a.v,
		Device:        a.dev.index,
		RequestedSize: orig,
		AllocSize:     p.allocSize,
		DeviceTotal:   total,
		DeviceFree:    free,
		Allocated:     a.stats.AllocatedBytes[PoolAll].Current,
		Reserved:      a.stats.ReservedBytes[PoolAll].Current,
		FractionSet:   a.fractionSet,
		AllowedMax:    a.allowedMax,
		PrivatePools:  a.privatePoolFree(),
	}
}
