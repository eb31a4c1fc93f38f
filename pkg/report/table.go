package report

import (
	"encoding/csv"
	"fmt"
	"io"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// Align is a column's alignment.
type Align uint8

// Column alignments: text left, numbers right.
const (
	Left Align = iota
	Right
)

// Column describes one table column. Key names the column in JSON and CSV
// output (snake_case); Name is the header people read.
type Column struct {
	Name  string
	Key   string
	Align Align
}

// Cell is one value: Raw goes to JSON and CSV, Text to text and markdown.
type Cell struct {
	Raw  any
	Text string
}

// Str is a text cell.
func Str(s string) Cell { return Cell{Raw: s, Text: s} }

// Int is a count cell.
func Int(n int64) Cell { return Cell{Raw: n, Text: fmt.Sprint(n)} }

// Bytes is a size cell: raw bytes, formatted as PyTorch prints sizes.
func Bytes(n int64) Cell { return Cell{Raw: n, Text: Size(n)} }

// DeltaBytes is a signed change of a size.
func DeltaBytes(n int64) Cell { return Cell{Raw: n, Text: SignedSize(n)} }

// Pct is a fraction shown as a percentage; Raw keeps the fraction.
func Pct(f float64) Cell { return Cell{Raw: f, Text: Percent(f)} }

// Table is rows of cells under named columns.
type Table struct {
	Columns []Column
	Rows    [][]Cell
}

// Add appends a row.
func (t *Table) Add(cells ...Cell) { t.Rows = append(t.Rows, cells) }

// Render writes the table in a format. JSON writes a list of objects keyed
// by column Key.
func (t *Table) Render(w io.Writer, f Format) error {
	switch f {
	case JSON:
		return WriteJSON(w, t.Records())
	case CSV:
		return t.renderCSV(w)
	case Markdown:
		return t.renderTable(w, true)
	default:
		return t.renderTable(w, false)
	}
}

// Records returns the rows as objects keyed by column Key, raw values.
func (t *Table) Records() []map[string]any {
	out := make([]map[string]any, 0, len(t.Rows))
	for _, r := range t.Rows {
		m := make(map[string]any, len(t.Columns))
		for i, c := range t.Columns {
			if i < len(r) {
				m[c.Key] = r[i].Raw
			}
		}
		out = append(out, m)
	}
	return out
}

func (t *Table) renderCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	head := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		head[i] = c.Key
	}
	if err := cw.Write(head); err != nil {
		return err
	}
	for _, r := range t.Rows {
		rec := make([]string, len(t.Columns))
		for i := range t.Columns {
			if i < len(r) {
				rec[i] = fmt.Sprint(r[i].Raw)
			}
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// plain reports whether every column has a name and every name and cell
// is printable ASCII without '|' or a blank at either end: the tables
// TableStream is checked to draw as tablewriter does.
func (t *Table) plain() bool {
	if len(t.Columns) == 0 {
		return false
	}
	ok := func(s string, empty bool) bool {
		if s == "" {
			return empty
		}
		if s[0] == ' ' || s[len(s)-1] == ' ' {
			return false
		}
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c >= 0x7f || c == '|' {
				return false
			}
		}
		return true
	}
	for _, c := range t.Columns {
		if !ok(c.Name, false) {
			return false
		}
	}
	for _, r := range t.Rows {
		if len(r) > len(t.Columns) {
			return false
		}
		for _, c := range r {
			if !ok(c.Text, true) {
				return false
			}
		}
	}
	return true
}

// renderTable draws the text table (plain columns, no borders, no trailing
// blanks: easy to read, grep and diff) or a markdown table.
func (t *Table) renderTable(w io.Writer, markdown bool) error {
	if t.plain() {
		// TableStream writes what tablewriter writes for such tables
		// (TestTableStreamMatchesTable), without measuring every cell
		// through tablewriter's cache: a quarter of `memstat segments`'
		// time went to drawing its table.
		f := Text
		if markdown {
			f = Markdown
		}
		ts := NewTableStream(w, f, t.Columns, len(t.Rows)+1)
		texts := make([]string, len(t.Columns))
		for _, r := range t.Rows {
			for j := range texts {
				texts[j] = ""
				if j < len(r) {
					texts[j] = r[j].Text
				}
			}
			if err := ts.Row(texts); err != nil {
				return err
			}
		}
		return ts.Close()
	}
	return t.renderTableWriter(w, markdown)
}

// renderTableWriter draws the table with tablewriter.
func (t *Table) renderTableWriter(w io.Writer, markdown bool) error {
	align := make([]tw.Align, len(t.Columns))
	head := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		head[i] = Escape(c.Name)
		align[i] = tw.AlignLeft
		if c.Align == Right {
			align[i] = tw.AlignRight
		}
	}
	rows := make([][]string, len(t.Rows))
	for i, r := range t.Rows {
		row := make([]string, len(t.Columns))
		for j := range t.Columns {
			if j < len(r) {
				row[j] = Escape(r[j].Text)
			}
		}
		rows[i] = row
	}
	opts := []tablewriter.Option{
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignmentConfig(tw.CellAlignment{PerColumn: align}),
		tablewriter.WithRowAlignmentConfig(tw.CellAlignment{PerColumn: align}),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithHeaderAutoWrap(tw.WrapNone),
		tablewriter.WithTrimSpace(tw.Off),
	}
	var buf strings.Builder
	if markdown {
		opts = append(opts, tablewriter.WithRenderer(renderer.NewMarkdown()))
	} else {
		pad := make([]tw.Padding, len(t.Columns))
		for i := range pad {
			pad[i] = tw.Padding{Right: "  ", Overwrite: true}
		}
		pad[len(pad)-1] = tw.Padding{Overwrite: true}
		opts = append(opts,
			tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{
				Borders: tw.BorderNone,
				Symbols: tw.NewSymbols(tw.StyleNone),
				Settings: tw.Settings{
					Separators: tw.Separators{BetweenColumns: tw.Off, BetweenRows: tw.Off},
					Lines:      tw.Lines{ShowHeaderLine: tw.Off},
				},
			})),
			tablewriter.WithHeaderPaddingPerColumn(pad),
			tablewriter.WithRowPaddingPerColumn(pad),
		)
	}
	tbl := tablewriter.NewTable(&buf, opts...)
	tbl.Header(head)
	if err := tbl.Bulk(rows); err != nil {
		return err
	}
	if err := tbl.Render(); err != nil {
		return err
	}
	// Trailing blanks make golden files brittle and pipes ugly.
	for _, line := range strings.SplitAfter(buf.String(), "\n") {
		if line == "" {
			continue
		}
		nl := strings.HasSuffix(line, "\n")
		line = strings.TrimRight(line, " \n")
		if nl {
			line += "\n"
		}
		if _, err := io.WriteString(w, line); err != nil {
			return err
		}
	}
	return nil
}
