package plot

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/internal/testsnap"
	"github.com/memstat/memstat/pkg/snapshot"
)

func execPlot(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ios, _, out, errOut := iostreams.Test()
	cmd := NewCmdPlot(&command.Factory{IO: ios}, nil)
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

func TestFlags(t *testing.T) {
	for _, c := range []struct {
		args    []string
		wantErr string
		check   func(*Options) bool
	}{
		{[]string{"a.pickle", "-o", "m.png"}, "", func(o *Options) bool { return o.format == "png" && o.Device == -1 && !o.Pools }},
		{[]string{"a.pickle", "-o", "m.SVG", "--pools", "--device", "1", "--from", "1.5s", "--to", "900"}, "", func(o *Options) bool {
			return o.format == "svg" && o.Pools && o.Device == 1 && o.from.ByTime && o.to.Index == 900
		}},
		{[]string{"a.pickle"}, "-o OUT.svg or -o OUT.png is required", nil},
		{[]string{"a.pickle", "-o", "m.pdf"}, "use .svg or .png", nil},
		{[]string{"a.pickle", "-o", "m.png", "--from", "soon"}, "--from", nil},
		{[]string{"-o", "m.png"}, "want one snapshot", nil},
		{[]string{"a.pickle", "-o", "m.png", "--stacked"}, "", func(o *Options) bool { return o.Stacked && o.by == "stack" && o.Top == 8 }},
		{[]string{"a.pickle", "-o", "m.png", "--stacked", "--by", "pool", "--top", "3"}, "", func(o *Options) bool { return o.by == "pool" && o.Top == 3 }},
		{[]string{"a.pickle", "-o", "m.png", "--stacked", "--by", "colour"}, "--by", nil},
		{[]string{"a.pickle", "-o", "m.png", "--stacked", "--top", "0"}, "--top", nil},
		{[]string{"a.pickle", "-o", "m.png", "--by", "frame"}, "go with --stacked", nil},
	} {
		var got *Options
		ios, _, _, _ := iostreams.Test()
		cmd := NewCmdPlot(&command.Factory{IO: ios}, func(o *Options) error { got = o; return nil })
		cmd.SetArgs(c.args)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetOut(io.Discard)
		err := cmd.Execute()
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%v: err %v, want %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil || !c.check(got) {
			t.Errorf("%v: err %v, options %+v", c.args, err, got)
		}
	}
}

// TestRealPNG draws real training snapshots: a PNG of the expected size,
// and an SVG that parses as XML with paths and text.
func TestRealPNGAndSVG(t *testing.T) {
	for _, name := range []string{"sidsoc12", "bcrafton"} {
		in := realdata.File(t, name)
		dir := t.TempDir()
		pngPath, svgPath := filepath.Join(dir, "m.png"), filepath.Join(dir, "m.svg")
		stdout, _, err := execPlot(t, in, "-o", pngPath)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stdout, "peak allocated") || !strings.Contains(stdout, "annotated phase") {
			t.Errorf("%s: summary %q", name, stdout)
		}
		f, err := os.Open(pngPath)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if b := img.Bounds(); b.Dx() != 1056 || b.Dy() != 432 {
			t.Errorf("%s: PNG %v", name, b)
		}
		if _, _, err := execPlot(t, in, "-o", svgPath, "--pools"); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(svgPath)
		if err != nil {
			t.Fatal(err)
		}
		dec := xml.NewDecoder(bytes.NewReader(data))
		counts := map[string]int{}
		for {
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: SVG is not XML: %v", name, err)
			}
			if se, ok := tok.(xml.StartElement); ok {
				counts[se.Name.Local]++
			}
		}
		if counts["svg"] != 1 || counts["path"] < 10 || counts["text"] < 10 {
			t.Errorf("%s: SVG elements %v", name, counts)
		}
		if !bytes.Contains(data, []byte("reserved, large pool")) || !bytes.Contains(data, []byte(filepath.Base(in))) {
			t.Errorf("%s: SVG lacks the pool legend or the title", name)
		}
	}
}

func TestWindowAndErrors(t *testing.T) {
	fx := testsnap.Build(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "fixture.pickle")
	if err := snapshot.WriteFile(in, fx.Snapshot); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "w.svg")
	stdout, _, err := execPlot(t, in, "-o", out, "--from", "10", "--to", "20")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, "trace entries 10 to 20 of") {
		t.Errorf("summary %q", stdout)
	}
	// A snapshot without a trace has nothing to draw: one line naming
	// the file, and no picture.
	noTrace := *fx.Snapshot
	noTrace.Traces = nil
	in2 := filepath.Join(dir, "notrace.pickle")
	if err := snapshot.WriteFile(in2, &noTrace); err != nil {
		t.Fatal(err)
	}
	out2 := filepath.Join(dir, "none.png")
	if _, _, err := execPlot(t, in2, "-o", out2); err == nil || !strings.Contains(err.Error(), "notrace.pickle") || !strings.Contains(err.Error(), "no device has a trace") {
		t.Errorf("no trace: %v", err)
	}
	if _, err := os.Stat(out2); !os.IsNotExist(err) {
		t.Error("a failed plot left a file")
	}
	if _, _, err := execPlot(t, in, "-o", out, "--from", "1000000"); err == nil {
		t.Error("a window past the trace gave no error")
	}
	if _, _, err := execPlot(t, filepath.Join(dir, "missing.pickle"), "-o", out); err == nil || command.ExitCode(err) != command.ExitError {
		t.Errorf("missing file: %v", err)
	}
}

// TestStacked: --stacked draws one band per group, named in the legend
// (the spike's site among the top groups by frame), and the rest in grey.
func TestStacked(t *testing.T) {
	in := filepath.Join(t.TempDir(), "fixture.pickle")
	if err := snapshot.WriteFile(in, testsnap.Build(t).Snapshot); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "m.svg")
	if _, stderr, err := execPlot(t, in, "-o", out, "--stacked", "--by", "frame", "--top", "3"); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	svg := string(data)
	for _, want := range []string{"allocated by frame", "model.py:50 attention", "model.py:30 forward", "model.py:12 __init__", "more, summed"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the stacked SVG lacks %q", want)
		}
	}
	if strings.Contains(svg, "model.py:13 __init__") {
		t.Error("a group past --top 3 has a legend entry of its own")
	}
}

// TestNamesTheDevicesLeftOut: a picture of the first device says which
// other device ran out of memory and how to draw it; --device says nothing.
func TestNamesTheDevicesLeftOut(t *testing.T) {
	fx := testsnap.Build(t)
	s := fx.Snapshot
	// Device 1 has the whole run, OOM included; device 0 stops before it.
	full := s.Traces[0]
	s.Traces = []*snapshot.Trace{snapshot.TraceOf(full.Slice(0, fx.OOMIndex, nil)...), full}
	dir := t.TempDir()
	in := filepath.Join(dir, "two.pickle")
	if err := snapshot.WriteFile(in, s); err != nil {
		t.Fatal(err)
	}
	_, errOut, err := execPlot(t, in, "-o", filepath.Join(dir, "a.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut, "device 1 ran out of memory (once); use --device 1") {
		t.Errorf("stderr %q does not name device 1", errOut)
	}
	_, errOut, err = execPlot(t, in, "-o", filepath.Join(dir, "b.svg"), "--device", "1")
	if err != nil || strings.Contains(errOut, "use --device") {
		t.Errorf("--device 1: %v, stderr %q", err, errOut)
	}
}
