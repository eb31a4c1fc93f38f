// Package plot draws a timeline (pkg/timeline) as a picture with gonum's
// plotting library: allocated, active and reserved memory over time, the
// peak and every out-of-memory error marked, annotated phases shaded, a
// legend and a grid. SVG and PNG.
package plot

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"
	"strings"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/memstat/memstat/pkg/report"
	"github.com/memstat/memstat/pkg/timeline"
)

// Format is a picture format.
type Format string

// Picture formats.
const (
	SVG Format = "svg"
	PNG Format = "png"
)

// FormatOf returns the format a file name asks for by its extension.
func FormatOf(name string) (Format, error) {
	lower := strings.ToLower(name)
	switch {
	case strings.HasSuffix(lower, ".svg"):
		return SVG, nil
	case strings.HasSuffix(lower, ".png"):
		return PNG, nil
	}
	return "", fmt.Errorf("%s: the picture format comes from the file name; use .svg or .png", name)
}

// Options style a picture.
type Options struct {
	// Title is the picture's title (the file name and device, say).
	Title string
	// Width and Height; 0 gives 11 x 4.5 inches (1056 x 432 pixels in
	// PNG).
	Width, Height vg.Length
	// Bands, if set, are stacked areas drawn under the lines (plot
	// --stacked: allocated memory by group).
	Bands *Bands
}

// Bands are stacked areas on the timeline's X axis: column c spans X[c]
// to X[c+1], and each layer holds its bytes per column, bottom layer
// first.
type Bands struct {
	X      []float64
	Layers []Layer
}

// Layer is one stacked area and its legend label.
type Layer struct {
	Label string
	Bytes []int64
	// Rest marks the layer that sums the groups not drawn apart (grey).
	Rest bool
}

// bandColours are distinct neighbours (Tableau's 10 and 2 more).
var bandColours = []color.Color{
	color.RGBA{0x4e, 0x79, 0xa7, 0xff}, color.RGBA{0xf2, 0x8e, 0x2b, 0xff}, color.RGBA{0x59, 0xa1, 0x4f, 0xff},
	color.RGBA{0xe1, 0x57, 0x59, 0xff}, color.RGBA{0x76, 0xb7, 0xb2, 0xff}, color.RGBA{0xed, 0xc9, 0x48, 0xff},
	color.RGBA{0xb0, 0x7a, 0xa1, 0xff}, color.RGBA{0xff, 0x9d, 0xa7, 0xff}, color.RGBA{0x9c, 0x75, 0x5f, 0xff},
	color.RGBA{0xba, 0xb0, 0xac, 0xff}, color.RGBA{0x86, 0xbc, 0xb6, 0xff}, color.RGBA{0xd3, 0x72, 0x95, 0xff},
}

// addBands stacks the layers as polygons, one per run of columns where
// the layer holds memory.
func addBands(p *gplot.Plot, b *Bands, scale float64) error {
	if b == nil || len(b.X) < 2 {
		return nil
	}
	n := len(b.X) - 1
	base := make([]float64, n)
	for li, l := range b.Layers {
		col := bandColours[li%len(bandColours)]
		if l.Rest {
			col = color.Gray{Y: 0xbb}
		}
		var first gplot.Thumbnailer
		for c := 0; c < n; {
			if l.Bytes[c] <= 0 {
				c++
				continue
			}
			var top, bottom plotter.XYs
			for ; c < n && l.Bytes[c] > 0; c++ {
				y0, y1 := base[c], base[c]+float64(l.Bytes[c])/scale
				top = append(top, plotter.XY{X: b.X[c], Y: y1}, plotter.XY{X: b.X[c+1], Y: y1})
				bottom = append(bottom, plotter.XY{X: b.X[c], Y: y0}, plotter.XY{X: b.X[c+1], Y: y0})
				base[c] = y1
			}
			for i := len(bottom) - 1; i >= 0; i-- {
				top = append(top, bottom[i])
			}
			poly, err := plotter.NewPolygon(top)
			if err != nil {
				return err
			}
			poly.Color = col
			poly.LineStyle.Width = 0
			poly.LineStyle.Color = color.Transparent
			p.Add(poly)
			if first == nil {
				first = poly
			}
		}
		if first != nil {
			p.Legend.Add(shortLabel(l.Label), first)
		}
	}
	return nil
}

// addPrivateBand shades the memory reserved in private pools (CUDA
// graphs, torch.cuda.MemPool) from the axis up, under the lines: that
// part of the reserved line is memory ordinary allocations cannot use.
// Nothing is drawn for a timeline without private pools.
func addPrivateBand(p *gplot.Plot, t *timeline.Timeline, scale float64) error {
	s := t.Find(timeline.PrivateKey)
	if s == nil || len(s.Points) == 0 {
		return nil
	}
	// A step outline: each value holds until the next point.
	var xys plotter.XYs
	for i, pt := range s.Points {
		y := float64(pt.Bytes) / scale
		if i > 0 {
			xys = append(xys, plotter.XY{X: pt.X, Y: xys[len(xys)-1].Y})
		}
		xys = append(xys, plotter.XY{X: pt.X, Y: y})
	}
	last := s.Points[len(s.Points)-1].X
	xys = append(xys, plotter.XY{X: last, Y: 0}, plotter.XY{X: s.Points[0].X, Y: 0})
	poly, err := plotter.NewPolygon(xys)
	if err != nil {
		return err
	}
	poly.Color = colPrivate
	poly.LineStyle.Width = 0
	poly.LineStyle.Color = color.Transparent
	p.Add(poly)
	p.Legend.Add(PrivateLegend(t), poly)
	return nil
}

// PrivateLegend names the private-pool band; where the trace leaves some
// segments' pool open the band is a lower bound and the label says by how
// much it may fall short.
func PrivateLegend(t *timeline.Timeline) string {
	if b := t.PrivateBound; b != nil {
		return "reserved in private pools, as replayed (the trace does not name every pool: peak " + b.Format(report.Size) + ")"
	}
	return "reserved in private pools (CUDA graphs, MemPool)"
}

// shortLabel keeps a legend entry on one line.
func shortLabel(s string) string {
	if len(s) > 60 {
		return s[:59] + "…"
	}
	return s
}

var (
	colAllocated = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colActive    = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	colReserved  = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	colPeak      = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colOOM       = color.RGBA{R: 0x8b, G: 0x00, B: 0x00, A: 0xff}
	colPhase     = color.NRGBA{R: 0xff, G: 0xc8, B: 0x00, A: 0x38}
	// colPrivate is view's private-pool colour (#7c3aed), light enough
	// that the lines read through it.
	colPrivate = color.NRGBA{R: 0x7c, G: 0x3a, B: 0xed, A: 0x70}
	colPool    = map[string]color.Color{
		"allocated_large": color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
		"allocated_small": color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
		"reserved_large":  color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
		"reserved_small":  color.RGBA{R: 0xbc, G: 0xbd, B: 0x22, A: 0xff},
	}
	sans = font.Font{Typeface: "Liberation", Variant: "Sans"}
)

// unit picks the byte unit of the Y axis: GiB from 1 GiB up, MiB below
// (KiB for very small runs).
func unit(max int64) (string, float64) {
	switch {
	case max >= 1<<30:
		return "GiB", 1 << 30
	case max >= 1<<20:
		return "MiB", 1 << 20
	}
	return "KiB", 1 << 10
}

// Build lays out the picture of a timeline.
func Build(t *timeline.Timeline, o Options) (*gplot.Plot, error) {
	p := gplot.New()
	setFonts(p)
	p.Title.Text = o.Title
	p.X.Label.Text = t.XLabel()
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(8)
	p.Legend.YOffs = -vg.Points(4)
	p.Legend.ThumbnailWidth = vg.Points(24)
	p.Legend.Padding = vg.Points(2)

	var max int64
	for _, s := range t.Series {
		for _, pt := range s.Points {
			if pt.Bytes > max {
				max = pt.Bytes
			}
		}
	}
	name, scale := unit(max)
	p.Y.Label.Text = "memory (" + name + ")"
	yTop := float64(max) / scale
	// Headroom for the legend and the peak label above the lines.
	p.Y.Min, p.Y.Max = 0, yTop*1.35
	if p.Y.Max == 0 {
		p.Y.Max = 1
	}
	xLo, xHi := 0.0, 1.0
	if s := t.Find("allocated"); s != nil && len(s.Points) > 0 {
		xLo, xHi = s.Points[0].X, s.Points[len(s.Points)-1].X
	}
	if xHi <= xLo {
		xHi = xLo + 1
	}
	p.X.Min, p.X.Max = xLo, xHi
	p.X.Tick.Marker = ticker{}
	p.Y.Tick.Marker = ticker{}

	grid := plotter.NewGrid()
	grid.Vertical.Color = color.Gray{Y: 0xdd}
	grid.Horizontal.Color = color.Gray{Y: 0xdd}
	p.Add(grid)

	// Phases first, under the lines.
	if len(t.Phases) > 0 {
		var first *plotter.Polygon
		for i, ph := range t.Phases {
			poly, err := plotter.NewPolygon(plotter.XYs{
				{X: ph.Start, Y: 0}, {X: ph.End, Y: 0}, {X: ph.End, Y: p.Y.Max}, {X: ph.Start, Y: p.Y.Max},
			})
			if err != nil {
				return nil, err
			}
			poly.Color = colPhase
			poly.LineStyle.Width = 0
			poly.LineStyle.Color = color.Transparent
			p.Add(poly)
			if i == 0 {
				first = poly
			}
		}
		dropped, lanes, err := phaseLabels(p, t.Phases, xLo, xHi, o)
		if err != nil {
			return nil, err
		}
		// The legend goes below the lanes of phase names.
		p.Legend.YOffs = -vg.Points(4) - vg.Length(lanes)*vg.Points(10)
		legend := "annotated phase"
		if dropped > 0 {
			legend = fmt.Sprintf("annotated phase (%d names not shown)", dropped)
		}
		p.Legend.Add(legend, first)
	}

	if err := addBands(p, o.Bands, scale); err != nil {
		return nil, err
	}
	if err := addPrivateBand(p, t, scale); err != nil {
		return nil, err
	}
	for _, s := range t.Series {
		if s.Key == timeline.PrivateKey {
			continue
		}
		xys := make(plotter.XYs, len(s.Points))
		for i, pt := range s.Points {
			xys[i] = plotter.XY{X: pt.X, Y: float64(pt.Bytes) / scale}
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		switch s.Key {
		case "allocated":
			line.Color, line.Width = colAllocated, vg.Points(1.6)
		case "active":
			line.Color, line.Width = colActive, vg.Points(1)
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		case "reserved":
			line.Color, line.Width = colReserved, vg.Points(1.6)
		default:
			line.Color, line.Width = colPool[s.Key], vg.Points(0.9)
			line.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		}
		p.Add(line)
		p.Legend.Add(s.Name, line)
	}

	if t.Peak.Index >= 0 {
		pk, err := plotter.NewScatter(plotter.XYs{{X: t.Peak.X, Y: float64(t.Peak.Bytes) / scale}})
		if err != nil {
			return nil, err
		}
		pk.GlyphStyle = draw.GlyphStyle{Color: colPeak, Radius: vg.Points(4), Shape: draw.CircleGlyph{}}
		p.Add(pk)
		p.Legend.Add("peak allocated "+report.Size(t.Peak.Bytes), pk)
		l, err := plotter.NewLabels(plotter.XYLabels{
			XYs:    plotter.XYs{{X: t.Peak.X, Y: float64(t.Peak.Bytes) / scale}},
			Labels: []string{"peak " + report.Size(t.Peak.Bytes)},
		})
		if err != nil {
			return nil, err
		}
		l.TextStyle[0].Font = font.From(sans, 9)
		l.TextStyle[0].Color = colPeak
		l.TextStyle[0].XAlign = draw.XCenter
		l.Offset = vg.Point{Y: vg.Points(7)}
		p.Add(l)
	}

	if len(t.OOMs) > 0 {
		xys := make(plotter.XYs, len(t.OOMs))
		for i, m := range t.OOMs {
			xys[i] = plotter.XY{X: m.X, Y: float64(m.Bytes) / scale}
			rule, err := plotter.NewLine(plotter.XYs{{X: m.X, Y: 0}, {X: m.X, Y: p.Y.Max}})
			if err != nil {
				return nil, err
			}
			rule.Color, rule.Width = colOOM, vg.Points(0.8)
			rule.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
			p.Add(rule)
		}
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: colOOM, Radius: vg.Points(5), Shape: draw.CrossGlyph{}}
		p.Add(sc)
		label := "out of memory"
		if len(t.OOMs) > 1 {
			label = fmt.Sprintf("out of memory (%d)", len(t.OOMs))
		}
		p.Legend.Add(label, sc)
		if len(t.OOMs) <= 5 {
			labels := make([]string, len(t.OOMs))
			for i, m := range t.OOMs {
				labels[i] = "OOM: " + report.Size(m.Requested) + " requested, " + report.Size(m.DeviceFree) + " free"
			}
			// Beside each OOM's rule, below the phase names.
			for i, m := range t.OOMs {
				l, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: m.X, Y: p.Y.Max * 0.93}}, Labels: labels[i : i+1]})
				if err != nil {
					return nil, err
				}
				l.TextStyle[0].Font = font.From(sans, 8)
				l.TextStyle[0].Color = colOOM
				l.TextStyle[0].XAlign = draw.XLeft
				l.Offset = vg.Point{X: vg.Points(3)}
				if m.X > xLo+0.6*(xHi-xLo) {
					l.TextStyle[0].XAlign = draw.XRight
					l.Offset.X = -vg.Points(3)
				}
				p.Add(l)
			}
		}
	}
	return p, nil
}

func setFonts(p *gplot.Plot) {
	p.Title.TextStyle.Font = font.From(sans, 13)
	p.Title.Padding = vg.Points(10)
	for _, ax := range []*gplot.Axis{&p.X, &p.Y} {
		ax.Label.TextStyle.Font = font.From(sans, 11)
		ax.Tick.Label.Font = font.From(sans, 9)
	}
	p.Legend.TextStyle.Font = font.From(sans, 9)
}

// maxLanes is how many lines of phase names the picture has room for
// above the lines; when the runs need more, the shortest are not named
// (the legend says how many).
const maxLanes = 6

// phaseLabels names the phases once per run of repeats (timeline.MergeRuns:
// "step 1..30") at the run's left edge, in lanes that never overlap
// (timeline.Lanes), each lane one line below the one before.
func phaseLabels(p *gplot.Plot, phases []timeline.Phase, xLo, xHi float64, o Options) (dropped, lanes int, err error) {
	runs := timeline.MergeRuns(phases)
	fnt := font.From(sans, 8)
	face := font.DefaultCache.Lookup(fnt, fnt.Size)
	width := o.Width
	if width == 0 {
		width = 11 * vg.Inch
	}
	// The data area is the picture less its margins and the Y axis.
	perPoint := (xHi - xLo) / float64(max(width-vg.Points(90), vg.Points(100)))
	boxes := make([]timeline.Box, len(runs))
	texts := make([]string, len(runs))
	right := make([]bool, len(runs))
	for i, r := range runs {
		texts[i] = shortName(r.Label)
		w := float64(face.Width(texts[i])+vg.Points(4)) * perPoint
		// At its left edge, or its right edge when it starts close to the
		// end of the axis.
		if r.Start > xLo+0.8*(xHi-xLo) {
			right[i] = true
			boxes[i] = timeline.Box{Start: r.End - w, End: r.End}
		} else {
			boxes[i] = timeline.Box{Start: r.Start, End: r.Start + w}
		}
	}
	// Drop the names of the shortest runs until the rest fit.
	keep := make([]bool, len(runs))
	for i := range keep {
		keep[i] = true
	}
	var lane []int
	for {
		var kept []timeline.Box
		var idx []int
		for i, b := range boxes {
			if keep[i] {
				kept = append(kept, b)
				idx = append(idx, i)
			}
		}
		l, n := timeline.Lanes(kept, 2*perPoint)
		if n <= maxLanes {
			lanes = n
			lane = make([]int, len(runs))
			for k, i := range idx {
				lane[i] = l[k]
			}
			break
		}
		shortest := -1
		for i, r := range runs {
			if keep[i] && (shortest < 0 || r.End-r.Start < runs[shortest].End-runs[shortest].Start) {
				shortest = i
			}
		}
		keep[shortest] = false
		dropped++
	}
	for i, r := range runs {
		if !keep[i] {
			continue
		}
		at, align, dx := r.Start, draw.XLeft, vg.Points(2)
		if right[i] {
			at, align, dx = r.End, draw.XRight, -vg.Points(2)
		}
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: at, Y: p.Y.Max}}, Labels: []string{texts[i]}})
		if err != nil {
			return 0, 0, err
		}
		l.TextStyle[0].Font = fnt
		l.TextStyle[0].Color = color.Gray{Y: 0x55}
		l.TextStyle[0].XAlign = align
		l.TextStyle[0].YAlign = draw.YTop
		l.Offset = vg.Point{X: dx, Y: -vg.Points(2) - vg.Length(lane[i])*vg.Points(10)}
		p.Add(l)
	}
	return dropped, lanes, nil
}

// shortName trims a record_function name ("Optimizer.step#AdamW.step")
// to what fits over a shaded span.
func shortName(s string) string {
	if i := strings.IndexByte(s, '#'); i > 0 {
		s = s[i+1:]
	}
	if len(s) > 28 {
		s = s[:27] + "…"
	}
	return s
}

// Write draws the timeline in a format.
func Write(w io.Writer, t *timeline.Timeline, f Format, o Options) error {
	p, err := Build(t, o)
	if err != nil {
		return err
	}
	width, height := o.Width, o.Height
	if width == 0 {
		width = 11 * vg.Inch
	}
	if height == 0 {
		height = 4.5 * vg.Inch
	}
	c, err := draw.NewFormattedCanvas(width, height, string(f))
	if err != nil {
		return err
	}
	// A margin all round: gonum puts the title flush with the top edge.
	margin := vg.Points(8)
	p.Draw(draw.Crop(draw.New(c), margin, -margin, margin, -margin))
	_, err = c.WriteTo(w)
	return err
}

// ticker puts about six labelled ticks at round values (1, 2 or 5 times a
// power of ten) and unlabelled ones between them.
type ticker struct{}

func (ticker) Ticks(lo, hi float64) []gplot.Tick {
	if hi <= lo {
		return []gplot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'g', 4, 64)}}
	}
	raw := (hi - lo) / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if step = m * mag; step >= raw {
			break
		}
	}
	minor := step / 5
	if step/mag == 2 || step/mag == 20 {
		minor = step / 4
	}
	prec := max(0, -int(math.Floor(math.Log10(step))))
	var ticks []gplot.Tick
	for v := math.Ceil(lo/minor) * minor; v <= hi+minor/1e6; v += minor {
		r := math.Round(v/minor) * minor
		t := gplot.Tick{Value: r}
		if q := r / step; math.Abs(q-math.Round(q)) < 1e-6 {
			t.Label = strconv.FormatFloat(r, 'f', prec, 64)
		}
		ticks = append(ticks, t)
	}
	return ticks
}
