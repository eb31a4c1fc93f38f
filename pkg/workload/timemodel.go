package workload

import "fmt"

// The speeds behind the durations of the built-in workloads: an H100 SXM,
// roughly. They give trace times of the right order (a 7B model's training
// step takes a fraction of a second, not microseconds) so that time axes
// in plots and the view mean something; they are not a performance model.
const (
	// halfFLOPsPerUS: dense bf16/fp16 matmuls, 400 TFLOP/s.
	halfFLOPsPerUS int64 = 400e6
	// fp32FLOPsPerUS: fp32 matmuls without TF32 (PyTorch's default for
	// matmul since 1.12), 60 TFLOP/s.
	fp32FLOPsPerUS int64 = 60e6
	// memoryBytesPerUS: elementwise kernels are bound by HBM bandwidth,
	// 2 TB/s.
	memoryBytesPerUS int64 = 2e6
	// hostToDeviceBytesPerUS: weights copied to the GPU at 25 GB/s.
	hostToDeviceBytesPerUS int64 = 25e3
	// kernelLaunchUS: no kernel takes less than a launch, 6 µs.
	kernelLaunchUS int64 = 6
)

// TimeModelBuiltin says how the built-in workloads' trace times are made;
// memstat record stores it in the file (snapshot.Recorder) and the README
// repeats it.
var TimeModelBuiltin = fmt.Sprintf("modelled: each kernel takes its FLOPs at %d TFLOP/s (bf16/fp16; fp32 %d TFLOP/s) "+
	"or its bytes at %d TB/s, at least %d µs; weights reach the GPU at %d GB/s; allocator calls 1 µs apart",
	halfFLOPsPerUS/1e6, fp32FLOPsPerUS/1e6, memoryBytesPerUS/1e6, kernelLaunchUS, hostToDeviceBytesPerUS/1e3)

// TimeModelFile says how a workload file's trace times are made: nothing
// in a file says how long its computation takes, so the clock only moves
// 1 µs per allocator call and by the file's `elapse` statements.
const TimeModelFile = "synthetic: allocator calls 1 µs apart, plus the workload file's elapse statements"

// TimeModel is how w's trace times are made.
func TimeModel(w Workload) string {
	if _, ok := w.(*File); ok {
		return TimeModelFile
	}
	return TimeModelBuiltin
}
