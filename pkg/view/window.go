package view

import (
	"container/heap"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/snapshot"
)

// ByAllocation draws one band per allocation (the default); the other
// groupings are analysis.GroupBy's and ByPool.
const (
	ByAllocation analysis.GroupBy = "allocation"
	ByPool       analysis.GroupBy = "pool"
)

// ParseGroupBy reads a group-by choice of the view ("" is ByAllocation).
func ParseGroupBy(s string) (analysis.GroupBy, error) {
	switch g := analysis.GroupBy(s); g {
	case "", ByAllocation:
		return ByAllocation, nil
	case ByPool:
		return g, nil
	}
	g, err := analysis.ParseGroupBy(s)
	if err != nil {
		return "", fmt.Errorf("invalid grouping %q: choose one of allocation, stack, frame, file, annotation, pool", s)
	}
	return g, nil
}

// MaxWidth bounds the columns of one window.
const MaxWidth = 8192

// Request asks for a window of the trace.
type Request struct {
	// From and To are the first and last trace entries (To < 0: the
	// last entry).
	From, To int
	// Width is the number of pixel columns (at most MaxWidth); a window
	// of fewer entries gets one column per entry.
	Width int
	By    analysis.GroupBy
	// Top is the number of bands drawn on their own; the rest are summed
	// into Window.Other.
	Top int
}

// Window is what the screen shows of entries From..To.
type Window struct {
	From    int    `json:"from"`
	To      int    `json:"to"`
	Entries int    `json:"entries"`
	By      string `json:"by"`
	// Column c covers entries First[c] up to First[c+1]-1 (To for the
	// last). Sample[c] is the entry of the column where allocated memory
	// is highest (the first such entry), so that spikes show; the bands
	// are the allocations live after it. AllocMin and AllocMax bound
	// allocated memory over the column, Allocated and Reserved are the
	// figures at the sample, ReservedMax the highest reserved memory of
	// the column.
	First       []int   `json:"first"`
	Sample      []int   `json:"sample"`
	AllocMin    []int64 `json:"alloc_min"`
	AllocMax    []int64 `json:"alloc_max"`
	Allocated   []int64 `json:"allocated"`
	Reserved    []int64 `json:"reserved"`
	ReservedMax []int64 `json:"reserved_max"`
	// PrivateReserved is the highest memory reserved by private pools
	// (CUDA graphs, MemPool) over each column; nil when they reserved
	// none.
	PrivateReserved []int64 `json:"private_reserved,omitempty"`
	// Bands are stacked bottom first; with Other (the rest, per column)
	// they add up to Allocated at every column.
	Bands []Band  `json:"bands"`
	Other []int64 `json:"other"`
	// OtherCount is the number of allocations (or groups) summed in
	// Other over the window.
	OtherCount int `json:"other_count"`
	// YMax is the highest figure of the window (reserved or allocated).
	YMax int64 `json:"y_max"`
}

// Band is one allocation (ID is its interval; Size its bytes at every
// column C0..C1-1) or one group (Key; Values from C0 on).
type Band struct {
	ID     int     `json:"id"`
	Key    string  `json:"key,omitempty"`
	Label  string  `json:"label"`
	C0     int     `json:"c0"`
	C1     int     `json:"c1"`
	Size   int64   `json:"size,omitempty"`
	Values []int64 `json:"values,omitempty"`
}

// At returns a band's bytes at column c.
func (b *Band) At(c int) int64 {
	if c < b.C0 || c >= b.C1 {
		return 0
	}
	if b.Values != nil {
		return b.Values[c-b.C0]
	}
	return b.Size
}

// Window computes what a window of the trace shows.
func (m *Model) Window(req Request) (*Window, error) {
	n := m.Entries()
	from, to := req.From, req.To
	if to < 0 || to >= n {
		to = n - 1
	}
	from = max(from, 0)
	if from > to {
		return nil, fmt.Errorf("the window %d..%d holds no trace entry (the trace has %d)", req.From, req.To, n)
	}
	by := req.By
	if by == "" {
		by = ByAllocation
	}
	width := min(max(req.Width, 1), MaxWidth, to-from+1)
	w := &Window{From: from, To: to, Entries: n, By: string(by)}
	m.columns(w, width)

	// Every interval live at a sample: Start is non-decreasing, so those
	// that start by the last sample are a prefix.
	last := w.Sample[width-1]
	kmax := sort.Search(len(m.Start), func(k int) bool { return int(m.Start[k]) > last })
	span := func(k int) (int, int) {
		s, e := int(m.Start[k]), int(m.End[k])
		if e >= 0 && e <= w.Sample[0] {
			return 0, 0
		}
		c0 := sort.SearchInts(w.Sample, s)
		c1 := width
		if e >= 0 {
			c1 = sort.SearchInts(w.Sample, e)
		}
		return c0, c1
	}
	total := make([]int64, width+1)
	top := max(req.Top, 0)
	if by == ByAllocation {
		h := &bySize{m: m}
		others := 0
		for k := range kmax {
			c0, c1 := span(k)
			if c0 >= c1 {
				continue
			}
			total[c0] += m.Size[k]
			total[c1] -= m.Size[k]
			if top == 0 {
				others++
				continue
			}
			if h.Len() < top {
				heap.Push(h, k)
			} else if h.less(h.ks[0], k) {
				h.ks[0] = k
				heap.Fix(h, 0)
				others++
			} else {
				others++
			}
		}
		ks := h.ks
		slices.Sort(ks)     // bottom first: the earliest allocated
		trace := m.reader() // ks are in increasing order, and so are their entries
		for _, k := range ks {
			c0, c1 := span(k)
			w.Bands = append(w.Bands, Band{ID: k, Label: m.label(trace, k), C0: c0, C1: c1, Size: m.Size[k]})
		}
		w.OtherCount = others
	} else {
		g := m.grouping(by)
		area := make([]float64, len(g.keys))
		seen := make([]bool, len(g.keys))
		for k := range kmax {
			c0, c1 := span(k)
			if c0 >= c1 {
				continue
			}
			total[c0] += m.Size[k]
			total[c1] -= m.Size[k]
			area[g.of[k]] += float64(m.Size[k]) * float64(c1-c0)
			seen[g.of[k]] = true
		}
		var ids []int
		for id, s := range seen {
			if s {
				ids = append(ids, id)
			}
		}
		slices.SortStableFunc(ids, func(x, y int) int {
			switch {
			case area[x] > area[y]:
				return -1
			case area[x] < area[y]:
				return 1
			}
			return strings.Compare(g.keys[x], g.keys[y])
		})
		cut := min(top, len(ids))
		w.OtherCount = len(ids) - cut
		slot := make([]int, len(g.keys))
		for i := range slot {
			slot[i] = -1
		}
		diffs := make([][]int64, cut)
		for i, id := range ids[:cut] {
			slot[id] = i
			diffs[i] = make([]int64, width+1)
		}
		if cut > 0 {
			for k := range kmax {
				s := slot[g.of[k]]
				if s < 0 {
					continue
				}
				c0, c1 := span(k)
				if c0 < c1 {
					diffs[s][c0] += m.Size[k]
					diffs[s][c1] -= m.Size[k]
				}
			}
		}
		for i, id := range ids[:cut] {
			vals := prefix(diffs[i][:width])
			c0, c1 := 0, width
			for c0 < c1 && vals[c0] == 0 {
				c0++
			}
			for c1 > c0 && vals[c1-1] == 0 {
				c1--
			}
			w.Bands = append(w.Bands, Band{ID: id, Key: g.keys[id], Label: g.labels[id], C0: c0, C1: c1, Values: vals[c0:c1]})
		}
	}
	sums := prefix(total[:width])
	w.Other = make([]int64, width)
	for c := range width {
		w.Other[c] = sums[c]
		for i := range w.Bands {
			w.Other[c] -= w.Bands[i].At(c)
		}
	}
	return w, nil
}

// prefix turns a difference array into values, in place.
func prefix(d []int64) []int64 {
	var run int64
	for i, v := range d {
		run += v
		d[i] = run
	}
	return d
}

// columns fills the per-column summary of w.
func (m *Model) columns(w *Window, width int) {
	n := w.To - w.From + 1
	w.First = make([]int, width)
	w.Sample = make([]int, width)
	w.AllocMin = make([]int64, width)
	w.AllocMax = make([]int64, width)
	w.Allocated = make([]int64, width)
	w.Reserved = make([]int64, width)
	w.ReservedMax = make([]int64, width)
	for c := range width {
		lo := w.From + int(int64(c)*int64(n)/int64(width))
		hi := w.From + int(int64(c+1)*int64(n)/int64(width)) - 1
		w.First[c] = lo
		best, amin := columnOf(&m.alloc, lo, hi)
		rmax := m.resv.MaxOver(lo, hi)
		w.Sample[c] = best
		w.AllocMin[c], w.AllocMax[c] = amin, m.alloc.At(best)
		w.Allocated[c], w.Reserved[c] = w.AllocMax[c], m.resv.At(best)
		w.ReservedMax[c] = rmax
		w.YMax = max(w.YMax, rmax, w.AllocMax[c])
		if pr := m.PrivateReserved; pr != nil {
			if w.PrivateReserved == nil {
				w.PrivateReserved = make([]int64, width)
			}
			for i := lo; i <= hi; i++ {
				w.PrivateReserved[c] = max(w.PrivateReserved[c], pr[i])
			}
		}
	}
}

// label names an allocation band: its size and site.
func (m *Model) label(trace *snapshot.Reader, k int) string {
	return analysis.FrameString(m.Frames.Site(m.stackOf(trace, k)))
}

// stackOf is the stack of interval k; trace reads the device's trace.
func (m *Model) stackOf(trace *snapshot.Reader, k int) snapshot.StackID {
	if e := m.Entry[k]; e >= 0 {
		return trace.At(int(e)).Stack
	}
	return m.Before[-m.Entry[k]-1].Stack
}

// bySize is a min-heap of intervals by size (ties: the later allocated is
// smaller), holding the largest seen.
type bySize struct {
	m  *Model
	ks []int
}

func (h *bySize) less(x, y int) bool {
	if h.m.Size[x] != h.m.Size[y] {
		return h.m.Size[x] < h.m.Size[y]
	}
	return x > y
}
func (h *bySize) Len() int           { return len(h.ks) }
func (h *bySize) Less(i, j int) bool { return h.less(h.ks[i], h.ks[j]) }
func (h *bySize) Swap(i, j int)      { h.ks[i], h.ks[j] = h.ks[j], h.ks[i] }
func (h *bySize) Push(x any)         { h.ks = append(h.ks, x.(int)) }
func (h *bySize) Pop() any {
	x := h.ks[len(h.ks)-1]
	h.ks = h.ks[:len(h.ks)-1]
	return x
}
