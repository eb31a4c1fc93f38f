// Package live finds what was allocated at one moment of a device's
// trace: at the peak of allocated memory, at the end, or after a given
// trace entry. It replays the trace (follow mode, the recorded settings)
// up to that moment and lists the blocks tensors held, so exporters can
// attribute live memory to allocation stacks.
package live

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/snapshot"
)

// MomentKind says which moment a Moment names.
type MomentKind uint8

// Moments.
const (
	// Peak: after the trace entry at which allocated memory first reached
	// its highest value.
	Peak MomentKind = iota
	// End: the final state, the snapshot's own segments.
	End
	// Event: after a given trace entry.
	Event
)

// Moment names a moment of a trace.
type Moment struct {
	Kind  MomentKind
	Index int // for Event
}

// ParseMoment reads "peak", "end" or a trace entry index.
func ParseMoment(s string) (Moment, error) {
	switch s {
	case "peak", "":
		return Moment{Kind: Peak}, nil
	case "end":
		return Moment{Kind: End}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return Moment{}, fmt.Errorf("%q is not peak, end or a trace entry index", s)
	}
	return Moment{Kind: Event, Index: n}, nil
}

func (m Moment) String() string {
	switch m.Kind {
	case End:
		return "end"
	case Event:
		return "entry " + strconv.Itoa(m.Index)
	}
	return "peak"
}

// State is what was allocated at a moment.
type State struct {
	Device int
	Moment Moment
	// Index is the trace entry after which the state was taken: -1 before
	// the first entry, the last entry for End (or -1 without a trace).
	Index  int
	TimeUS int64
	// Allocated is allocated_bytes.all.current then, from the replay's
	// statistics; Blocks are the allocated blocks (their sizes add up to
	// Allocated), in address order.
	Allocated int64
	Blocks    []allocator.BlockInfo
	Stacks    *snapshot.Stacks
}

// At replays the device's trace to a moment.
func At(s *snapshot.Snapshot, device int, m Moment) (*State, error) {
	return AtScanned(s, device, m, nil)
}

// AtScanned is At with the start rebuild's pass begun while the snapshot
// was read (replay.Options.StartScan; nil: none): the first replay takes
// it. The state is the same.
func AtScanned(s *snapshot.Snapshot, device int, m Moment, scan *replay.StartScan) (*State, error) {
	trace := s.Trace(device)
	opts := replay.Options{Device: device, StartScan: scan}
	st := &State{Device: device, Moment: m, Stacks: s.Stacks}
	switch m.Kind {
	case Peak:
		r, err := replay.New(s, opts)
		if err != nil {
			return nil, err
		}
		opts.StartScan = nil // taken: the second replay scans for itself
		res, err := r.Run()
		if err != nil {
			return nil, err
		}
		st.Index = res.PeakAllocated.Index
	case End:
		st.Index = trace.Len() - 1
	case Event:
		if m.Index >= trace.Len() {
			return nil, fmt.Errorf("device %d: trace entry %d does not exist (the trace has %d entries)", device, m.Index, trace.Len())
		}
		st.Index = m.Index
	}
	r, err := replay.New(s, opts)
	if err != nil {
		return nil, err
	}
	if m.Kind == End {
		// The result reconciles the replayed state with the snapshot's
		// segments: the end is exactly what the file shows.
		if _, err := r.Run(); err != nil {
			return nil, err
		}
	} else if err := r.RunTo(st.Index); err != nil {
		return nil, err
	}
	if st.Index >= 0 {
		st.TimeUS = trace.At(st.Index).TimeUS
	}
	a := r.Allocator()
	stats := a.Stats()
	st.Allocated = stats.AllocatedBytes[allocator.PoolAll].Current
	n := 0
	a.Blocks(func(b allocator.BlockInfo) bool {
		if b.State == snapshot.ActiveAllocated {
			n++
		}
		return true
	})
	st.Blocks = make([]allocator.BlockInfo, 0, n)
	a.Blocks(func(b allocator.BlockInfo) bool {
		if b.State == snapshot.ActiveAllocated {
			st.Blocks = append(st.Blocks, b)
		}
		return true
	})
	// The simulator is let go before the trace is scanned for the blocks'
	// addresses: the two are not held at once.
	r, a = nil, nil
	unknown := freedFirst(trace, st.Blocks)
	for i := range st.Blocks {
		if next, ok := unknown[st.Blocks[i].Address]; ok && next > st.Index {
			// Allocated before the trace and freed in it: the replay's
			// starting state knows the block only from its free entry,
			// whose stack is where it was freed, not allocated.
			st.Blocks[i].Stack = snapshot.NoStack
		}
	}
	return st, nil
}

// freedFirst finds, among the blocks' addresses, those of blocks allocated
// before the trace began and freed in it: the addresses whose first trace
// event is a free, each with the index of the first alloc entry at that
// address after it (MaxInt when none), after which a live block there is
// a new allocation. Only the blocks' addresses are followed, not every
// address of the trace.
func freedFirst(trace *snapshot.Trace, blocks []allocator.BlockInfo) map[uint64]int {
	const (
		unseen     = math.MinInt     // no event at the address yet
		allocFirst = math.MinInt + 1 // its first event is an alloc
	)
	m := make(map[uint64]int, len(blocks))
	for _, b := range blocks {
		m[b.Address] = unseen
	}
	for i, e := range trace.All() {
		switch e.Action {
		case snapshot.ActionAlloc:
			switch v, ok := m[e.Addr]; {
			case !ok:
			case v == unseen:
				m[e.Addr] = allocFirst
			case v == math.MaxInt:
				m[e.Addr] = i
			}
		case snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted, snapshot.ActionFree:
			if v, ok := m[e.Addr]; ok && v == unseen {
				m[e.Addr] = math.MaxInt
			}
		}
	}
	maps.DeleteFunc(m, func(_ uint64, v int) bool { return v == unseen || v == allocFirst })
	return m
}

// StackGroup is the allocated blocks that share an allocation stack.
type StackGroup struct {
	Stack  snapshot.StackID
	Blocks int
	Bytes  int64
}

// ByStack groups the blocks by allocation stack, largest first (ties by
// stack id, so the order is stable).
func (st *State) ByStack() []StackGroup {
	idx := map[snapshot.StackID]int{}
	var out []StackGroup
	for _, b := range st.Blocks {
		i, ok := idx[b.Stack]
		if !ok {
			i = len(out)
			idx[b.Stack] = i
			out = append(out, StackGroup{Stack: b.Stack})
		}
		out[i].Blocks++
		out[i].Bytes += b.Size
	}
	slices.SortFunc(out, func(x, y StackGroup) int {
		if c := cmp.Compare(y.Bytes, x.Bytes); c != 0 {
			return c
		}
		return cmp.Compare(x.Stack, y.Stack)
	})
	return out
}
