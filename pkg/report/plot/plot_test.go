package plot

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"io"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/testsnap"
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
