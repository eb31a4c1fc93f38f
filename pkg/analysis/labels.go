package analysis

import (
	"strconv"
	"strings"

	"github.com/memstat/memstat/pkg/snapshot"
)

// Machinery frames are the allocator's and the interpreter's own: the
// caching allocator and the tensor-creation and dispatch plumbing that
// leads to it, the CPython evaluation loop and C API, pybind11, the
// autograd engine's thread loop and the C library's thread and process
// start. They are in every stack recorded with C++ frames and never say
// where the program asked for memory, so labels, the pprof profile and
// the default views leave them out (--all-frames keeps them).
var (
	machineryNames = []string{
		// The allocator and what hands it a request.
		"CUDACachingAllocator", "c10::cuda::", "c10::Allocator", "c10::StorageImpl", "c10::TensorImpl",
		"c10::intrusive_ptr", "at::detail::empty", "at::detail::_empty", "at::empty", "at::native::empty",
		"at::cuda::empty", "at::TensorBase::", "at::create_out", "set_output_raw_strided", "allocate_or_resize_outputs",
		"at::TensorIteratorBase::", "at::TensorIterator::", "at::meta::structured_", "at::native::resize_",
		// The dispatcher.
		"c10::Dispatcher", "c10::OperatorHandle", "c10::KernelFunction", "c10::BoxedKernel", "c10::impl::",
		"at::_ops::", "at::redispatch", "wrap_kernel_functor", "at::(anonymous", "at::wrapper_", "torch::autograd::VariableType::",
		"torch::ADInplaceOrView::", "c10::detail::", "std::function",
		// The interpreter, pybind11 and the autograd engine's loop.
		"_PyEval", "PyEval_", "_PyObject", "PyObject_", "_PyFunction", "PyFunction_", "_PyVectorcall", "PyVectorcall",
		"cfunction_", "method_vectorcall", "slot_tp_", "_PyRun", "PyRun_", "Py_RunMain", "Py_BytesMain", "pymain_",
		"pybind11::", "THPVariable_", "THPFunction_", "torch::autograd::python::", "torch::autograd::Engine::",
		"torch::autograd::Node::operator", "torch::autograd::call_function",
		// Process and thread start.
		"execute_native_thread_routine", "start_thread", "clone3", "__clone", "__libc_start", "_start",
		"unwind::unwind", "CapturedTraceback",
	}
	machineryFiles = []string{"CUDACachingAllocator", "ceval.c", "Objects/", "Python/", "Modules/main.c", "libpython",
		"pycore_", "cpython/", "pybind11/"}
)

// IsMachinery reports whether a frame is the allocator's or the
// interpreter's own (see machineryNames). Python frames never are: the
// program's code and PyTorch's Python code say what was computed.
func IsMachinery(f snapshot.Frame) bool {
	if IsPython(f) && !strings.HasPrefix(f.Filename, "<frozen") {
		return false
	}
	if strings.HasPrefix(f.Filename, "<frozen") {
		return true
	}
	for _, s := range machineryFiles {
		if strings.Contains(f.Filename, s) {
			return true
		}
	}
	for _, s := range machineryNames {
		if strings.Contains(f.Name, s) {
			return true
		}
	}
	return Filtered(f)
}

// MaxLabel is the longest a stack label gets, in characters.
const MaxLabel = 120

// labelFrame formats a frame for a label: FrameString, with a native
// name cut to its last two components ("DivBackward0::apply") and no file.
func labelFrame(f snapshot.Frame) string {
	if IsPython(f) || f == NoStackFrame || f == NoStackBeforeTrace {
		return FrameString(f)
	}
	name := NativeName(f.Name)
	if parts := strings.Split(name, "::"); len(parts) > 2 {
		name = strings.Join(parts[len(parts)-2:], "::")
	}
	if name == "" {
		return "?"
	}
	return name
}

// StackLabels names groups of live memory by stack for a table: the
// allocation site (the innermost user frame), and, where groups share a
// site, the first frame that tells each apart from the others: a callee
// ("site → callee") or a caller ("site ← caller", "← … ←" over frames
// that are the same). Labels are unique among the groups given, at most
// MaxLabel characters, and leave out allocator and interpreter frames
// unless allFrames. They depend on the whole list, never on how much of
// it a table shows: compute them before cutting it.
func StackLabels(sites []snapshot.Frame, stacks [][]snapshot.Frame, freed []bool, allFrames bool) []string {
	n := len(sites)
	frames := make([][]snapshot.Frame, n)
	pos := make([]int, n)
	base := make([]string, n)
	for i := range n {
		for _, f := range stacks[i] {
			if allFrames || !IsMachinery(f) || f == sites[i] {
				frames[i] = append(frames[i], f)
			}
		}
		pos[i] = -1
		for k, f := range frames[i] {
			if f == sites[i] {
				pos[i] = k
				break
			}
		}
		if pos[i] < 0 {
			frames[i] = append([]snapshot.Frame{sites[i]}, frames[i]...)
			pos[i] = 0
		}
		base[i] = labelFrame(sites[i])
		if freed != nil && freed[i] {
			base[i] = FreedAtPrefix + base[i]
		}
	}
	// The frame of group i at an offset: callers are 1, 2, ... above the
	// site, callees -1, -2, ... below it.
	at := func(i, off int) (snapshot.Frame, bool) {
		k := pos[i] + off
		if k < 0 || k >= len(frames[i]) {
			return snapshot.Frame{}, false
		}
		return frames[i][k], true
	}
	// Offsets in the order they are tried: the callee nearest the
	// allocation first (what the site called), then callers outwards.
	order := func(i, j int) []int {
		var out []int
		for c := -max(pos[i], pos[j]); c < 0; c++ {
			out = append(out, c)
		}
		for c := 1; c < max(len(frames[i])-pos[i], len(frames[j])-pos[j]); c++ {
			out = append(out, c)
		}
		return out
	}
	firstDiff := func(i, j int) (int, bool) {
		for _, off := range order(i, j) {
			fi, oki := at(i, off)
			fj, okj := at(j, off)
			if oki != okj || (oki && labelFrame(fi) != labelFrame(fj)) {
				return off, true
			}
		}
		return 0, false
	}
	byBase := map[string][]int{}
	for i := range n {
		byBase[base[i]] = append(byBase[base[i]], i)
	}
	labels := make([]string, n)
	for i := range n {
		offs := map[int]bool{}
		for _, j := range byBase[base[i]] {
			if j == i {
				continue
			}
			if off, ok := firstDiff(i, j); ok {
				if _, present := at(i, off); present {
					offs[off] = true
				}
			}
		}
		labels[i] = render(base[i], offs, func(off int) string { f, _ := at(i, off); return labelFrame(f) })
	}
	return unique(labels)
}

// render writes a site and the frames at the given offsets: callees
// after "→", callers after "←", "…" standing for the frames skipped.
func render(base string, offs map[int]bool, frame func(int) string) string {
	var in, out []int
	for off := range offs {
		if off < 0 {
			in = append(in, off)
		} else {
			out = append(out, off)
		}
	}
	sortInts(in)
	sortInts(out)
	s := base
	// Callees, from the site inwards: -1, -2, ...
	prev := 0
	for k := len(in) - 1; k >= 0; k-- {
		off := in[k]
		if off != prev-1 {
			s += " → …"
		}
		s += " → " + frame(off)
		prev = off
	}
	prev = 0
	for _, off := range out {
		if off != prev+1 {
			s += " ← …"
		}
		s += " ← " + frame(off)
		prev = off
	}
	return s
}

func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// unique cuts labels to MaxLabel characters and numbers the ones still
// equal ("#2", "#3" in list order, which is by size: stable whatever a
// table shows).
func unique(labels []string) []string {
	for i, l := range labels {
		labels[i] = cut(l, MaxLabel)
	}
	seen := map[string]int{}
	for _, l := range labels {
		seen[l]++
	}
	next := map[string]int{}
	for i, l := range labels {
		if seen[l] < 2 {
			continue
		}
		next[l]++
		if next[l] == 1 {
			continue
		}
		suffix := " #" + strconv.Itoa(next[l])
		labels[i] = cut(l, MaxLabel-len([]rune(suffix))) + suffix
	}
	return labels
}

// cut shortens s to at most n characters, ending it with "…" when cut.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
