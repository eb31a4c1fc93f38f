package report

import (
	"strconv"
)

// Hex is an address cell: raw number, "0x7f3a00000000" text.
func Hex(n uint64) Cell { return Cell{Raw: n, Text: "0x" + strconv.FormatUint(n, 16)} }

// Stream formats a CUDA stream (an int64(cudaStream_t)): "0" for the
// default stream, the pointer in hex otherwise.
func Stream(s int64) Cell {
	if s == 0 {
		return Cell{Raw: s, Text: "0"}
	}
	return Cell{Raw: s, Text: "0x" + strconv.FormatUint(uint64(s), 16)}
}

// AppendStream appends Stream(s)'s text to b.
func AppendStream(b []byte, s int64) []byte {
	if s == 0 {
		return append(b, '0')
	}
	return strconv.AppendUint(append(b, "0x"...), uint64(s), 16)
}

// Seconds formats a time since the first trace entry: "+1.234567s".
func Seconds(f float64) string {
	var b [32]byte
	return string(AppendSeconds(b[:0], f))
}

// AppendSeconds appends Seconds(f) to b.
func AppendSeconds(b []byte, f float64) []byte {
	return append(strconv.AppendFloat(append(b, '+'), f, 'f', 6, 64), 's')
}

// Delta is a signed change of a count ("+3", "-1", "0").
func Delta(n int64) Cell {
	if n > 0 {
		return Cell{Raw: n, Text: "+" + strconv.FormatInt(n, 10)}
	}
	return Int(n)
}

// Blank is an empty cell (JSON null).
func Blank() Cell { return Cell{} }

// Plural is "1 block" or "3 blocks".
func Plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
