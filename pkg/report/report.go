// Package report turns memstat's analysis results into output: tables whose
// rows carry both raw values (for JSON and CSV) and the text people read,
// and one small renderer per format (text, markdown, CSV, JSON). Like
// pprof's report package, it knows nothing about where the figures came
// from.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
)

// Format is an output format.
type Format string

// Output formats.
const (
	Text     Format = "text"
	JSON     Format = "json"
	Markdown Format = "markdown"
	CSV      Format = "csv"
)

// WriteJSON writes v as indented JSON followed by a newline.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// Size formats a byte count the way PyTorch's tools print sizes in text:
// "512 B", "1.5 KiB", "20.0 MiB", "1.5 GiB". Negative sizes keep their sign.
func Size(n int64) string {
	var b [32]byte
	return string(AppendSize(b[:0], n))
}

// AppendSize appends Size(n) to b: for listings that format a size per
// line into one buffer instead of a string each.
func AppendSize(b []byte, n int64) []byte {
	if n < 0 {
		if n == math.MinInt64 {
			return append(b, "-8.0 EiB"...)
		}
		return AppendSize(append(b, '-'), -n)
	}
	if n < 1024 {
		return append(strconv.AppendInt(b, n, 10), " B"...)
	}
	if n < 1<<53 {
		return appendSizeExact(b, n)
	}
	return appendSizeFloat(b, n)
}

// appendSizeFloat is AppendSize for n >= 1024 through float64: the
// definition appendSizeExact follows in integers below 2^53 (the tests
// hold the two equal) and the path above it. strconv, not fmt: a trace
// listing formats two sizes a line.
func appendSizeFloat(b []byte, n int64) []byte {
	f := float64(n) / 1024
	for i, u := range printUnits {
		if f < 1024 || i == len(printUnits)-1 {
			return append(append(strconv.AppendFloat(b, f, 'f', 1, 64), ' '), u...)
		}
		f /= 1024
	}
	return b
}

var printUnits = [...]string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}

// appendSizeExact is AppendSize for 1024 <= n < 2^53, in integers:
// strconv.AppendFloat with a fixed precision in 'f' format takes its
// multiprecision path, a third of a trace listing's formatting. Below
// 2^53 float64(n) is n, so the float path prints n/2^s (s = 10 per unit,
// the unit the first whose next would make it < 1) rounded to one decimal,
// halves to even: exactly what this computes. TestAppendSizeExact holds
// the two equal.
func appendSizeExact(b []byte, n int64) []byte {
	k := 0
	for k < len(printUnits)-1 && n>>(10*(k+1)) >= 1024 {
		k++
	}
	s := uint(10 * (k + 1))
	x := uint64(n) * 10 // < 2^57
	q, rem, half := x>>s, x&(1<<s-1), uint64(1)<<(s-1)
	if rem > half || rem == half && q&1 == 1 {
		q++
	}
	b = strconv.AppendUint(b, q/10, 10)
	b = append(b, '.', byte('0'+q%10), ' ')
	return append(b, printUnits[k]...)
}

// SignedSize formats a change in bytes with an explicit sign ("+1.5 GiB",
// "-512 B", "0 B").
func SignedSize(n int64) string {
	if n > 0 {
		return "+" + Size(n)
	}
	return Size(n)
}

// Percent formats a fraction as a percentage with one decimal ("12.5%").
func Percent(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}

// Ratio returns a/b, or 0 when b is 0.
func Ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
