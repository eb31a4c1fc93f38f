package report

import (
	"strings"
	"testing"

	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/snapshot"
)

func TestSegmentBar(t *testing.T) {
	b := func(size int64, st snapshot.BlockState) snapshot.Block { return snapshot.Block{Size: size, State: st} }
	for _, c := range []struct {
		blocks []snapshot.Block
		width  int
		want   string
	}{
		{[]snapshot.Block{b(50, snapshot.ActiveAllocated), b(50, snapshot.Inactive)}, 4, "[##..]"},
		{[]snapshot.Block{b(25, snapshot.Inactive), b(25, snapshot.ActivePendingFree), b(50, snapshot.ActiveAllocated)}, 4, "[.=##]"},
		// A cell split half and half shows the live part.
		{[]snapshot.Block{b(30, snapshot.ActiveAllocated), b(70, snapshot.Inactive)}, 5, "[##...]"},
		{[]snapshot.Block{b(1, snapshot.ActiveAllocated), b(999, snapshot.Inactive)}, 4, "[....]"},
		{nil, 4, "[]"},
	} {
		if got := SegmentBar(c.blocks, c.width); got != c.want {
			t.Errorf("SegmentBar(%v, %d) = %q, want %q", c.blocks, c.width, got, c.want)
		}
	}
}

func TestGroupLabels(t *testing.T) {
	site := snapshot.Frame{Name: "forward", Filename: "/p/dit.py", Line: 125}
	g := func(inner snapshot.Frame, caller snapshot.Frame) analysis.Group {
		stack := []snapshot.Frame{site, caller}
		if inner != (snapshot.Frame{}) {
			stack = append([]snapshot.Frame{inner}, stack...)
		}
		return analysis.Group{Site: site, Stack: stack}
	}
	mlp44 := snapshot.Frame{Name: "forward", Filename: "/v/site-packages/timm/layers/mlp.py", Line: 44}
	mlp45 := snapshot.Frame{Name: "forward", Filename: "/v/site-packages/timm/layers/mlp.py", Line: 45}
	c1 := snapshot.Frame{Name: "run", Filename: "/p/train.py", Line: 1}
	c2 := snapshot.Frame{Name: "run", Filename: "/p/train.py", Line: 2}
	labels := GroupLabels([]analysis.Group{g(mlp44, c1), g(mlp45, c1), g(snapshot.Frame{}, c1), g(snapshot.Frame{}, c2)}, analysis.ByStack)
	want := []string{
		"p/dit.py:125 forward → timm/layers/mlp.py:44 forward",
		"p/dit.py:125 forward → timm/layers/mlp.py:45 forward",
		"p/dit.py:125 forward ← p/train.py:1 run",
		"p/dit.py:125 forward ← p/train.py:2 run",
	}
	for i := range want {
		if labels[i] != want[i] {
			t.Errorf("label %d = %q, want %q", i, labels[i], want[i])
		}
	}
	if l := GroupLabels([]analysis.Group{{Key: "forward"}}, analysis.ByAnnotation); l[0] != "forward" {
		t.Errorf("annotation label %q", l[0])
	}
}

func TestDoc(t *testing.T) {
	var b strings.Builder
	d := NewDoc(&b, Text)
	d.Section("title")
	d.Line("one")
	d.Line("two")
	d.Pre([]string{"pre"})
	d.Line("three")
	d.Section("next")
	if got, want := b.String(), "title\none\ntwo\n\n  pre\n\nthree\n\nnext\n"; got != want {
		t.Errorf("text doc %q, want %q", got, want)
	}
	b.Reset()
	d = NewDoc(&b, Markdown)
	d.Section("title")
	d.Line("one")
	d.Pre([]string{"pre"})
	d.List([]string{"a"})
	if got, want := b.String(), "### title\n\none\n\n```\npre\n```\n\n- a\n"; got != want {
		t.Errorf("markdown doc %q, want %q", got, want)
	}
}
