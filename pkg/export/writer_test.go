package export

import (
	"bytes"
	"encoding/csv"
	"math/rand"
	"strconv"
	"testing"
)

// TestCSVRowsAsEncodingCSV: the CSV rows rowWriter appends itself are
// byte for byte what encoding/csv's Writer writes for the same records,
// with strings that need quoting (commas, quotes, line breaks, leading
// blanks, non-ASCII, `\.`), numbers, booleans and empty cells.
func TestCSVRowsAsEncodingCSV(t *testing.T) {
	odd := []string{"", "a", "alloc", "x,y", `say "hi"`, "two\nlines", "cr\rx", " lead", "\tlead", "trail ", `\.`, `\.x`,
		"ü", "\u00a0nbsp", "文字", "\xff", "/path/to/file.py", "fn(<lambda>)"}
	rng := rand.New(rand.NewSource(1))
	cols := []string{"a", "b,c", "d", "e"}
	var got, want bytes.Buffer
	rw := newRowWriter(&got, CSV, cols)
	cw := csv.NewWriter(&want)
	cw.Write(cols)
	for range 3000 {
		vals := make([]Value, len(cols))
		rec := make([]string, len(cols))
		for i := range vals {
			switch rng.Intn(4) {
			case 0:
				s := odd[rng.Intn(len(odd))]
				vals[i], rec[i] = S(s), s
			case 1:
				n := rng.Int63() - rng.Int63()
				vals[i], rec[i] = I(n), strconv.FormatInt(n, 10)
			case 2:
				b := rng.Intn(2) == 0
				vals[i], rec[i] = B(b), strconv.FormatBool(b)
			default:
				vals[i] = Null
			}
		}
		rw.row(vals...)
		cw.Write(rec)
	}
	if err := rw.close(); err != nil {
		t.Fatal(err)
	}
	cw.Flush()
	if rw.rows != 3000 {
		t.Errorf("%d rows counted, want 3000", rw.rows)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		g, w := got.String(), want.String()
		i := 0
		for i < len(g) && i < len(w) && g[i] == w[i] {
			i++
		}
		t.Fatalf("differs at byte %d: got %q, want %q", i, g[max(0, i-40):min(len(g), i+40)], w[max(0, i-40):min(len(w), i+40)])
	}
}
