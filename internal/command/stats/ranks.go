package stats

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/report"
)

// rank is one device of one file: in a distributed job, one rank.
type rank struct {
	File          string
	Device        int
	PeakAllocated int64
	PeakReserved  int64
	Fragmentation float64
	OOMs          int64
	// The peaks' bounds where the replay does not determine them (nil:
	// exact); the table prints them, the spread and the outlier use the
	// replay's figures within them.
	PeakAllocatedBound, PeakReservedBound *replay.Bound
}

// ranks compares the ranks of several files (or devices): the rows in
// file order, each column's minimum, median and maximum, and the rank
// whose peak reserved memory is furthest from the median (reserved memory
// is what runs a GPU out of memory).
type ranks struct {
	Rows              []rank
	Min, Median, Max  rank
	Outlier           int   // index into Rows; -1 when every rank reserved the same
	OutlierFromMedian int64 // Rows[Outlier].PeakReserved - Median.PeakReserved
	Labels            []string
}

// rankSummary builds the table across the files' devices; nil when there
// is only one.
func rankSummary(files []fileStats) *ranks {
	var rows []rank
	for _, f := range files {
		for _, res := range f.Devices {
			rows = append(rows, rankOf(f.File, res))
		}
	}
	if len(rows) < 2 {
		return nil
	}
	rs := &ranks{Rows: rows, Outlier: -1, Labels: rankLabels(rows)}
	rs.Min.PeakAllocated, rs.Median.PeakAllocated, rs.Max.PeakAllocated = spread(rows, func(r rank) int64 { return r.PeakAllocated })
	rs.Min.PeakReserved, rs.Median.PeakReserved, rs.Max.PeakReserved = spread(rows, func(r rank) int64 { return r.PeakReserved })
	rs.Min.OOMs, rs.Median.OOMs, rs.Max.OOMs = spread(rows, func(r rank) int64 { return r.OOMs })
	fr := make([]float64, len(rows))
	for i, r := range rows {
		fr[i] = r.Fragmentation
	}
	slices.Sort(fr)
	rs.Min.Fragmentation, rs.Max.Fragmentation = fr[0], fr[len(fr)-1]
	rs.Median.Fragmentation = (fr[(len(fr)-1)/2] + fr[len(fr)/2]) / 2
	var far int64
	for i, r := range rows {
		d := r.PeakReserved - rs.Median.PeakReserved
		if abs(d) > abs(far) {
			rs.Outlier, far = i, d
		}
	}
	rs.OutlierFromMedian = far
	return rs
}

func rankOf(file string, res *replay.Result) rank {
	return rank{
		File:               file,
		Device:             res.Device,
		PeakAllocated:      res.PeakAllocated.Bytes,
		PeakReserved:       res.PeakReserved.Bytes,
		Fragmentation:      res.AtPeak.Fragmentation,
		OOMs:               res.Stat("num_ooms"),
		PeakAllocatedBound: boundOf(res, "allocated_bytes.all.peak"),
		PeakReservedBound:  boundOf(res, "reserved_bytes.all.peak"),
	}
}

func boundOf(res *replay.Result, key string) *replay.Bound {
	if b, ok := res.Bounds[key]; ok {
		b.Bytes = true
		return &b
	}
	return nil
}

// peakCell is a rank's peak: its bound where it has one.
func peakCell(v int64, b *replay.Bound) report.Cell {
	if b != nil {
		return report.BoundCell(*b)
	}
	return report.Bytes(v)
}

// boundText names the ranks whose peaks are bounds ("" when none).
func (rs *ranks) boundText() string {
	var names []string
	for i, r := range rs.Rows {
		if r.PeakAllocatedBound != nil || r.PeakReservedBound != nil {
			names = append(names, rs.Labels[i])
		}
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("peaks of %s are bounds (memstat stats on the file says why); their fragmentation and reserved vs median, the min, median and max rows and the outlier take the replay's figures within them", strings.Join(names, ", "))
}

// spread returns the minimum, median (the mean of the middle two for an
// even count) and maximum of a column.
func spread(rows []rank, col func(rank) int64) (lo, mid, hi int64) {
	v := make([]int64, len(rows))
	for i, r := range rows {
		v[i] = col(r)
	}
	slices.Sort(v)
	a, b := v[(len(v)-1)/2], v[len(v)/2]
	return v[0], a + (b-a)/2, v[len(v)-1]
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// rankLabels names each row by its file's base name, or by the path as
// given when base names repeat (run1/rank0.pickle, run2/rank0.pickle),
// with the device when a file has several.
func rankLabels(rows []rank) []string {
	bases := map[string]int{}
	devices := map[string]int{}
	for _, r := range rows {
		devices[r.File]++
	}
	for f := range devices {
		bases[filepath.Base(f)]++
	}
	labels := make([]string, len(rows))
	for i, r := range rows {
		l := filepath.Base(r.File)
		if bases[l] > 1 {
			l = r.File
		}
		if devices[r.File] > 1 {
			l = fmt.Sprintf("%s, device %d", l, r.Device)
		}
		labels[i] = l
	}
	return labels
}

// table lays the ranks out with the minimum, median and maximum rows
// under them.
func (rs *ranks) table() *report.Table {
	t := &report.Table{Columns: []report.Column{
		{Name: "Rank", Key: "rank"},
		{Name: "Peak allocated", Key: "peak_allocated", Align: report.Right},
		{Name: "Peak reserved", Key: "peak_reserved", Align: report.Right},
		{Name: "Reserved vs median", Key: "reserved_vs_median", Align: report.Right},
		{Name: "Fragmentation", Key: "fragmentation", Align: report.Right},
		{Name: "OOMs", Key: "ooms", Align: report.Right},
	}}
	for i, r := range rs.Rows {
		t.Add(report.Str(rs.Labels[i]), peakCell(r.PeakAllocated, r.PeakAllocatedBound), peakCell(r.PeakReserved, r.PeakReservedBound),
			report.DeltaBytes(r.PeakReserved-rs.Median.PeakReserved), report.Pct(r.Fragmentation), report.Int(r.OOMs))
	}
	for _, s := range []struct {
		name string
		r    rank
	}{{"min", rs.Min}, {"median", rs.Median}, {"max", rs.Max}} {
		t.Add(report.Str(s.name), report.Bytes(s.r.PeakAllocated), report.Bytes(s.r.PeakReserved),
			report.DeltaBytes(s.r.PeakReserved-rs.Median.PeakReserved), report.Pct(s.r.Fragmentation), report.Int(s.r.OOMs))
	}
	return t
}

// outlierText names the rank furthest from the median (of two, says how
// far apart they are).
func (rs *ranks) outlierText() string {
	if rs.Outlier < 0 {
		return fmt.Sprintf("every rank reserved %s at its peak", report.Size(rs.Median.PeakReserved))
	}
	if len(rs.Rows) == 2 {
		a, b := rs.Rows[0].PeakReserved, rs.Rows[1].PeakReserved
		return fmt.Sprintf("%s reserved %s %s than %s at its peak", rs.Labels[1], report.Size(abs(b-a)), map[bool]string{true: "more", false: "less"}[b > a], rs.Labels[0])
	}
	r := rs.Rows[rs.Outlier]
	pct := ""
	if rs.Median.PeakReserved > 0 {
		pct = fmt.Sprintf(" (%+.1f%%)", 100*float64(rs.OutlierFromMedian)/float64(rs.Median.PeakReserved))
	}
	return fmt.Sprintf("furthest from the median: %s, peak reserved %s, %s%s from the median of %s",
		rs.Labels[rs.Outlier], report.Size(r.PeakReserved), report.SignedSize(rs.OutlierFromMedian), pct, report.Size(rs.Median.PeakReserved))
}

func writeRanks(w io.Writer, rs *ranks, format report.Format) error {
	title := fmt.Sprintf("Across %d ranks (files and devices)", len(rs.Rows))
	if format == report.Markdown {
		fmt.Fprintf(w, "### %s\n\n", title)
	} else {
		fmt.Fprintf(w, "%s\n\n", title)
	}
	if err := rs.table().Render(w, format); err != nil {
		return err
	}
	text := rs.outlierText()
	if b := rs.boundText(); b != "" {
		text += "\n" + b
	}
	if format == report.Markdown {
		fmt.Fprintf(w, "\n%s\n", text)
	} else {
		fmt.Fprintf(w, "%s\n", text)
	}
	return nil
}

type jsonRank struct {
	File          string  `json:"file"`
	Device        int     `json:"device"`
	PeakAllocated int64   `json:"peak_allocated"`
	PeakReserved  int64   `json:"peak_reserved"`
	Fragmentation float64 `json:"fragmentation"`
	OOMs          int64   `json:"ooms"`
}

type jsonSpread struct {
	PeakAllocated int64   `json:"peak_allocated"`
	PeakReserved  int64   `json:"peak_reserved"`
	Fragmentation float64 `json:"fragmentation"`
	OOMs          int64   `json:"ooms"`
}

type jsonOutlier struct {
	File                   string `json:"file"`
	Device                 int    `json:"device"`
	PeakReserved           int64  `json:"peak_reserved"`
	PeakReservedFromMedian int64  `json:"peak_reserved_from_median"`
	MedianPeakReserved     int64  `json:"median_peak_reserved"`
}

type jsonRanks struct {
	Rows    []jsonRank   `json:"rows"`
	Min     jsonSpread   `json:"min"`
	Median  jsonSpread   `json:"median"`
	Max     jsonSpread   `json:"max"`
	Outlier *jsonOutlier `json:"outlier"`
}

func (rs *ranks) json() *jsonRanks {
	if rs == nil {
		return nil
	}
	sp := func(r rank) jsonSpread {
		return jsonSpread{PeakAllocated: r.PeakAllocated, PeakReserved: r.PeakReserved, Fragmentation: r.Fragmentation, OOMs: r.OOMs}
	}
	out := &jsonRanks{Min: sp(rs.Min), Median: sp(rs.Median), Max: sp(rs.Max)}
	for _, r := range rs.Rows {
		out.Rows = append(out.Rows, jsonRank{File: r.File, Device: r.Device, PeakAllocated: r.PeakAllocated,
			PeakReserved: r.PeakReserved, Fragmentation: r.Fragmentation, OOMs: r.OOMs})
	}
	if rs.Outlier >= 0 {
		r := rs.Rows[rs.Outlier]
		out.Outlier = &jsonOutlier{File: r.File, Device: r.Device, PeakReserved: r.PeakReserved,
			PeakReservedFromMedian: rs.OutlierFromMedian, MedianPeakReserved: rs.Median.PeakReserved}
	}
	return out
}
