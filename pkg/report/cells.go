package report

import (
	"math"
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
	b = append(b, '+')
	// A whole number of microseconds (a trace's times are) in integers:
	// AppendFloat with a fixed precision takes its multiprecision path.
	// When f is the float64 nearest us/1e6 and under 2^32 it lies within
	// half a unit in the last place of us/1e6, well under 0.5e-6, so
	// rounding it to six decimals gives us/1e6 exactly (TestAppendSeconds).
	if f >= 0 && f < 1<<32 {
		if us := int64(math.Round(f * 1e6)); float64(us)/1e6 == f {
			b = strconv.AppendInt(b, us/1e6, 10)
			b = append(b, '.')
			frac := us % 1e6
			for d := int64(1e5); d > 1 && frac < d; d /= 10 {
				b = append(b, '0')
			}
			return append(strconv.AppendInt(b, frac, 10), 's')
		}
	}
	return append(strconv.AppendFloat(b, f, 'f', 6, 64), 's')
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
