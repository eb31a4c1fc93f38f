package webview

import (
	"encoding/json"
	"strings"

	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/snapshot"
	"github.com/memstat/memstat/pkg/view"
)

// Page returns the page, its style and script inline; data, when not
// empty, is the JSON of a StaticData that the page reads instead of
// asking a server.
func Page(data string) string {
	block := ""
	if data != "" {
		// Inside a script element only "</" could end it early.
		block = `<script type="application/json" id="memstat-data">` + strings.ReplaceAll(data, "</", `<\/`) + `</script>`
	}
	r := strings.NewReplacer("{{CSS}}", pageCSS, "{{JS}}", pageJS, "{{DATA}}", block)
	return r.Replace(pageHTML)
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

// Static resolutions: wide enough for a screen, small enough that a page
// stays within a few megabytes whatever the trace (columns x bands).
const (
	StaticWidth      = 1600
	StaticBands      = 60
	StaticGroupBands = 16
)

// Static computes the inlined data of a report for some devices' models.
func Static(file string, s *snapshot.Snapshot, models []*view.Model) (*StaticData, error) {
	d := &StaticData{Info: Info{File: file, First: -1, Warnings: s.Warnings, Settings: Settings(s)}, Devices: map[int]*StaticDevice{}}
	built := map[int]bool{}
	for _, m := range models {
		built[m.Replayed.Device] = true
		sd := &StaticDevice{Overview: Overview(m), Windows: map[string]*view.Window{}, Allocs: map[int]view.Allocation{}}
		for _, by := range []analysis.GroupBy{view.ByAllocation, analysis.ByStack, analysis.ByFrame, analysis.ByFile, analysis.ByAnnotation, view.ByPool} {
			top := StaticGroupBands
			if by == view.ByAllocation {
				top = StaticBands
			}
			w, err := m.Window(view.Request{To: -1, Width: StaticWidth, By: by, Top: top})
			if err != nil {
				return nil, err
			}
			sd.Windows[string(by)] = w
			if by == view.ByAllocation {
				for _, b := range w.Bands {
					sd.Allocs[b.ID] = m.Describe(b.ID)
				}
			}
		}
		if k := sd.Overview.Marks.PeakAllocation; k >= 0 {
			sd.Allocs[k] = m.Describe(k)
		}
		d.Devices[m.Replayed.Device] = sd
	}
	for dev := range s.Devices() {
		n := len(s.Trace(dev))
		d.Info.Devices = append(d.Info.Devices, Device{Device: dev, Entries: n, Traced: n > 0 && built[dev]})
	}
	return d, nil
}

// StaticPage is the page with a report's data inlined.
func StaticPage(d *StaticData) (string, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return "", err
	}
	return Page(string(b)), nil
}
