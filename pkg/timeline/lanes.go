package timeline

import (
	"regexp"
	"sort"
	"strconv"
)

// Box is the extent of a label along an axis, in the axis's units.
type Box struct{ Start, End float64 }

// Lanes lays labels out in lanes that never overlap: each box, from the
// leftmost, goes to the lowest lane whose last box ends at least gap
// before it starts. It returns each box's lane (0: the first) and how
// many lanes there are. Draw lane k one line below lane k-1; a caller
// that has room for fewer lanes leaves the boxes of the others out.
func Lanes(boxes []Box, gap float64) (lane []int, lanes int) {
	lane = make([]int, len(boxes))
	order := make([]int, len(boxes))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return boxes[order[a]].Start < boxes[order[b]].Start })
	var ends []float64
	for _, i := range order {
		b := boxes[i]
		k := 0
		for k < len(ends) && ends[k]+gap > b.Start {
			k++
		}
		if k == len(ends) {
			ends = append(ends, 0)
		}
		ends[k] = b.End
		lane[i] = k
	}
	return lane, len(ends)
}

// Run is one label for phases of the same name repeated: "step 1..30"
// for numbered ones, "forward ×30" for the same name again, the name
// itself for one.
type Run struct {
	Label string
	// Start and End span the run's phases; Count is how many it has.
	Start, End float64
	Count      int
}

var numbered = regexp.MustCompile(`^(.*?)[\s_#:-]*(\d+)$`)

// MergeRuns names the repeated phases of a timeline once: the phases
// with the same name, less a trailing number, form one run, labelled
// "step 1..30" when their numbers count up by one, "step ×30" otherwise.
// Runs are in the order of their first phase.
func MergeRuns(phases []Phase) []Run {
	type acc struct {
		Run
		stem     string
		first    int
		last     int
		counting bool
		plain    bool
	}
	sorted := append([]Phase(nil), phases...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Start < sorted[j].Start })
	var runs []*acc
	byStem := map[string]*acc{}
	for _, ph := range sorted {
		stem, n, isNum := ph.Name, 0, false
		if m := numbered.FindStringSubmatch(ph.Name); m != nil && m[1] != "" {
			if v, err := strconv.Atoi(m[2]); err == nil {
				stem, n, isNum = m[1], v, true
			}
		}
		a := byStem[stem]
		if a == nil {
			a = &acc{Run: Run{Start: ph.Start, End: ph.End}, stem: stem, first: n, last: n, counting: isNum, plain: !isNum}
			a.Label = ph.Name
			byStem[stem] = a
			runs = append(runs, a)
		} else {
			a.counting = a.counting && isNum && n == a.last+1
			a.plain = a.plain && !isNum
			a.last = n
			a.End = max(a.End, ph.End)
		}
		a.Count++
	}
	out := make([]Run, len(runs))
	for i, a := range runs {
		r := a.Run
		switch {
		case a.Count == 1:
		case a.counting:
			r.Label = a.stem + " " + strconv.Itoa(a.first) + ".." + strconv.Itoa(a.last)
		default:
			r.Label = a.stem + " ×" + strconv.Itoa(a.Count)
		}
		out[i] = r
	}
	return out
}
