package workload

import (
	"fmt"
	"strings"

	"github.com/memstat/memstat/internal/textfile"
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
	return DType{}, fmt.Errorf("unknown dtype %s (want e.g. float32, bfloat16, float16, int64, bool)", textfile.Quote(s))
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
