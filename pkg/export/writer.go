package export

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// Format is a table format.
type Format string

// Table formats.
const (
	// CSV: a header row, then one row per record; empty cells for values
	// that do not apply.
	CSV Format = "csv"
	// JSON: one array of objects (null for values that do not apply).
	JSON Format = "json"
	// JSONL: one object per line (JSON Lines).
	JSONL Format = "jsonl"
)

// ParseFormat reads a format name.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case CSV, JSON, JSONL:
		return f, nil
	}
	return "", fmt.Errorf("%q is not a table format: choose csv, json or jsonl", s)
}

// Value is one cell: a string, an integer, a boolean, or nothing.
type Value struct {
	kind byte // 0 null, 's', 'i', 'b'
	s    string
	i    int64
}

// Null is a value that does not apply.
var Null = Value{}

// S, I, U and B make cells.
func S(s string) Value { return Value{kind: 's', s: s} }

// I is an integer cell.
func I(i int64) Value { return Value{kind: 'i', i: i} }

// U is an address cell (addresses fit int64: CUDA's are below 2^63).
func U(u uint64) Value { return Value{kind: 'i', i: int64(u)} }

// B is a boolean cell.
func B(b bool) Value {
	if b {
		return Value{kind: 'b', i: 1}
	}
	return Value{kind: 'b'}
}

// rowWriter streams rows in one format; nothing is held beyond a row.
type rowWriter struct {
	w    io.Writer
	f    Format
	cols []string
	keys [][]byte // JSON-encoded column names
	// bw buffers the CSV rows, each appended to buf as encoding/csv writes
	// it (appendCSVField) without a string per number.
	bw    *bufio.Writer
	field bytes.Buffer
	buf   []byte
	rows  int
	err   error
	first bool
}

func newRowWriter(w io.Writer, f Format, cols []string) *rowWriter {
	rw := &rowWriter{w: w, f: f, cols: cols, first: true}
	switch f {
	case CSV:
		rw.bw = bufio.NewWriter(w)
		vals := make([]Value, len(cols))
		for i, c := range cols {
			vals[i] = S(c)
		}
		rw.row(vals...)
		rw.rows = 0
	default:
		for _, c := range cols {
			k, _ := json.Marshal(c)
			rw.keys = append(rw.keys, k)
		}
		if f == JSON {
			_, rw.err = io.WriteString(w, "[")
		}
	}
	return rw
}

func (rw *rowWriter) row(vals ...Value) {
	if rw.err != nil {
		return
	}
	rw.rows++
	if rw.f == CSV {
		b := rw.buf[:0]
		for i, v := range vals {
			if i > 0 {
				b = append(b, ',')
			}
			switch v.kind {
			case 's':
				b = rw.appendCSVField(b, v.s)
			case 'i':
				b = strconv.AppendInt(b, v.i, 10)
			case 'b':
				b = strconv.AppendBool(b, v.i != 0)
			}
		}
		b = append(b, '\n')
		rw.buf = b
		_, rw.err = rw.bw.Write(b)
		return
	}
	b := rw.buf[:0]
	if rw.f == JSON {
		if rw.first {
			b = append(b, '\n')
		} else {
			b = append(b, ",\n"...)
		}
	}
	rw.first = false
	b = append(b, '{')
	for i, v := range vals {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, rw.keys[i]...)
		b = append(b, ':')
		switch v.kind {
		case 's':
			q, _ := json.Marshal(v.s)
			b = append(b, q...)
		case 'i':
			b = strconv.AppendInt(b, v.i, 10)
		case 'b':
			b = strconv.AppendBool(b, v.i != 0)
		default:
			b = append(b, "null"...)
		}
	}
	b = append(b, '}')
	if rw.f == JSONL {
		b = append(b, '\n')
	}
	rw.buf = b
	_, rw.err = rw.w.Write(b)
}

// appendCSVField appends s as a field of a record encoding/csv's Writer
// writes (comma, "\n" line ends): as it is when it is plain (printable
// ASCII without comma or quote, not starting with a blank, not the `\.`
// that ends a Postgres COPY), else quoted by encoding/csv itself.
func (rw *rowWriter) appendCSVField(b []byte, s string) []byte {
	plain := s != `\.` && (s == "" || s[0] > ' ')
	for i := 0; plain && i < len(s); i++ {
		c := s[i]
		plain = c >= ' ' && c < 0x7f && c != ',' && c != '"'
	}
	if plain {
		return append(b, s...)
	}
	rw.field.Reset()
	cw := csv.NewWriter(&rw.field)
	cw.Write([]string{s}) // a bytes.Buffer does not fail
	cw.Flush()
	return append(b, bytes.TrimSuffix(rw.field.Bytes(), []byte("\n"))...)
}

func (rw *rowWriter) close() error {
	if rw.err != nil {
		return rw.err
	}
	switch rw.f {
	case CSV:
		return rw.bw.Flush()
	case JSON:
		end := "]\n"
		if !rw.first {
			end = "\n]\n"
		}
		_, err := io.WriteString(rw.w, end)
		return err
	}
	return nil
}
