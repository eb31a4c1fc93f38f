package allocator

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/memstat/memstat/pkg/snapshot"
)

// realTraceDir holds snapshots recorded by real PyTorch runs (shared test
// data, not part of the repository). The test is skipped without it.
const realTraceDir = "/work/shared/testdata/real"

// TestRealTraces replays every recorded trace of the shared sample
// snapshots through the simulator and requires PyTorch's decisions exactly:
// every alloc at the recorded address, every segment_alloc / segment_free
// at the recorded address and size and in the recorded order, and the
// final segments and blocks of the snapshot.
//
// The replay follows the allocator model §16: allocs, frees and ooms are
// the inputs; segment addresses come from the trace (the simulator decides
// when to create a segment, the trace only where); a segment_free the
// simulator does not produce itself is a user empty_cache(); segments that
// existed before recording started are seeded from the final snapshot and
// from the addresses whose first event is a free.
func TestRealTraces(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(realTraceDir, "*"))
	if len(files) == 0 {
		t.Skip("no shared sample snapshots at " + realTraceDir)
	}
	replayed := 0
	for _, fn := range files {
		if filepath.Ext(fn) == ".tsv" {
			continue
		}
		snap, err := snapshot.Load(fn)
		if err != nil {
			continue // not every sample is readable by every reader version
		}
		tr := snap.Trace(0)
		if len(tr) < 5 {
			continue
		}
		t.Run(filepath.Base(fn), func(t *testing.T) { replayRecorded(t, snap) })
		replayed++
	}
	if replayed == 0 {
		t.Skip("no usable traces")
	}
}

func replayRecorded(t *testing.T, snap *snapshot.Snapshot) {
	real := snap.Trace(0)
	final := snap.DeviceSegments(0)
	for _, s := range final {
		if s.Expandable || !s.PoolID.IsDefault() {
			t.Skip("expandable or private-pool snapshot")
		}
	}
	// Capacity: device_free plus reserved memory at the first oom entry;
	// unlimited without one.
	var capacity, reserved int64
	created := map[uint64]bool{}
	first := map[uint64]snapshot.Action{}
	freedFirst := map[uint64]int64{}
	for _, e := range real {
		switch e.Action {
		case snapshot.ActionSegmentAlloc:
			reserved += e.Size
			created[e.Addr] = true
		case snapshot.ActionSegmentFree:
			reserved -= e.Size
		case snapshot.ActionOOM:
			if capacity == 0 {
				capacity = e.DeviceFree() + reserved
			}
		case snapshot.ActionAlloc, snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted, snapshot.ActionFree:
			if _, seen := first[e.Addr]; !seen {
				first[e.Addr] = e.Action
				if e.Action != snapshot.ActionAlloc {
					freedFirst[e.Addr] = e.Size
				}
			}
		}
	}

	var queue []uint64 // recorded segment_alloc addresses not yet used
	hook := func(SegmentRequest) (uint64, bool) {
		if len(queue) == 0 {
			return 0, false
		}
		addr := queue[0]
		queue = queue[1:]
		return addr, true
	}
	cfg := DefaultConfig(Latest)
	a, err := New(cfg, Options{Capacity: capacity, SegmentAddress: hook})
	if err != nil {
		t.Fatal(err)
	}

	seeded := map[uint64]bool{}
	for _, s := range final {
		if created[s.Address] {
			continue
		}
		seeded[s.Address] = true
		if err := a.SeedSegment(startingState(cfg, s, first, freedFirst)); err != nil {
			t.Fatalf("seeding %#x: %v", s.Address, err)
		}
	}
	if err := a.CheckInvariants(); err != nil {
		t.Fatalf("after seeding: %v", err)
	}

	// rc is the next recorded entry the simulator must produce.
	rc := 0
	skipSnapshots := func() {
		for rc < len(real) && real[rc].Action == snapshot.ActionSnapshot {
			rc++
		}
	}
	produced := func(i int) {
		t.Helper()
		for _, e := range a.Trace() {
			skipSnapshots()
			if rc >= len(real) {
				t.Fatalf("entry %d: simulator produced %s %#x %d past the end of the trace", i, e.Action, e.Addr, e.Size)
			}
			r := real[rc]
			if r.Action == snapshot.ActionFree {
				r.Action = snapshot.ActionFreeCompleted
			}
			if e.Action != r.Action || e.Addr != r.Addr || e.Size != r.Size {
				t.Fatalf("recorded entry %d is %s %#x %d, the simulator produced %s %#x %d",
					rc, r.Action, r.Addr, r.Size, e.Action, e.Addr, e.Size)
			}
			rc++
		}
		// Only this operation's entries are looked at next time.
		if err := a.RecordHistory(HistoryOptions{Enabled: HistoryAll, ClearHistory: true}); err != nil {
			t.Fatal(err)
		}
	}
	produced(-1)
	allocs := 0
	for i, e := range real {
		if i < rc {
			continue // already produced by the simulator
		}
		var err error
		switch e.Action {
		case snapshot.ActionSegmentAlloc:
			queue = append(queue, e.Addr)
			continue
		case snapshot.ActionSegmentFree:
			a.EmptyCache(0) // not explained by the simulator: a user empty_cache()
		case snapshot.ActionAlloc:
			_, err = a.Malloc(e.Size, e.Stream, 0)
			allocs++
		case snapshot.ActionFreeRequested:
			err = a.FreeDeferred(e.Addr, 0)
		case snapshot.ActionFreeCompleted:
			err = a.CompletePendingFree(e.Addr, 0)
		case snapshot.ActionFree:
			err = a.Free(e.Addr, 0)
		case snapshot.ActionOOM:
			if _, err = a.Malloc(e.Size, e.Stream, 0); errors.As(err, new(*OOMError)) {
				err = nil
			} else {
				t.Fatalf("entry %d: the recorded OOM did not happen (%v)", i, err)
			}
		default:
			continue
		}
		if err != nil {
			t.Fatalf("entry %d (%s %#x %d): %v", i, e.Action, e.Addr, e.Size, err)
		}
		produced(i)
		if i%500 == 0 {
			if err := a.CheckInvariants(); err != nil {
				t.Fatalf("entry %d: %v", i, err)
			}
		}
	}
	skipSnapshots()
	if rc != len(real) {
		t.Fatalf("the simulator produced entries up to %d of %d", rc, len(real))
	}
	if err := a.CheckInvariants(); err != nil {
		t.Fatal(err)
	}

	// Final state: same segments and blocks. Requested sizes of free blocks
	// in seeded segments are stale values from before the recording, which
	// the trace cannot tell. Some published files are cut-down fixtures
	// whose trace stops before the snapshot was taken: blocks still live in
	// the simulation but free in the snapshot are freed first.
	activeAtEnd := map[uint64]bool{}
	for _, s := range final {
		for _, b := range s.Blocks {
			if b.State.Active() {
				activeAtEnd[b.Address] = true
			}
		}
	}
	var stale []uint64
	a.Blocks(func(b BlockInfo) bool {
		if b.State == snapshot.ActiveAllocated && !activeAtEnd[b.Address] {
			stale = append(stale, b.Address)
		}
		return true
	})
	for _, addr := range stale {
		if err := a.Free(addr, 0); err != nil {
			t.Fatal(err)
		}
	}
	if len(stale) > 0 {
		t.Logf("trace ends before the snapshot: %d blocks freed to match it", len(stale))
	}
	sim := a.Segments()
	if len(sim) != len(final) {
		t.Fatalf("%d segments, recorded %d", len(sim), len(final))
	}
	for i, s := range sim {
		r := final[i]
		if s.Address != r.Address || s.TotalSize != r.TotalSize || len(s.Blocks) != len(r.Blocks) {
			t.Fatalf("segment %d: %#x %d (%d blocks), recorded %#x %d (%d blocks)",
				i, s.Address, s.TotalSize, len(s.Blocks), r.Address, r.TotalSize, len(r.Blocks))
		}
		for j, b := range s.Blocks {
			rb := r.Blocks[j]
			if b.Address != rb.Address || b.Size != rb.Size {
				t.Errorf("segment %#x block %d: %#x %d, recorded %#x %d", s.Address, j, b.Address, b.Size, rb.Address, rb.Size)
			}
			if b.State == rb.State && b.RequestedSize != rb.RequestedSize && !(seeded[s.Address] && !b.State.Active()) {
				t.Errorf("block %#x: requested %d, recorded %d", b.Address, b.RequestedSize, rb.RequestedSize)
			}
		}
	}
	t.Logf("%d allocs, %d entries reproduced, %d segments seeded", allocs, rc, len(seeded))
}

// startingState reconstructs a segment that existed before recording
// started: its live blocks are the snapshot's active blocks the trace never
// touches plus the addresses whose first event is a free (size: the
// rounded request, grown by a rest too small to have been split off); the
// gaps are free.
func startingState(cfg Config, s *snapshot.Segment, first map[uint64]snapshot.Action, freedFirst map[uint64]int64) snapshot.Segment {
	type live struct {
		addr      uint64
		size, req int64
	}
	var blocks []live
	for _, b := range s.Blocks {
		if _, touched := first[b.Address]; !touched && b.State.Active() {
			blocks = append(blocks, live{b.Address, b.Size, b.RequestedSize})
		}
	}
	for addr, req := range freedFirst {
		if addr >= s.Address && addr < s.End() {
			blocks = append(blocks, live{addr, cfg.RoundSize(req), req})
		}
	}
	slices.SortFunc(blocks, func(x, y live) int {
		if x.addr < y.addr {
			return -1
		}
		return 1
	})
	out := snapshot.Segment{Address: s.Address, TotalSize: s.TotalSize, Stream: s.Stream, Pool: s.Pool}
	at := s.Address
	for i, b := range blocks {
		end := s.End()
		if i+1 < len(blocks) {
			end = blocks[i+1].addr
		}
		rest := int64(end - (b.addr + uint64(b.size)))
		if (s.Pool == snapshot.SmallPool && rest < MinBlockSize) || (s.Pool == snapshot.LargePool && rest <= SmallSize) {
			b.size += rest
		}
		if b.addr > at {
			out.Blocks = append(out.Blocks, snapshot.Block{Address: at, Size: int64(b.addr - at)})
		}
		out.Blocks = append(out.Blocks, snapshot.Block{Address: b.addr, Size: b.size, RequestedSize: b.req, State: snapshot.ActiveAllocated})
		at = b.addr + uint64(b.size)
	}
	if len(blocks) > 0 && at < s.End() {
		out.Blocks = append(out.Blocks, snapshot.Block{Address: at, Size: int64(s.End() - at)})
	}
	return out
}
