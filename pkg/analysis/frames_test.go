package analysis

import (
	"strings"
	"testing"

	"github.com/memstat/memstat/pkg/snapshot"
)

func TestClassifyFrame(t *testing.T) {
	for _, c := range []struct {
		f    snapshot.Frame
		want FrameKind
	}{
		{snapshot.Frame{Name: "forward", Filename: "/home/me/proj/model.py", Line: 107}, UserFrame},
		{snapshot.Frame{Name: "<module>", Filename: "train.py", Line: 3}, UserFrame},
		{snapshot.Frame{Name: "train_start", Filename: "/home/me/train.py", Line: 9}, UserFrame},
		{snapshot.Frame{Name: "<module>", Filename: "<string>", Line: 1}, UserFrame},
		{snapshot.Frame{Name: "forward", Filename: "expandable_oom.mem", Line: 15}, UserFrame},
		{snapshot.Frame{Name: "execute_native_thread_routine", Filename: "thread48.o", Line: 0}, InternalFrame},
		{snapshot.Frame{Name: "c10::cuda::CUDACachingAllocator::malloc", Filename: "CUDACachingAllocator.cpp", Line: 0}, InternalFrame},
		{snapshot.Frame{Name: "forward", Filename: "/venv/lib/python3.10/site-packages/timm/layers/mlp.py", Line: 44}, LibraryFrame},
		{snapshot.Frame{Name: "_run_code", Filename: "/usr/lib/python3.9/runpy.py", Line: 87}, LibraryFrame},
		{snapshot.Frame{Name: "run", Filename: `C:\Python310\Lib\threading.py`, Line: 9}, LibraryFrame},
		{snapshot.Frame{Name: "forward", Filename: "/venv/lib/python3.10/site-packages/torch/nn/modules/linear.py", Line: 125}, InternalFrame},
		{snapshot.Frame{Name: "convert", Filename: `C:\venv\lib\site-packages\torch\nn\modules\module.py`, Line: 1357}, InternalFrame},
		{snapshot.Frame{Name: "forward", Filename: "torch/nn/modules/linear.py", Line: 125}, InternalFrame},
		{snapshot.Frame{Name: "call", Filename: "/tmp/torchinductor_brian/qa/cqau263.py", Line: 132}, InternalFrame},
		{snapshot.Frame{Name: "_call_with_frames_removed", Filename: "<frozen importlib._bootstrap>", Line: 241}, InternalFrame},
		{snapshot.Frame{Name: "forward", Filename: "<eval_with_key>.3", Line: 7}, InternalFrame},
		{snapshot.Frame{Name: "at::detail::empty_cuda(...)", Filename: "??", Line: 0}, InternalFrame},
		{snapshot.Frame{Name: "gather_with_cpp()", Filename: "memory_snapshot.cpp", Line: 0}, InternalFrame},
		{snapshot.Frame{Name: "__libc_start_call_main", Filename: "./csu/../sysdeps/nptl/libc_start_call_main.h", Line: 58}, InternalFrame},
		{snapshot.Frame{Name: "_PyEval_EvalFrameDefault", Filename: "Python/ceval.c", Line: 4}, InternalFrame},
	} {
		if got := ClassifyFrame(c.f); got != c.want {
			t.Errorf("ClassifyFrame(%+v) = %v, want %v", c.f, got, c.want)
		}
	}
	// The display filter's name list hides native frames only.
	if Filtered(snapshot.Frame{Name: "train_start", Filename: "/home/me/train.py", Line: 9}) {
		t.Error("a Python function named train_start is filtered")
	}
	if !Filtered(snapshot.Frame{Name: "_start", Filename: "??"}) || !Filtered(snapshot.Frame{Name: "x", Filename: "Python/ceval.c", Line: 3}) {
		t.Error("the viewers' filter lists are not applied")
	}
}

func TestShortFileAndNames(t *testing.T) {
	for in, want := range map[string]string{
		"/home/brian/Desktop/assignment2-systems/cs336_basics/model.py": "cs336_basics/model.py",
		"/venv/lib/python3.10/site-packages/torch/nn/modules/module.py": "torch/nn/modules/module.py",
		`C:\research\DeComFL\decomfl_main.py`:                           "DeComFL/decomfl_main.py",
		"/usr/lib/python3.9/runpy.py":                                   "runpy.py",
		"train.py":                                                      "train.py",
		"<frozen runpy>":                                                "<frozen runpy>",
	} {
		if got := ShortFile(in); got != want {
			t.Errorf("ShortFile(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"torch::autograd::generated::MulBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)": "torch::autograd::generated::MulBackward0::apply",
		"at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>)":                                    "at::detail::_empty_generic<long>",
		"at::(anonymous namespace)::create_out(c10::ArrayRef<long>)":                                              "at::create_out",
		"clone": "clone",
	} {
		if got := NativeName(in); got != want {
			t.Errorf("NativeName(%q) = %q, want %q", in, got, want)
		}
	}
	if got := FrameString(snapshot.Frame{Name: "forward", Filename: "/a/b/c/model.py", Line: 7}); got != "c/model.py:7 forward" {
		t.Errorf("FrameString = %q", got)
	}
}

// TestFramesSiteAndKey: the site is the innermost user frame, then
// library, then Python; keys compare stacks by content across stack
// tables; stacks differing only in hidden frames share a key.
func TestFramesSiteAndKey(t *testing.T) {
	native := snapshot.Frame{Name: "c10::cuda::CUDACachingAllocator::malloc(int)", Filename: "CUDACachingAllocator.cpp"}
	torchF := snapshot.Frame{Name: "forward", Filename: "/v/site-packages/torch/nn/modules/linear.py", Line: 125}
	lib := snapshot.Frame{Name: "forward", Filename: "/v/site-packages/timm/layers/mlp.py", Line: 44}
	user := snapshot.Frame{Name: "forward", Filename: "/home/me/model.py", Line: 10}
	main := snapshot.Frame{Name: "<module>", Filename: "/home/me/train.py", Line: 3}

	a, b := snapshot.NewStacks(), snapshot.NewStacks()
	b.InternFrames([]snapshot.Frame{main}) // b's ids differ from a's
	s1 := a.InternFrames([]snapshot.Frame{native, torchF, lib, user, main})
	s2 := b.InternFrames([]snapshot.Frame{torchF, lib, user, main})
	libOnly := a.InternFrames([]snapshot.Frame{native, torchF, lib})
	torchOnly := a.InternFrames([]snapshot.Frame{native, torchF})
	nativeOnly := a.InternFrames([]snapshot.Frame{native, {Name: "torch::autograd::generated::MulBackward0::apply(x)", Filename: "??"}, {Name: "clone", Filename: "??"}})
	accumulate := a.InternFrames([]snapshot.Frame{native, {Name: "torch::autograd::utils::clone_obey_contract(x)", Filename: "??"},
		{Name: "torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor>&&)", Filename: "??"},
		{Name: "torch::autograd::Node::operator()(std::vector<at::Tensor>&&)", Filename: "??"},
		{Name: "torch::autograd::Engine::thread_main(x)", Filename: "??"}})

	fa, fb := NewFrames(a, false), NewFrames(b, false)
	if s := fa.Site(s1); s != user {
		t.Errorf("site %+v, want the user frame", s)
	}
	if fa.Key(s1) != fb.Key(s2) || fa.Key(s1) == "" {
		t.Errorf("keys differ across tables: %q vs %q", fa.Key(s1), fb.Key(s2))
	}
	shown, hidden := fa.Shown(s1)
	if len(shown) != 3 || hidden != 2 || shown[0] != lib {
		t.Errorf("shown %v, hidden %d", shown, hidden)
	}
	if s := fa.Site(libOnly); s != lib {
		t.Errorf("site of a library stack %+v", s)
	}
	if s := fa.Site(torchOnly); s != torchF {
		t.Errorf("site of a torch-only stack %+v", s)
	}
	if shown, _ := fa.Shown(torchOnly); len(shown) != 1 || shown[0] != torchF {
		t.Errorf("a torch-only stack shows %v, want its Python frame", shown)
	}
	if s := fa.Site(nativeOnly); s.Name != "torch::autograd::generated::MulBackward0::apply(x)" {
		t.Errorf("site of a native stack %+v, want its backward node", s)
	}
	if s := fa.Site(accumulate); NativeName(s.Name) != "torch::autograd::AccumulateGrad::apply" {
		t.Errorf("site of a gradient accumulation %+v, want its node", s)
	}
	if s := fa.Site(snapshot.NoStack); s != NoStackFrame || fa.Key(snapshot.NoStack) != "" {
		t.Errorf("empty stack: site %+v key %q", s, fa.Key(snapshot.NoStack))
	}
	all := NewFrames(a, true)
	if shown, hidden := all.Shown(s1); len(shown) != 5 || hidden != 0 {
		t.Errorf("--all-frames shows %d frames, hides %d", len(shown), hidden)
	}
	if all.Key(s1) == fa.Key(s1) {
		t.Error("--all-frames keys ignore the internal frames")
	}
}

func TestPhases(t *testing.T) {
	s := &snapshot.Snapshot{Annotations: []snapshot.Annotation{
		{Device: 0, TimeUS: 100, Name: "step", Stage: "START"},
		{Device: 0, TimeUS: 110, Name: "forward", Stage: "START"},
		{Device: 1, TimeUS: 115, Name: "other device", Stage: "START"},
		{Device: 0, TimeUS: 120, Name: "forward", Stage: "END"},
		{Device: 0, TimeUS: 130, Name: "backward", Stage: "START"},
		{Device: 0, TimeUS: 50, Name: "early", Stage: "END"},
		{Device: 0, TimeUS: 200, Name: "step", Stage: "END"},
	}}
	ps := PhasesOf(s, 0)
	if len(ps) != 4 {
		t.Fatalf("phases %+v", ps)
	}
	for tm, want := range map[int64]string{0: "", 40: "early", 60: "", 105: "step", 110: "forward", 120: "forward",
		125: "step", 150: "backward", 250: "backward"} {
		if got := ps.At(tm); got != want {
			t.Errorf("At(%d) = %q, want %q", tm, got, want)
		}
	}
	if got := PhasesOf(s, 1).At(300); got != "other device" {
		t.Errorf("device 1 at 300: %q", got)
	}
}

// shortFileSplit is ShortFile's last-two-elements rule as it was written
// before it found the slashes in place: the oracle of TestShortFileInPlace.
func shortFileSplit(s string) string {
	parts := strings.Split(strings.TrimLeft(s, "/"), "/")
	if len(parts) > 2 {
		parts = parts[len(parts)-2:]
	}
	return strings.Join(parts, "/")
}

// TestShortFileInPlace: the last two path elements found in place are
// what splitting and joining gave, on paths with empty elements, leading,
// trailing and repeated slashes, one element, none.
func TestShortFileInPlace(t *testing.T) {
	elems := []string{"", "a", "bc", "model.py"}
	var paths []string
	var gen func(prefix string, depth int)
	gen = func(prefix string, depth int) {
		paths = append(paths, prefix)
		if depth == 0 {
			return
		}
		for _, e := range elems {
			gen(prefix+e, depth-1)
			gen(prefix+e+"/", depth-1)
		}
	}
	gen("", 4)
	gen("/", 3)
	for _, p := range paths {
		if strings.HasPrefix(p, "<") || strings.Contains(p, "site-packages/") || strings.Contains(p, "/lib/python") {
			continue
		}
		if got, want := ShortFile(p), shortFileSplit(p); got != want {
			t.Fatalf("ShortFile(%q) = %q, splitting gives %q", p, got, want)
		}
	}
	if len(paths) < 1000 {
		t.Fatalf("only %d paths generated", len(paths))
	}
}
