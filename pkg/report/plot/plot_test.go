package plot

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"html"
	"image/png"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot/font"

	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/internal/golden"
	"github.com/memstat/memstat/internal/testsnap"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/snapshot"
	"github.com/memstat/memstat/pkg/timeline"
)

func fixtureTimeline(t *testing.T, pools bool) *timeline.Timeline {
	t.Helper()
	fx := testsnap.Build(t)
	tl, err := timeline.Build(fx.Snapshot, timeline.Options{Pools: pools})
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// svgContent parses an SVG document and returns its element counts and
// all its text.
func svgContent(t *testing.T, data []byte) (map[string]int, string) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	counts := map[string]int{}
	var text strings.Builder
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch v := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = v.Name.Local
			}
			counts[v.Name.Local]++
		case xml.CharData:
			text.Write(v)
			text.WriteByte(' ')
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	return counts, text.String()
}

func TestSVG(t *testing.T) {
	tl := fixtureTimeline(t, true)
	var buf bytes.Buffer
	if err := Write(&buf, tl, SVG, Options{Title: "fixture.pickle, device 0"}); err != nil {
		t.Fatal(err)
	}
	counts, text := svgContent(t, buf.Bytes())
	if counts["path"] < 10 || counts["text"] < 10 {
		t.Errorf("SVG has %d paths and %d texts; want lines, glyphs and labels", counts["path"], counts["text"])
	}
	for _, want := range []string{
		"fixture.pickle, device 0", "memory (GiB)", "seconds since the first trace entry",
		"allocated", "reserved", "active", "allocated, small pool", "reserved, large pool",
		"peak allocated 1.7 GiB", "out of memory", "OOM: 8.0 GiB requested", "annotated phase", "step",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("SVG text lacks %q", want)
		}
	}
}

func TestPNG(t *testing.T) {
	tl := fixtureTimeline(t, false)
	var buf bytes.Buffer
	if err := Write(&buf, tl, PNG, Options{Title: "fixture"}); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	if b.Dx() != 1056 || b.Dy() != 432 {
		t.Errorf("PNG is %dx%d, want 1056x432", b.Dx(), b.Dy())
	}
	// A picture, not a blank page: many distinct colours (lines, legend,
	// shading, anti-aliased text).
	colours := map[[4]uint32]bool{}
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, a := img.At(x, y).RGBA()
			colours[[4]uint32{r, g, bl, a}] = true
		}
	}
	if len(colours) < 20 {
		t.Errorf("PNG has %d distinct colours; looks blank", len(colours))
	}
}

func TestUnitAndTicks(t *testing.T) {
	for _, c := range []struct {
		max  int64
		unit string
	}{{3 << 30, "GiB"}, {1 << 30, "GiB"}, {500 << 20, "MiB"}, {4096, "KiB"}} {
		if u, _ := unit(c.max); u != c.unit {
			t.Errorf("unit(%d) = %s, want %s", c.max, u, c.unit)
		}
	}
	ticks := ticker{}.Ticks(0, 83.4)
	var labels []string
	for _, tk := range ticks {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, " "); got != "0 20 40 60 80" {
		t.Errorf("labelled ticks %q, want 0 20 40 60 80", got)
	}
	ticks = ticker{}.Ticks(0, 0.93)
	labels = labels[:0]
	for _, tk := range ticks {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, " "); got != "0.0 0.2 0.4 0.6 0.8" {
		t.Errorf("labelled ticks %q, want 0.0 0.2 0.4 0.6 0.8", got)
	}
}

func TestFormatOf(t *testing.T) {
	for name, want := range map[string]Format{"a.svg": SVG, "b.PNG": PNG} {
		if f, err := FormatOf(name); err != nil || f != want {
			t.Errorf("FormatOf(%s) = %s, %v", name, f, err)
		}
	}
	if _, err := FormatOf("c.pdf"); err == nil {
		t.Error("FormatOf(c.pdf) succeeded")
	}
}

// manyPhases is a recording with many short ranges: 20 numbered steps,
// each with forward, backward and optimizer ranges inside, and a few
// one-off ranges that start close together.
func manyPhases() *timeline.Timeline {
	tl := &timeline.Timeline{Series: []timeline.Series{{Key: "allocated", Name: "allocated",
		Points: []timeline.Point{{X: 0, Bytes: 1 << 30}, {X: 50, Bytes: 3 << 30}, {X: 100, Bytes: 2 << 30}}}}}
	tl.Peak.Index = -1
	for i := 1; i <= 20; i++ {
		x := float64(i * 4)
		tl.Phases = append(tl.Phases,
			timeline.Phase{Name: fmt.Sprintf("step %d", i), Start: x, End: x + 3.5},
			timeline.Phase{Name: "forward", Start: x + 0.1, End: x + 1.5},
			timeline.Phase{Name: "backward", Start: x + 1.6, End: x + 3},
			timeline.Phase{Name: "## optimizer.step ##", Start: x + 3.1, End: x + 3.4})
	}
	for i, name := range []string{"load checkpoint", "warmup", "compile model", "eval"} {
		tl.Phases = append(tl.Phases, timeline.Phase{Name: name, Start: 1 + float64(i)*0.3, End: 2 + float64(i)*0.3})
	}
	return tl
}

var svgText = regexp.MustCompile(`<text x="([-0-9.]+)" y="([-0-9.]+)"[^>]*\n?[^>]*font-size:8px;fill:#555555">([^<]*)</text>`)

// TestPhaseLabelsNeverOverlap: on a recording with many short ranges the
// repeated ones are named once (step 1..20, forward ×20) and no two phase
// names overlap in the SVG, read back from its text positions and the
// font's widths; the SVG and PNG are golden files.
func TestPhaseLabelsNeverOverlap(t *testing.T) {
	tl := manyPhases()
	var svg bytes.Buffer
	if err := Write(&svg, tl, SVG, Options{Title: "many phases"}); err != nil {
		t.Fatal(err)
	}
	face := font.DefaultCache.Lookup(font.From(sans, 8), 8)
	type box struct {
		name           string
		x0, x1, y0, y1 float64
	}
	var boxes []box
	names := map[string]bool{}
	for _, m := range svgText.FindAllStringSubmatch(svg.String(), -1) {
		x, _ := strconv.ParseFloat(m[1], 64)
		y, _ := strconv.ParseFloat(m[2], 64)
		w := float64(face.Width(html.UnescapeString(m[3])))
		boxes = append(boxes, box{m[3], x, x + w, y - 8, y})
		names[html.UnescapeString(m[3])] = true
	}
	for _, want := range []string{"step 1..20", "forward ×20", "backward ×20", "## optimizer.step ## ×20", "load checkpoint", "warmup", "compile model", "eval"} {
		if !names[want] {
			t.Errorf("no phase label %q; labels: %v", want, names)
		}
	}
	lanes := map[float64]bool{}
	for _, b := range boxes {
		lanes[b.y1] = true
	}
	if len(names) != 8 || len(lanes) < 4 {
		t.Errorf("%d phase labels in %d lanes, want 8 in 4 or more", len(names), len(lanes))
	}
	for i := range boxes {
		for j := range i {
			a, b := boxes[i], boxes[j]
			if a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1 {
				t.Errorf("labels %q and %q overlap: %+v %+v", a.name, b.name, a, b)
			}
		}
	}
	golden.Check(t, "many-phases.svg", svg.Bytes())
	var png bytes.Buffer
	if err := Write(&png, tl, PNG, Options{Title: "many phases"}); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "many-phases.png", png.Bytes())
}

// TestPhaseNamesThatDoNotFit: ten one-off ranges at the same place need
// ten lanes; six are drawn and the legend says four names are not shown.
func TestPhaseNamesThatDoNotFit(t *testing.T) {
	tl := manyPhases()
	tl.Phases = nil
	for i := range 10 {
		tl.Phases = append(tl.Phases, timeline.Phase{Name: fmt.Sprintf("range %c", 'a'+i), Start: 10 + float64(i)*0.1, End: 12})
	}
	var svg bytes.Buffer
	if err := Write(&svg, tl, SVG, Options{}); err != nil {
		t.Fatal(err)
	}
	if n := len(svgText.FindAllString(svg.String(), -1)); n != 6 || !strings.Contains(svg.String(), "annotated phase (4 names not shown)") {
		t.Errorf("%d names drawn; want 6 and the legend saying 4 are not shown", n)
	}
}

// TestPrivatePoolBand: a recording whose decode steps are CUDA graphs
// (`memstat record -w inference --cuda-graphs`) draws the memory reserved
// in private pools as a band of its own, named in the legend, whose top
// is the private pools' peak; a file without pools draws no such band.
// The SVG and PNG are golden files.
func TestPrivatePoolBand(t *testing.T) {
	path, _ := fixture.RecordArgs(t, "graphs.pickle", "-w", "inference", "--cuda-graphs", "--new-tokens", "8")
	s, err := snapshot.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := timeline.Build(s, timeline.Options{})
	if err != nil {
		t.Fatal(err)
	}
	band := tl.Find(timeline.PrivateKey)
	if band == nil {
		t.Fatal("no private-pool series")
	}
	res, err := analysis.Replay(s, 0)
	if err != nil {
		t.Fatal(err)
	}
	var top int64
	for _, p := range band.Points {
		top = max(top, p.Bytes)
	}
	if want := res.Result.Pools.Reserved.Peak; top != want || want == 0 || tl.PrivateBound != nil {
		t.Errorf("band tops at %d, the private pools' peak is %d (bound %v)", top, want, tl.PrivateBound)
	}
	var svg bytes.Buffer
	if err := Write(&svg, tl, SVG, Options{Title: "inference --cuda-graphs"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(svg.String(), "reserved in private pools (CUDA graphs, MemPool)") {
		t.Error("the legend does not name the private-pool band")
	}
	golden.Check(t, "cuda-graphs.svg", svg.Bytes())
	var png bytes.Buffer
	if err := Write(&png, tl, PNG, Options{Title: "inference --cuda-graphs"}); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "cuda-graphs.png", png.Bytes())

	plain := fixtureTimeline(t, false)
	if plain.Find(timeline.PrivateKey) != nil {
		t.Error("a file without private pools has a private-pool series")
	}
	svg.Reset()
	if err := Write(&svg, plain, SVG, Options{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(svg.String(), "private pools") {
		t.Error("a file without private pools has a private-pool legend entry")
	}
}

// TestPrivateLegendBound: where the trace does not name every pool the
// band is what the replay placed in private pools, and its legend gives
// the peak's bound.
func TestPrivateLegendBound(t *testing.T) {
	hi := int64(976 << 20)
	tl := &timeline.Timeline{PrivateBound: &replay.Bound{Min: 308 << 20, Max: &hi, Bytes: true}}
	if got := PrivateLegend(tl); got != "reserved in private pools, as replayed (the trace does not name every pool: peak 308.0 MiB-976.0 MiB)" {
		t.Errorf("legend %q", got)
	}
}
