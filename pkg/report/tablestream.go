package report

import (
	"io"

	"github.com/olekukonko/tablewriter/pkg/twwidth"
)

// TableStream writes a text or markdown table row by row, for listings too
// long to hold (memstat trace): it holds the first rows to size the
// columns, then writes each row as it comes. The layout is Table.Render's
// (a table of at most Hold rows comes out byte for byte the same); a cell
// after the held rows that is wider than its column pushes the rest of its
// own row to the right, and the columns stay where the held rows put them.
// Errors stick: after the first write error every call returns it.
type TableStream struct {
	w        io.Writer
	cols     []Column
	markdown bool
	hold     int
	held     [][]string
	widths   []int
	started  bool
	err      error
	line     []byte
}

// DefaultHold is how many rows a TableStream holds to size its columns: a
// few screens.
const DefaultHold = 200

// NewTableStream starts a table of cols in format f (Markdown, or Text for
// anything else) on w, holding the first hold rows (0: DefaultHold).
func NewTableStream(w io.Writer, f Format, cols []Column, hold int) *TableStream {
	if hold <= 0 {
		hold = DefaultHold
	}
	return &TableStream{w: w, cols: cols, markdown: f == Markdown, hold: hold}
}

// Row adds a row of cell texts (one per column; missing ones are empty).
// The slice may be reused by the caller once Row returns.
func (t *TableStream) Row(cells []string) error {
	if t.err != nil {
		return t.err
	}
	if !t.started {
		t.held = append(t.held, append([]string(nil), cells...))
		if len(t.held) >= t.hold {
			t.start()
		}
		return t.err
	}
	t.writeRow(cells)
	return t.err
}

// Start sizes the columns on the rows held so far and writes them without
// waiting for the hold to fill, for a listing whose rows come in slowly (a
// filter that keeps few of a streamed trace's entries); later rows are
// written as they come. It does nothing once started or while no row is
// held.
func (t *TableStream) Start() error {
	if t.err == nil && !t.started && len(t.held) > 0 {
		t.start()
	}
	return t.err
}

// Close writes the rows still held (a table shorter than the hold) and
// returns the first write error.
func (t *TableStream) Close() error {
	if t.err == nil && !t.started {
		t.start()
	}
	return t.err
}

// start sizes the columns on the header and the held rows and writes
// them.
func (t *TableStream) start() {
	t.started = true
	t.widths = make([]int, len(t.cols))
	for i, c := range t.cols {
		t.widths[i] = width(Escape(c.Name))
	}
	for _, r := range t.held {
		for i := range t.cols {
			if i < len(r) {
				t.widths[i] = max(t.widths[i], width(Escape(r[i])))
			}
		}
	}
	if t.markdown {
		// Markdown cells are at least one wide: a separator is at least
		// three dashes, padding included.
		for i := range t.widths {
			t.widths[i] = max(t.widths[i], 1)
		}
	}
	head := make([]string, len(t.cols))
	for i, c := range t.cols {
		head[i] = c.Name
	}
	t.writeRow(head)
	if t.markdown {
		t.line = append(t.line[:0], '|')
		for i, c := range t.cols {
			n := t.widths[i] + 2
			if c.Align == Right {
				t.line = appendRepeat(t.line, '-', n-1)
				t.line = append(t.line, ':')
			} else {
				t.line = append(t.line, ':')
				t.line = appendRepeat(t.line, '-', n-1)
			}
			t.line = append(t.line, '|')
		}
		t.line = append(t.line, '\n')
		t.write()
	}
	for _, r := range t.held {
		t.writeRow(r)
	}
	t.held = nil
}

// RowBytes is Row with the cells as bytes, for listings that format every
// row into one reused buffer (a trace of millions of entries): once the
// columns are sized, a row of printable ASCII cells is written without a
// string per cell. The cells may be reused once RowBytes returns.
func (t *TableStream) RowBytes(cells [][]byte) error {
	if t.err != nil {
		return t.err
	}
	if !t.started {
		row := make([]string, len(cells))
		for i, c := range cells {
			row[i] = string(c)
		}
		return t.Row(row)
	}
	writeRowOf(t, cells)
	return t.err
}

func (t *TableStream) writeRow(cells []string) { writeRowOf(t, cells) }

func writeRowOf[S ~string | ~[]byte](t *TableStream, cells []S) {
	if t.err != nil {
		return
	}
	b := t.line[:0]
	if t.markdown {
		b = append(b, '|')
	}
	for i := range t.cols {
		var s S
		if i < len(cells) {
			s = cells[i]
		}
		if printableASCII(s) {
			b = appendCellOf(t, b, i, s, len(s))
		} else {
			e := Escape(string(s)) // newlines too: one row, one line
			b = appendCellOf(t, b, i, e, width(e))
		}
	}
	if !t.markdown {
		// No trailing blanks (see Table.renderTable).
		for len(b) > 0 && b[len(b)-1] == ' ' {
			b = b[:len(b)-1]
		}
	}
	t.line = append(b, '\n')
	t.write()
}

// appendCellOf appends column i's cell s (w columns wide, escaped), padded
// and separated.
func appendCellOf[S ~string | ~[]byte](t *TableStream, b []byte, i int, s S, w int) []byte {
	c := t.cols[i]
	pad := t.widths[i] - w
	if t.markdown {
		b = append(b, ' ')
	}
	if c.Align == Right {
		b = appendRepeat(b, ' ', pad)
		b = append(b, s...)
	} else {
		b = append(b, s...)
		if t.markdown || i < len(t.cols)-1 {
			b = appendRepeat(b, ' ', pad)
		}
	}
	switch {
	case t.markdown:
		b = append(b, " |"...)
	case i < len(t.cols)-1:
		b = append(b, "  "...)
	}
	return b
}

// printableASCII reports whether s is all printable ASCII: such a cell
// needs no escaping and is as wide as it is long.
func printableASCII[S ~string | ~[]byte](s S) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

func (t *TableStream) write() {
	if t.err == nil {
		_, t.err = t.w.Write(t.line)
	}
}

// blanks pads cells a slice at a time: a listing pads every cell.
const blanks = "                                                                "

func appendRepeat(b []byte, c byte, n int) []byte {
	if c == ' ' {
		for ; n > len(blanks); n -= len(blanks) {
			b = append(b, blanks...)
		}
		return append(b, blanks[:max(n, 0)]...)
	}
	for ; n > 0; n-- {
		b = append(b, c)
	}
	return b
}

// width is the display width of s as Table.Render measures it; ASCII
// (nearly every cell) is one column a byte, without the measure's cache.
func width(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return twwidth.Width(s)
		}
	}
	return len(s)
}
