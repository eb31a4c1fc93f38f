package report

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/memstat/memstat/pkg/analysis"
)

// TestTableStreamMatchesTable: a streamed table no longer than its hold is
// Table.Render's output byte for byte, in text and markdown, whatever the
// widths, alignments and empty cells.
func TestTableStreamMatchesTable(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	words := []string{"", "a", "#", "alloc", "free_requested", "16.0 MiB", "seg 0x7f0000000000+0x200000", "+0.000162s", "ü", "文字", "x y",
		"(allocated at) train.py:12 step", "50.0%", "-1.5 GiB", "[a, b]", "<module>", "*", "a_b-c/d.py"}
	for n := range 300 {
		ncol := 1 + rng.Intn(6)
		tbl := &Table{}
		for c := range ncol {
			al := Left
			if rng.Intn(2) == 0 {
				al = Right
			}
			name := words[1+rng.Intn(len(words)-1)]
			if c == 0 && n%7 == 0 {
				name = "#"
			}
			tbl.Columns = append(tbl.Columns, Column{Name: name, Key: name, Align: al})
		}
		rows := rng.Intn(8)
		for range rows {
			cells := make([]Cell, ncol-rng.Intn(2)*rng.Intn(ncol)) // some rows short
			for c := range cells {
				cells[c] = Str(words[rng.Intn(len(words))])
			}
			tbl.Add(cells...)
		}
		for _, f := range []Format{Text, Markdown} {
			var want, got bytes.Buffer
			// Against tablewriter itself: Render draws plain tables
			// with TableStream.
			if err := tbl.renderTableWriter(&want, f == Markdown); err != nil {
				t.Fatal(err)
			}
			ts := NewTableStream(&got, f, tbl.Columns, 8)
			for _, r := range tbl.Rows {
				texts := make([]string, len(r))
				for i, c := range r {
					texts[i] = c.Text
				}
				if err := ts.Row(texts); err != nil {
					t.Fatal(err)
				}
			}
			if err := ts.Close(); err != nil {
				t.Fatal(err)
			}
			if got.String() != want.String() {
				t.Fatalf("table %d (%s):\n got:\n%s\nwant:\n%s", n, f, got.String(), want.String())
			}
		}
	}
}

// TestTableStreamWritesAfterHold: once the hold is full the held rows are
// written, and each later row as it comes; a wider later cell does not
// move the columns of the other rows.
func TestTableStreamWritesAfterHold(t *testing.T) {
	var out bytes.Buffer
	ts := NewTableStream(&out, Text, []Column{{Name: "#", Align: Right}, {Name: "What"}, {Name: "Frame"}}, 2)
	ts.Row([]string{"1", "a", "f"})
	if out.Len() != 0 {
		t.Fatalf("wrote before the hold was full: %q", out.String())
	}
	ts.Row([]string{"2", "b", "g"})
	if got := strings.Count(out.String(), "\n"); got != 3 {
		t.Fatalf("after the hold: %d lines, want header and 2 rows:\n%s", got, out.String())
	}
	ts.Row([]string{"3", "wide", "h"})
	ts.Row([]string{"4", "c", "i"})
	if err := ts.Close(); err != nil {
		t.Fatal(err)
	}
	want := "#  What  Frame\n1  a     f\n2  b     g\n3  wide  h\n4  a     i\n"
	want = strings.Replace(want, "4  a", "4  c", 1)
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}

type failWriter struct{ n int }

var errClosed = errors.New("closed")

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, errClosed
	}
	w.n--
	return len(p), nil
}

// TestTableStreamStopsAtWriteError: the first write error is returned by
// that call and every later one.
func TestTableStreamStopsAtWriteError(t *testing.T) {
	ts := NewTableStream(&failWriter{n: 2}, Text, []Column{{Name: "x"}}, 1)
	if err := ts.Row([]string{"1"}); err != nil {
		t.Fatalf("first row: %v", err)
	}
	if err := ts.Row([]string{"2"}); !errors.Is(err, errClosed) {
		t.Fatalf("second row: %v, want the write error", err)
	}
	if err := ts.Close(); !errors.Is(err, errClosed) {
		t.Fatalf("close: %v", err)
	}
}

// TestFastFormatsMatchFmt: Size, Seconds and Where build their text with
// strconv; fmt's formats are the reference.
func TestFastFormatsMatchFmt(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	ref := func(n int64) string {
		if n < 1024 {
			return fmt.Sprintf("%d B", n)
		}
		f := float64(n) / 1024
		for i, u := range []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"} {
			if f < 1024 || i == 5 {
				return fmt.Sprintf("%.1f %s", f, u)
			}
			f /= 1024
		}
		return ""
	}
	for i := range 100000 {
		n := rng.Int63() >> rng.Intn(63)
		if i < 3000 {
			n = int64(i)*1023 + int64(i%7)
		}
		if got, want := Size(n), ref(n); got != want {
			t.Fatalf("Size(%d) = %q, want %q", n, got, want)
		}
		f := rng.Float64() * float64(int64(1)<<rng.Intn(40))
		if got, want := Seconds(f), fmt.Sprintf("+%.6fs", f); got != want {
			t.Fatalf("Seconds(%v) = %q, want %q", f, got, want)
		}
		ev := analysis.TraceEvent{Located: true, Segment: uint64(rng.Int63()), Offset: rng.Int63()>>rng.Intn(63) - int64(i%2)*(1<<20)}
		if got, want := Where(ev), fmt.Sprintf("seg 0x%x+0x%x", ev.Segment, ev.Offset); got != want {
			t.Fatalf("Where = %q, want %q", got, want)
		}
	}
}

// TestTableStreamRowBytesMatchesRow: rows given as bytes in one reused
// buffer (trace's listing) come out as the same rows given as strings, held
// and streamed, with cells that need escaping or are wider than long.
func TestTableStreamRowBytesMatchesRow(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	words := []string{"", "a", "alloc", "16.0 MiB", "seg 0x7f0000000000+0x200000", "ü", "文字", "tab\there", "nl\nx", "\x01", "\x7f", "\xff"}
	for n := range 200 {
		ncol := 1 + rng.Intn(6)
		var cols []Column
		for range ncol {
			al := Left
			if rng.Intn(2) == 0 {
				al = Right
			}
			cols = append(cols, Column{Name: words[1+rng.Intn(len(words)-1)], Align: al})
		}
		for _, f := range []Format{Text, Markdown} {
			var want, got bytes.Buffer
			hold := 1 + rng.Intn(3)
			ws, gs := NewTableStream(&want, f, cols, hold), NewTableStream(&got, f, cols, hold)
			var buf []byte
			for range rng.Intn(10) {
				texts := make([]string, rng.Intn(ncol+1))
				cells := make([][]byte, len(texts))
				buf = buf[:0]
				for i := range texts {
					texts[i] = words[rng.Intn(len(words))]
					buf = append(buf, texts[i]...)
				}
				start := 0
				for i := range texts {
					cells[i] = buf[start : start+len(texts[i])]
					start += len(texts[i])
				}
				if err := ws.Row(texts); err != nil {
					t.Fatal(err)
				}
				if err := gs.RowBytes(cells); err != nil {
					t.Fatal(err)
				}
				clear(buf) // the rows must not be kept by reference
			}
			if err := ws.Close(); err != nil {
				t.Fatal(err)
			}
			if err := gs.Close(); err != nil {
				t.Fatal(err)
			}
			if got.String() != want.String() {
				t.Fatalf("table %d (%s):\n got:\n%q\nwant:\n%q", n, f, got.String(), want.String())
			}
		}
	}
}
