package webview

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/snapshot"
	"github.com/memstat/memstat/pkg/view"
)

// Page returns the whole page of memstat view: the view (Fragment) in an
// HTML document.
func Page(data string) string {
	return strings.Replace(pageHTML, "{{VIEW}}", Fragment(data), 1)
}

// Fragment is the view to put inside another page (the report): its
// style, its panes and its script, all inline. data, when not empty, is
// the JSON of a StaticData that the script reads instead of asking a
// server.
func Fragment(data string) string {
	var b strings.Builder
	b.WriteString("<style>\n" + pageCSS + "</style>\n")
	b.WriteString(bodyHTML)
	if data != "" {
		// Inside a script element only "</" could end it early.
		b.WriteString(`<script type="application/json" id="memstat-data">` + strings.ReplaceAll(data, "</", `<\/`) + "</script>\n")
	}
	b.WriteString("<script>\n" + pageJS + "</script>\n")
	return b.String()
}

// StaticData is what a report inlines: per device the overview and one
// window of the whole trace per grouping, and the details of every
// allocation drawn as a band.
type StaticData struct {
	Info    Info                  `json:"info"`
	Devices map[int]*StaticDevice `json:"devices"`
}

// StaticDevice is one device of StaticData.
type StaticDevice struct {
	Overview *OverviewData           `json:"overview"`
	Windows  map[string]*view.Window `json:"windows"`
	Allocs   map[int]view.Allocation `json:"allocs"`
}

// What a report inlines is bounded whatever the trace, so that the page
// stays within a few megabytes: at most StaticDevices devices, StaticCols
// columns shared among them (StaticWidth at most each), StaticBands
// allocation bands and StaticGroupBands groups per window, StaticFrames
// frames per stack and StaticPhases annotated ranges per device.
const (
	StaticDevices    = 4
	StaticCols       = 1600
	StaticWidth      = 1200
	StaticBands      = 60
	StaticGroupBands = 12
	StaticFrames     = 30
	StaticPhases     = 500
	StaticText       = 200
)

// Static is a report's inlined data: devices lists the devices with a
// trace, build makes the model of one (called once per device, in turn, so
// that one model is held at a time). Devices past StaticDevices are
// listed without data.
func Static(file string, s *snapshot.Snapshot, devices []int, build func(device int) (*view.Model, error)) (*StaticData, error) {
	d := &StaticData{Info: Info{File: file, First: -1, Warnings: s.Warnings, Settings: Settings(s)}, Devices: map[int]*StaticDevice{}}
	if len(d.Info.Warnings) > 20 {
		d.Info.Warnings = d.Info.Warnings[:20]
	}
	kept := devices[:min(len(devices), StaticDevices)]
	width := min(StaticWidth, StaticCols/max(len(kept), 1))
	for _, dev := range kept {
		m, err := build(dev)
		if err != nil {
			return nil, err
		}
		sd, err := staticDevice(m, width)
		if err != nil {
			return nil, err
		}
		d.Devices[dev] = sd
	}
	for dev := range s.Devices() {
		n := s.Trace(dev).Len()
		_, ok := d.Devices[dev]
		d.Info.Devices = append(d.Info.Devices, Device{Device: dev, Entries: n, Traced: ok})
	}
	return d, nil
}

func staticDevice(m *view.Model, width int) (*StaticDevice, error) {
	ov := Overview(m)
	for i := range ov.Phases {
		if len(ov.Phases[i].Name) > StaticText {
			ov.Phases[i].Name = ov.Phases[i].Name[:StaticText] + "…"
		}
	}
	if len(ov.Phases) > StaticPhases {
		// The longest ranges, in their order.
		ph := slices.Clone(ov.Phases)
		slices.SortStableFunc(ph, func(x, y view.Phase) int { return (y.To - y.From) - (x.To - x.From) })
		cut := ph[StaticPhases-1].To - ph[StaticPhases-1].From
		kept := ov.Phases[:0]
		for _, p := range ov.Phases {
			if p.To-p.From > cut || p.To-p.From == cut && len(kept) < StaticPhases {
				kept = append(kept, p)
			}
		}
		ov.Phases = kept[:min(len(kept), StaticPhases)]
	}
	sd := &StaticDevice{Overview: ov, Windows: map[string]*view.Window{}, Allocs: map[int]view.Allocation{}}
	describe := func(k int) {
		a := m.Describe(k)
		if len(a.Stack) > StaticFrames {
			a.Hidden += len(a.Stack) - StaticFrames
			a.Stack, a.User = a.Stack[:StaticFrames], a.User[:StaticFrames]
		}
		for i, f := range a.Stack {
			if len(f) > StaticText {
				a.Stack[i] = f[:StaticText] + "…"
			}
		}
		sd.Allocs[k] = a
	}
	for _, by := range []analysis.GroupBy{view.ByAllocation, analysis.ByStack, analysis.ByFrame, analysis.ByFile, analysis.ByAnnotation, view.ByPool} {
		top := StaticGroupBands
		if by == view.ByAllocation {
			top = StaticBands
		}
		w, err := m.Window(view.Request{To: -1, Width: width, By: by, Top: top})
		if err != nil {
			return nil, err
		}
		for i := range w.Bands {
			if len(w.Bands[i].Label) > StaticText {
				w.Bands[i].Label = w.Bands[i].Label[:StaticText] + "…"
			}
			w.Bands[i].Key = ""
		}
		if by != view.ByAllocation {
			// The columns are the same for every grouping: the page
			// takes them from the allocation window.
			w.First, w.Sample, w.AllocMin, w.AllocMax, w.Allocated, w.Reserved, w.ReservedMax, w.PrivateReserved = nil, nil, nil, nil, nil, nil, nil, nil
		}
		sd.Windows[string(by)] = w
		if by == view.ByAllocation {
			for _, b := range w.Bands {
				describe(b.ID)
			}
		}
	}
	if k := ov.Marks.PeakAllocation; k >= 0 {
		describe(k)
	}
	return sd, nil
}

// StaticPage is the page with a report's data inlined.
func StaticPage(d *StaticData) (string, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return "", err
	}
	return Page(string(b)), nil
}

// StaticFragment is the view with a report's data inlined, to put in the
// report's page.
func StaticFragment(d *StaticData) (string, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return "", err
	}
	return Fragment(string(b)), nil
}
