package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/memstat/memstat/internal/textfile"
)

// sizeUnits are the units ParseSize accepts, lower-cased. Binary units
// count in 1024s: KiB, MiB, GiB, TiB (what PyTorch and nvidia-smi print)
// and the one-letter K, M, G, T (as docker and ulimit read them). Decimal
// units count in 1000s: KB, MB, GB, TB (what GPU spec sheets print: an
// "80GB" card).
var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
}

// ParseSize reads a byte count given on the command line: a number with an
// optional unit, e.g. "4096", "512B", "24GiB", "1.5 GiB", "24G", "80GB",
// "512MB". KiB/MiB/GiB/TiB and K/M/G/T are binary, KB/MB/GB/TB decimal;
// units are case-insensitive. A fraction must come to whole bytes.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := sizeUnits[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf("invalid size %s: want a number of bytes with an optional unit, e.g. 24GiB, 512MiB, 80GB", textfile.Quote(s))
	}
	if !strings.Contains(num, ".") {
		if n, err := strconv.ParseInt(num, 10, 64); err == nil && float64(n)*mult < math.MaxInt64 {
			return n * int64(mult), nil
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %s", textfile.Quote(s))
	}
	v := f * mult
	switch {
	case v >= math.MaxInt64:
		return 0, fmt.Errorf("size %q is too large", s)
	case v != math.Trunc(v):
		return 0, fmt.Errorf("size %q is not a whole number of bytes", s)
	}
	return int64(v), nil
}
