package workload

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// DType is a torch dtype: its name and element size.
type DType struct {
	Name string // torch's name, e.g. "bfloat16"
	Size int64  // bytes per element
}

// The dtypes workloads use.
var (
	Float32  = DType{"float32", 4}
	BFloat16 = DType{"bfloat16", 2}
	Float16  = DType{"float16", 2}
	Int64    = DType{"int64", 8}
	Bool     = DType{"bool", 1}
)

// dtypes maps every spelling ParseDType accepts (torch names, their
// aliases and the usual short forms) to the dtype.
var dtypes = map[string]DType{
	"float32": Float32, "float": Float32, "fp32": Float32, "f32": Float32,
	"bfloat16": BFloat16, "bf16": BFloat16,
	"float16": Float16, "half": Float16, "fp16": Float16, "f16": Float16,
	"float64": {"float64", 8}, "double": {"float64", 8}, "fp64": {"float64", 8},
	"float8_e4m3fn": {"float8_e4m3fn", 1}, "float8_e5m2": {"float8_e5m2", 1}, "fp8": {"float8_e4m3fn", 1},
	"int64": Int64, "long": Int64,
	"int32": {"int32", 4}, "int": {"int32", 4},
	"int16": {"int16", 2}, "short": {"int16", 2},
	"int8": {"int8", 1}, "uint8": {"uint8", 1},
	"bool":      Bool,
	"complex64": {"complex64", 8}, "cfloat": {"complex64", 8},
}

// ParseDType reads a dtype name: torch's own ("bfloat16", "float16"), with
// or without the "torch." prefix, or a short form ("bf16", "fp16", "fp32").
func ParseDType(s string) (DType, error) {
	if d, ok := dtypes[strings.ToLower(strings.TrimPrefix(s, "torch."))]; ok {
		return d, nil
	}
	return DType{}, fmt.Errorf("unknown dtype %q (want e.g. float32, bfloat16, float16, int64, bool)", s)
}

// sizeUnits are the byte units ParseSize accepts. Binary units (KiB, MiB,
// GiB, TiB and the one-letter K, M, G, T) are powers of 1024, decimal ones
// (KB, MB, GB, TB) powers of 1000, as in nvidia-smi and on GPU spec sheets
// respectively.
var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
}

// ParseSize reads a byte count: a number with an optional unit, e.g.
// "4096", "512B", "4MiB", "1.5 GiB", "24G", "80GB". Binary units (KiB, MiB,
// GiB, TiB, K, M, G, T) count in 1024s, decimal ones (KB, MB, GB, TB) in
// 1000s. Fractions are allowed when the result is a whole number of bytes.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.' || t[i] == '_') {
		i++
	}
	num, unit := strings.ReplaceAll(t[:i], "_", ""), strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := sizeUnits[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf("invalid size %q (want a number of bytes with an optional unit, e.g. 4096, 4MiB, 1.5GiB, 80GB)", s)
	}
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseInt(num, 10, 64)
		if err == nil && mult == 1 {
			return n, nil
		}
		if err == nil && float64(n)*mult < math.MaxInt64 {
			return n * int64(mult), nil
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	v := f * mult
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("size %q is not a whole number of bytes", s)
	}
	return int64(v), nil
}

// numel multiplies a shape's dimensions.
func numel(dims ...int64) int64 {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	return n
}

// bytesOf is the storage size of a tensor of the given shape and dtype.
func bytesOf(d DType, dims ...int64) int64 { return numel(dims...) * d.Size }
