// Package htmlreport writes a snapshot's analysis as one self-contained
// HTML page: the headline, the timeline picture (inline SVG), what was
// live at the peak with its stacks, the out-of-memory explanations, the
// memory_stats table and a map of the final segments, and, when the
// command gives one, the interactive timeline (pkg/report/webview, its
// script inline). The page loads nothing: no CDN, no web font, no image
// file; it works offline and can be attached to a bug report as it is.
package htmlreport

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strings"

	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/report"
	rplot "github.com/memstat/memstat/pkg/report/plot"
	"github.com/memstat/memstat/pkg/snapshot"
	"github.com/memstat/memstat/pkg/timeline"
)

//go:embed report.html.tmpl
var files embed.FS

var page = template.Must(template.New("report.html.tmpl").Funcs(template.FuncMap{
	"size": report.Size,
	"pct":  report.Percent,
	"base": baseName,
}).ParseFS(files, "report.html.tmpl"))

// Report is what one page shows.
type Report struct {
	// File is the snapshot's name as given; Version memstat's.
	File    string
	Version string
	Devices []Device
	// Warnings are the file's reading warnings.
	Warnings []string
	// Interactive is the interactive timeline (pkg/report/webview's
	// fragment with its data inline), or empty.
	Interactive template.HTML
}

// Device is one device's results. Everything but Result may be nil: the
// page shows what there is and says what is missing.
type Device struct {
	Device int
	Result *replay.Result
	// Headline, History and Agreement are the lines `memstat stats` prints.
	Headline, History, Agreement string
	Timeline                     *timeline.Timeline
	Peak                         *analysis.Peak
	// Groups are the live memory at the peak by stack, Rest what TopGroups
	// cut.
	Groups   []analysis.Group
	Rest     analysis.Group
	OOMs     *analysis.OOMReport
	Segments *analysis.SegmentMap
	// Notes say what could not be computed.
	Notes []string
}

// MaxSegments bounds the segment map's rows (the largest segments are
// kept, shown in address order).
const MaxSegments = 400

// PageBudget bounds the page (the promise: a report stays under
// 10 MB for any input). Each device's sections are bounded on their own
// (the picture, MaxSegments, the stacks listed), and the interactive
// timeline by webview's Static* limits, but devices add up: when the page
// would be larger, the devices at the end keep their headline, notes and
// memory_stats and leave out their picture, the stacks of the peak and of
// the OOMs and the segment map, each saying so and how to get them.
const PageBudget = 9_500_000

// Write renders the report as one self-contained HTML page.
func Write(w io.Writer, r *Report) error {
	p, err := Prepare(r)
	if err != nil {
		return err
	}
	return p.Write(w)
}

// Page is a report with its devices' sections drawn (their tables, the
// timeline's picture, the stacks, the segment map), to be written once
// the rest of the report is: memstat report prepares it beside the
// drawing of the interactive timeline, on the other core, rather than
// after it.
type Page struct {
	r       *Report
	devices []devView
}

// Prepare draws the sections of r's devices; it reads r.File and
// r.Devices only, which must not change until the page is written.
func Prepare(r *Report) (*Page, error) {
	p := &Page{r: r}
	for i := range r.Devices {
		dv, err := deviceView(r.File, &r.Devices[i])
		if err != nil {
			return nil, err
		}
		p.devices = append(p.devices, dv)
	}
	return p, nil
}

// Write renders the page, with the report's version, warnings and
// interactive timeline as they are now.
func (p *Page) Write(w io.Writer) error {
	r := p.r
	v := view{File: r.File, Version: r.Version, Warnings: r.Warnings, Interactive: r.Interactive, Devices: p.devices}
	var buf bytes.Buffer
	// render renders the page with the first whole devices whole.
	render := func(whole int) error {
		vv := v
		vv.Devices = slices.Clone(v.Devices)
		for i := whole; i < len(vv.Devices); i++ {
			vv.Devices[i] = trimmed(vv.Devices[i], r.File, vv.Devices[whole].Device)
		}
		buf.Reset()
		return page.Execute(&buf, vv)
	}
	if err := render(len(v.Devices)); err != nil {
		return err
	}
	if buf.Len() > PageBudget {
		// The most devices kept whole within the budget (the page's size
		// grows with them): a binary search, a few renderings.
		lo, hi := 0, len(v.Devices)-1
		var fit []byte // the page of lo, once rendered
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if err := render(mid); err != nil {
				return err
			}
			if buf.Len() <= PageBudget {
				lo, fit = mid, slices.Clone(buf.Bytes())
			} else {
				hi = mid - 1
			}
		}
		if fit == nil {
			if err := render(lo); err != nil {
				return err
			}
			fit = buf.Bytes()
		}
		_, err := w.Write(fit)
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// trimmed is a device's view without its heaviest parts, each replaced by
// a note; from is the first device trimmed.
func trimmed(dv devView, file string, from int) devView {
	note := fmt.Sprintf("Left out to keep the page under 10 MB (devices %d and later are shortened): memstat report %s --device %d -o OUT.html shows it.", from, baseName(file), dv.Device)
	dv.Trimmed = note
	if dv.Plot != "" {
		dv.Plot, dv.PlotNote = "", note
	}
	if dv.Peak != nil {
		pk := *dv.Peak
		pk.Stacks, pk.Trimmed = nil, note
		dv.Peak = &pk
	}
	if dv.OOMs != nil {
		ooms := slices.Clone(dv.OOMs)
		for i := range ooms {
			ooms[i].Stack = []string{note}
		}
		dv.OOMs = ooms
	}
	dv.Segments = nil
	return dv
}

type view struct {
	File, Version string
	Warnings      []string
	Interactive   template.HTML
	Devices       []devView
}

type devView struct {
	ID                           string
	Device                       int
	TorchVersion, Settings       string
	Headline, History, Agreement string
	Plot                         template.HTML
	PlotNote                     string
	Peak                         *peakView
	OOMs                         []oomView
	OOMNote                      string
	Stats, Counters              *tableView
	Segments                     *segView
	Notes                        []string
	// Trimmed, when set, says why the device's heaviest parts are left
	// out (PageBudget).
	Trimmed string
}

type tableView struct {
	Head  []cellView
	Rows  [][]cellView
	Class string
}

type cellView struct {
	Text  string
	Right bool
}

type peakView struct {
	When   string
	Table  *tableView
	Stacks []stackView
	Before string
	// Trimmed says why Stacks is empty (PageBudget).
	Trimmed string
}

type stackView struct {
	Rank  int
	Label string
	Bytes string
	Lines []string
}

type oomView struct {
	When, Verdict, Explanation, Message string
	Facts                               [][2]string
	Advice                              []string
	Stack                               []string
}

type segView struct {
	When    string
	Total   string
	Rows    []segRow
	Omitted int
}

type segRow struct {
	Address, Size, Allocated, Free, LargestFree, Frag, Pool, Site string
	// Width is the bar's length relative to the largest segment.
	Width string
	Runs  []run
}

type run struct {
	Class, Width, Title string
}

func tableOf(t *report.Table, class string) *tableView {
	tv := &tableView{Class: class}
	for _, c := range t.Columns {
		tv.Head = append(tv.Head, cellView{Text: c.Name, Right: c.Align == report.Right})
	}
	for _, r := range t.Rows {
		row := make([]cellView, len(t.Columns))
		for i, c := range t.Columns {
			if i < len(r) {
				row[i] = cellView{Text: r[i].Text, Right: c.Align == report.Right}
			}
		}
		tv.Rows = append(tv.Rows, row)
	}
	return tv
}

func deviceView(file string, d *Device) (devView, error) {
	dv := devView{
		ID: fmt.Sprintf("d%d", d.Device), Device: d.Device,
		Headline: d.Headline, History: d.History, Agreement: d.Agreement, Notes: d.Notes,
	}
	if res := d.Result; res != nil {
		dv.TorchVersion, dv.Settings = res.Version, res.Settings
		dv.Stats = tableOf(report.StatsTable(res.Stat, res.Bounds), "stats")
		ct := &report.Table{Columns: []report.Column{{Name: "Counter", Key: "counter"}, {Name: "Key", Key: "key"}, {Name: "Value", Key: "value", Align: report.Right}}}
		for _, c := range report.CounterRows {
			ct.Add(report.Str(c.Label), report.Str(c.Stat), report.CounterCell(res, c.Stat))
		}
		dv.Counters = tableOf(ct, "counters")
	}
	if d.Timeline != nil {
		var buf bytes.Buffer
		title := fmt.Sprintf("%s, device %d", baseName(file), d.Device)
		if err := rplot.Write(&buf, d.Timeline, rplot.SVG, rplot.Options{Title: title}); err != nil {
			return dv, err
		}
		dv.Plot = template.HTML(inlineSVG(buf.String()))
	} else {
		dv.PlotNote = "This device has no trace, so there is no history to draw: PyTorch records one only after torch.cuda.memory._record_memory_history()."
	}
	if d.Peak != nil {
		dv.Peak = peakOf(d)
	}
	if d.OOMs != nil {
		for _, o := range d.OOMs.OOMs {
			dv.OOMs = append(dv.OOMs, oomOf(o, entries(d)))
		}
		if len(d.OOMs.OOMs) == 0 {
			dv.OOMNote = "The trace records no out-of-memory error."
		}
	}
	if d.Segments != nil {
		dv.Segments = segmentsOf(d.Segments, entries(d))
	}
	return dv, nil
}

func entries(d *Device) int {
	if d.Result != nil {
		return d.Result.History.Entries
	}
	return 0
}

func baseName(p string) string {
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		return p[i+1:]
	}
	return p
}

// inlineSVG drops the XML prolog and comment gonum writes before the
// <svg> element, which have no place inside HTML.
func inlineSVG(s string) string {
	if i := strings.Index(s, "<svg"); i >= 0 {
		s = s[i:]
	}
	return s
}

func peakOf(d *Device) *peakView {
	p := d.Peak
	pv := &peakView{When: report.MomentText(p.Allocated, p.Entries)}
	// The same table and labels as `memstat peak`.
	pv.Table = tableOf(report.GroupTable(d.Groups, d.Rest, analysis.ByStack, p.LiveBytes, true, "peak"), "groups")
	labels := report.GroupLabels(d.Groups, analysis.ByStack)
	for i, g := range d.Groups {
		pv.Stacks = append(pv.Stacks, stackView{
			Rank: i + 1, Label: labels[i], Bytes: report.Size(g.Bytes),
			Lines: clipLines(report.StackLines(g.Stack, g.HiddenFrames, false)),
		})
	}
	if p.BeforeTrace.Blocks > 0 {
		pv.Before = fmt.Sprintf("%s in %d blocks of it was allocated before the trace began.", report.Size(p.BeforeTrace.Bytes), p.BeforeTrace.Blocks)
	}
	return pv
}

func oomOf(o analysis.OOM, n int) oomView {
	ov := oomView{When: report.AtEntryText(o.Moment, n), Verdict: string(o.Verdict), Explanation: report.VerdictText(&o), Message: o.Message}
	ov.Facts = [][2]string{
		{"Requested (rounded)", report.Size(o.Requested)},
		{"Pool, stream", fmt.Sprintf("%s, %d", o.Pool, o.Stream)},
		{"Allocated", report.Size(o.Allocated)},
		{"Reserved", report.Size(o.Reserved)},
		{"Free in the cache", fmt.Sprintf("%s in %d blocks (largest %s; largest in the pool %s)", report.Size(o.FreeBytes), o.FreeBlocks, report.Size(o.LargestFree), report.Size(o.LargestInPool))},
		{"Free on the device", report.Size(o.DeviceFree)},
	}
	if o.Shortfall > 0 {
		ov.Facts = append(ov.Facts, [2]string{"Missing with every free byte counted", report.Size(o.Shortfall)})
	}
	ov.Advice = report.AdviceText(&o)
	ov.Stack = clipLines(report.StackLines(o.Stack, o.HiddenFrames, false))
	return ov
}

func segmentsOf(m *analysis.SegmentMap, n int) *segView {
	sv := &segView{When: report.MomentText(m.Moment, n)}
	if m.Final {
		sv.When = "the snapshot's final state"
	}
	sv.Total = fmt.Sprintf("%d segments, %s reserved, %s allocated, %s free", len(m.Segments), report.Size(m.Total.Size), report.Size(m.Total.Allocated), report.Size(m.Total.Free))
	segs := m.Segments
	if len(segs) > MaxSegments {
		segs = slices.Clone(segs)
		slices.SortStableFunc(segs, func(a, b analysis.SegmentInfo) int { return int(min(max(b.Size-a.Size, -1), 1)) })
		sv.Omitted = len(segs) - MaxSegments
		segs = segs[:MaxSegments]
		slices.SortFunc(segs, func(a, b analysis.SegmentInfo) int {
			if a.Address < b.Address {
				return -1
			}
			return 1
		})
	}
	var largest int64
	for _, s := range segs {
		largest = max(largest, s.Size)
	}
	for _, s := range segs {
		row := segRow{
			Address: fmt.Sprintf("%#x", s.Address), Size: report.Size(s.Size),
			Allocated: report.Size(s.Allocated), Free: report.Size(s.Free), LargestFree: report.Size(s.LargestFree),
			Frag: report.Percent(s.Fragmentation()), Pool: s.Pool, Site: analysis.FrameString(s.Site),
			Width: fmt.Sprintf("%.3f%%", 100*float64(s.Size)/float64(max(largest, 1))),
		}
		if s.Expandable {
			row.Pool += ", expandable"
		}
		row.Runs = runsOf(s)
		sv.Rows = append(sv.Rows, row)
	}
	return sv
}

// runsOf turns a segment's blocks into runs of one state, so a segment of
// thousands of small blocks stays a handful of elements.
func runsOf(s analysis.SegmentInfo) []run {
	var out []run
	var cur string
	var bytes, blocks int64
	flush := func() {
		if blocks == 0 {
			return
		}
		title := fmt.Sprintf("%s: %s in %d block", cur, report.Size(bytes), blocks)
		if blocks > 1 {
			title += "s"
		}
		out = append(out, run{Class: cur, Width: fmt.Sprintf("%.4f%%", 100*float64(bytes)/float64(max(s.Size, 1))), Title: title})
	}
	for _, b := range s.Blocks {
		class := "free"
		switch b.State {
		case snapshot.ActiveAllocated:
			class = "allocated"
		case snapshot.ActivePendingFree:
			class = "pending"
		}
		if class != cur {
			flush()
			cur, bytes, blocks = class, 0, 0
		}
		bytes += b.Size
		blocks++
	}
	flush()
	return out
}

// MaxLine bounds a stack line of the page: a C++ frame's demangled name
// can run to kilobytes, and a page of many such stacks would not stay
// small enough to attach to an issue.
const MaxLine = 300

func clipLines(lines []string) []string {
	for i, l := range lines {
		if len(l) > MaxLine {
			lines[i] = l[:MaxLine] + "…"
		}
	}
	return lines
}
