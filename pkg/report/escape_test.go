package report

import (
	"bytes"
	"strings"
	"testing"
)

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, 1.5 GiB": "plain text, 1.5 GiB",
		"µs and 日本":           "µs and 日本",
		"\x1b]0;title\x07":    `\x1b]0;title\x07`,
		"a\nb\tc\rd":          `a\nb\tc\rd`,
		"del\x7f c1\u009b":    `del\x7f c1\u009b`,
		"bad \xff utf8":       `bad \ufffd utf8`,
		"":                    "",
	} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
	// Tables and Docs escape what they print.
	var b bytes.Buffer
	d := NewDoc(&b, Text)
	d.Section("title \x1b[2J")
	d.Line("frame %s at %d", "f\x1b[31m\nforged", 3)
	tb := &Table{Columns: []Column{{Key: "name", Name: "Name"}}}
	tb.Add(Str("cell\x1b]0;x\x07"))
	d.Table(tb)
	d.Pre([]string{"pre\x1b[1m"})
	d.List([]string{"item\x9b"})
	if out := b.String(); strings.ContainsAny(out, "\x1b\x07\u009b") || strings.Contains(out, "\nforged") {
		t.Errorf("control characters in:\n%q", out)
	}
}
