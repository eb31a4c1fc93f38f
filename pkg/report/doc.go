package report

import (
	"fmt"
	"io"
	"strings"
)

// Doc writes a report made of section titles, lines of text, tables,
// preformatted blocks and lists, as plain text or as markdown (what a PR
// comment shows). Blocks (tables, preformatted text, lists) get a blank
// line before and after them; consecutive lines do not. The first write
// error sticks and Err returns it.
type Doc struct {
	w        io.Writer
	markdown bool
	err      error
	last     docPart
}

type docPart uint8

const (
	partNone docPart = iota
	partLine
	partBlock
	partGap
)

// NewDoc starts a document in a text format (Markdown, or Text for
// anything else).
func NewDoc(w io.Writer, f Format) *Doc {
	return &Doc{w: w, markdown: f == Markdown}
}

// Markdown reports whether the document is markdown.
func (d *Doc) Markdown() bool { return d.markdown }

func (d *Doc) printf(format string, args ...any) {
	if d.err != nil {
		return
	}
	_, d.err = fmt.Fprintf(d.w, format, args...)
}

// Gap ends what came before with a blank line, once.
func (d *Doc) Gap() {
	if d.last == partLine || d.last == partBlock {
		d.printf("\n")
		d.last = partGap
	}
}

// Section starts a titled section (a heading in markdown).
func (d *Doc) Section(title string) {
	d.Gap()
	if d.markdown {
		d.printf("### %s\n\n", Escape(title))
		d.last = partGap
		return
	}
	d.printf("%s\n", Escape(title))
	d.last = partLine
}

// Line writes one line of text; in markdown each line is a paragraph of
// its own, so that markdown does not join them.
func (d *Doc) Line(format string, args ...any) {
	if d.last == partBlock {
		d.Gap()
	}
	d.printf("%s\n", fmt.Sprintf(format, escapeArgs(args)...))
	d.last = partLine
	if d.markdown {
		d.Gap()
	}
}

// Table writes a table as a block.
func (d *Doc) Table(t *Table) {
	d.Gap()
	if d.err == nil {
		f := Text
		if d.markdown {
			f = Markdown
		}
		d.err = t.Render(d.w, f)
	}
	d.last = partBlock
}

// BeginBlock starts a block the caller writes itself, a table streamed
// row by row say, and returns where to write it; EndBlock ends it with the
// block's first write error.
func (d *Doc) BeginBlock() io.Writer {
	d.Gap()
	d.last = partBlock
	return d.w
}

// EndBlock ends a block BeginBlock started; err is its write error, if
// any.
func (d *Doc) EndBlock(err error) {
	if d.err == nil {
		d.err = err
	}
}

// Pre writes lines verbatim as a block: indented by two spaces in text, a
// code block in markdown.
func (d *Doc) Pre(lines []string) {
	d.Gap()
	if d.markdown {
		d.printf("```\n%s\n```\n", strings.Join(escapeAll(lines), "\n"))
	} else {
		for _, l := range lines {
			d.printf("  %s\n", Escape(l))
		}
	}
	d.last = partBlock
}

// List writes bullet points as a block.
func (d *Doc) List(items []string) {
	d.Gap()
	for _, it := range items {
		d.printf("- %s\n", Escape(it))
	}
	d.last = partBlock
}

// Err returns the first write error.
func (d *Doc) Err() error { return d.err }

// escapeArgs escapes the string and error arguments of a Line: the
// format is memstat's own, the strings may come from the file.
func escapeArgs(args []any) []any {
	out := args
	copied := false
	for i, a := range args {
		var s string
		switch a := a.(type) {
		case string:
			s = a
		case error:
			s = a.Error()
		default:
			continue
		}
		e := Escape(s)
		if e == s {
			continue
		}
		if !copied {
			out = append([]any(nil), args...)
			copied = true
		}
		out[i] = e
	}
	return out
}

func escapeAll(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = Escape(l)
	}
	return out
}
