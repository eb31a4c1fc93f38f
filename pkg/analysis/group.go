package analysis

import (
	"fmt"
	"slices"
	"strings"

	"github.com/memstat/memstat/pkg/snapshot"
)

// GroupBy says how live blocks are grouped.
type GroupBy string

// The groupings of `memstat peak --by`.
const (
	// ByStack: the whole (shown) stack of the allocation.
	ByStack GroupBy = "stack"
	// ByFrame: the allocation site (see Frames.Site).
	ByFrame GroupBy = "frame"
	// ByFile: the allocation site's file.
	ByFile GroupBy = "file"
	// ByAnnotation: the annotated range open when the block was
	// allocated.
	ByAnnotation GroupBy = "annotation"
)

// ParseGroupBy reads a --by value.
func ParseGroupBy(s string) (GroupBy, error) {
	switch g := GroupBy(s); g {
	case ByStack, ByFrame, ByFile, ByAnnotation:
		return g, nil
	}
	return "", fmt.Errorf("invalid grouping %q: choose one of stack, frame, file, annotation", s)
}

// Group labels of blocks without an annotation.
const (
	BeforeTraceLabel  = "(allocated before the trace began)"
	NoAnnotationLabel = "(outside annotated ranges)"
)

// FreedAtPrefix starts the key of a group of blocks known only by where
// the trace frees them (see Group.FreedAt).
const FreedAtPrefix = "(allocated before the trace) freed at "

// NoStackBeforeTrace stands for blocks allocated before the trace began
// that nothing in the snapshot gives a stack for: most often memory
// allocated before _record_memory_history() was called (model weights,
// optimizer state).
var NoStackBeforeTrace = snapshot.Frame{Name: "<no stack: allocated before the trace began>"}

// Group is live memory that shares an allocation stack, site, file or
// annotation.
type Group struct {
	// Key identifies the group (a stack key, a frame, a file or an
	// annotation name).
	Key string `json:"key"`
	// Bytes and Count are the blocks' sizes and number; Requested what
	// the program asked for (Bytes - Requested is rounding).
	Bytes     int64 `json:"bytes"`
	Count     int   `json:"count"`
	Requested int64 `json:"requested_bytes"`
	// Fraction is Bytes over the total the groups were made from.
	Fraction float64 `json:"fraction"`
	// BeforeTrace is the part allocated before the trace began.
	BeforeTrace int64 `json:"before_trace_bytes"`
	// Site is the allocation site of the group's largest block.
	Site snapshot.Frame `json:"-"`
	// FreedAt marks a group of blocks allocated before the trace began
	// and recorded without a stack: Site and Stack are then where the
	// trace later frees them.
	FreedAt bool `json:"freed_at,omitempty"`
	// Stack is the shown frames of the largest block's stack (innermost
	// first) and HiddenFrames how many were hidden.
	Stack        []snapshot.Frame `json:"-"`
	HiddenFrames int              `json:"hidden_frames"`
	// Sizes counts the blocks by size.
	Sizes map[int64]int `json:"-"`
	// Label names a group by stack in a table (StackLabels over every
	// group, before a table keeps its top N); empty for other groupings.
	Label string `json:"-"`

	largest int64
}

// LiveBlock is one live block with what grouping needs.
type LiveBlock struct {
	Address   uint64
	Size      int64
	Requested int64
	Stack     snapshot.StackID
	// AllocIndex is the trace entry that allocated it; -1 before the
	// trace.
	AllocIndex int
	AllocTime  int64
	// FreeStack is, for a block allocated before the trace without a
	// recorded stack, the stack of the trace entry that frees it.
	FreeStack snapshot.StackID
}

// LiveBlocks lists a state's allocated blocks (not the ones waiting for
// stream events: allocated_bytes does not count those), in address order.
func (rp *Replayed) LiveBlocks(st *State) []LiveBlock {
	// Sized once: grown by doubling, the copies cost as much as the
	// blocks (report: 32 MB allocated for two states of 86,000 blocks).
	n := 0
	for _, seg := range st.Segments {
		for _, b := range seg.Blocks {
			if b.State == snapshot.ActiveAllocated {
				n++
			}
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]LiveBlock, 0, n)
	trace := rp.Trace()
	rd := trace.Reader()
	for _, seg := range st.Segments {
		for _, b := range seg.Blocks {
			if b.State != snapshot.ActiveAllocated {
				continue
			}
			lb := LiveBlock{Address: b.Address, Size: b.Size, Requested: b.RequestedSize, Stack: b.Stack, AllocIndex: -1}
			if k, ok := st.AllocIndex[b.Address]; ok {
				lb.AllocIndex = k
				if k < trace.Len() {
					lb.AllocTime = rd.At(k).TimeUS
				}
			} else if b.Stack == snapshot.NoStack {
				lb.FreeStack = rp.firstFree[b.Address]
			}
			out = append(out, lb)
		}
	}
	return out
}

// GroupBlocks groups live blocks and sorts the groups by bytes, largest
// first (then by key). Fractions are of total (the blocks' sum when 0).
func GroupBlocks(blocks []LiveBlock, by GroupBy, fr *Frames, phases Phases, total int64) []Group {
	idx := map[string]int{}
	var out []Group
	var sum int64
	for _, b := range blocks {
		sum += b.Size
		var key string
		stack, freed := b.Stack, false
		if stack == snapshot.NoStack && b.FreeStack != snapshot.NoStack {
			stack, freed = b.FreeStack, true
		}
		switch by {
		case ByFrame:
			key = FrameString(fr.Site(stack))
		case ByFile:
			key = FileOf(fr.Site(stack))
		case ByAnnotation:
			switch {
			case b.AllocIndex < 0:
				key = BeforeTraceLabel
			default:
				if key = phases.At(b.AllocTime); key == "" {
					key = NoAnnotationLabel
				}
			}
		default:
			if key = fr.Key(stack); key == "" {
				key = NoStackFrame.Name
			}
		}
		if stack == snapshot.NoStack && b.AllocIndex < 0 && by != ByAnnotation {
			key = NoStackBeforeTrace.Name
		}
		if freed && by != ByAnnotation {
			key = FreedAtPrefix + key
		}
		i, ok := idx[key]
		if !ok {
			i = len(out)
			idx[key] = i
			out = append(out, Group{Key: key, Sizes: map[int64]int{}, largest: -1})
		}
		g := &out[i]
		g.Bytes += b.Size
		g.Count++
		g.Requested += b.Requested
		g.Sizes[b.Size]++
		if b.AllocIndex < 0 {
			g.BeforeTrace += b.Size
		}
		if b.Size > g.largest {
			g.largest = b.Size
			g.Site, g.FreedAt = fr.Site(stack), freed
			if key == NoStackBeforeTrace.Name {
				g.Site = NoStackBeforeTrace
			}
			g.Stack, g.HiddenFrames = fr.Shown(stack)
		}
	}
	if total == 0 {
		total = sum
	}
	for i := range out {
		if total > 0 {
			out[i].Fraction = float64(out[i].Bytes) / float64(total)
		}
	}
	slices.SortStableFunc(out, func(x, y Group) int {
		switch {
		case x.Bytes != y.Bytes:
			if x.Bytes > y.Bytes {
				return -1
			}
			return 1
		}
		return strings.Compare(x.Key, y.Key)
	})
	if by == ByStack {
		sites := make([]snapshot.Frame, len(out))
		stacks := make([][]snapshot.Frame, len(out))
		freed := make([]bool, len(out))
		for i, g := range out {
			sites[i], stacks[i], freed[i] = g.Site, g.Stack, g.FreedAt
		}
		for i, l := range StackLabels(sites, stacks, freed, fr.AllFrames()) {
			out[i].Label = l
		}
	}
	return out
}

// TopGroups keeps the first n groups (all when n <= 0) and sums the rest
// into one group keyed "(N more)"; rest.Count is 0 when nothing was cut.
func TopGroups(groups []Group, n int) (top []Group, rest Group) {
	if n <= 0 || len(groups) <= n {
		return groups, Group{}
	}
	rest = Group{Key: fmt.Sprintf("(%d more)", len(groups)-n)}
	for _, g := range groups[n:] {
		rest.Bytes += g.Bytes
		rest.Count += g.Count
		rest.Requested += g.Requested
		rest.BeforeTrace += g.BeforeTrace
		rest.Fraction += g.Fraction
	}
	return groups[:n], rest
}

// FileOf names the file of a frame for --by file: the short path of a
// Python file or a native source; a native frame whose file the unwinder
// did not know ("??") is named by its C++ namespace, "[native
// torch::autograd::generated]", never "??".
func FileOf(f snapshot.Frame) string {
	if f.Filename != "" && f.Filename != "??" {
		return ShortFile(f.Filename)
	}
	if IsPython(f) || f == NoStackFrame || f == NoStackBeforeTrace {
		return f.Name
	}
	name := NativeName(f.Name)
	if i := strings.LastIndex(name, "::"); i > 0 {
		return "[native " + name[:i] + "]"
	}
	if name == "" {
		return "[native]"
	}
	return "[native " + name + "]"
}
