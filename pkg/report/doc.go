package report

import (
	"fmt"
	"io"
	"strings"
)

// Doc writes a report made of titles, paragraphs, tables and preformatted
// blocks, as plain text or as markdown (what a PR comment shows). The
// first write error sticks and Err returns it.
type Doc struct {
	w        io.Writer
	markdown bool
	err      error
	// blank is true when the last thing written ended with a blank line
	// (or nothing was written yet).
	blank bool
	begun bool
}

// NewDoc starts a document in a text format (Markdown, or Text for
// anything else).
func NewDoc(w io.Writer, f Format) *Doc {
	return &Doc{w: w, markdown: f == Markdown, blank: true}
}

// Markdown reports whether the document is markdown.
func (d *Doc) Markdown() bool { return d.markdown }

func (d *Doc) printf(format string, args ...any) {
	if d.err != nil {
		return
	}
	_, d.err = fmt.Fprintf(d.w, format, args...)
}

// Section starts a titled section, separated from what came before by a
// blank line.
func (d *Doc) Section(title string) {
	d.Gap()
	if d.markdown {
		d.printf("### %s\n\n", title)
		d.blank = true
	} else {
		d.printf("%s\n", title)
		d.blank = false
	}
	d.begun = true
}

// Line writes one line of text; in markdown each line is a paragraph of
// its own, so that markdown does not join them.
func (d *Doc) Line(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if d.markdown {
		d.printf("%s\n\n", s)
		d.blank = true
	} else {
		d.printf("%s\n", s)
		d.blank = false
	}
	d.begun = true
}

// Gap ends the current block with a blank line, once.
func (d *Doc) Gap() {
	if d.begun && !d.blank {
		d.printf("\n")
	}
	d.blank = true
}

// Table writes a table as its own block.
func (d *Doc) Table(t *Table) {
	d.Gap()
	if d.err != nil {
		return
	}
	f := Text
	if d.markdown {
		f = Markdown
	}
	d.err = t.Render(d.w, f)
	d.blank = false
	d.begun = true
}

// Pre writes lines verbatim, indented by two spaces in text and as a code
// block in markdown.
func (d *Doc) Pre(lines []string) {
	d.Gap()
	if d.markdown {
		d.printf("```\n%s\n```\n", strings.Join(lines, "\n"))
	} else {
		for _, l := range lines {
			d.printf("  %s\n", l)
		}
	}
	d.blank = false
	d.begun = true
}

// List writes bullet points.
func (d *Doc) List(items []string) {
	d.Gap()
	for _, it := range items {
		d.printf("- %s\n", it)
	}
	d.blank = false
	d.begun = true
}

// Err returns the first write error.
func (d *Doc) Err() error { return d.err }
