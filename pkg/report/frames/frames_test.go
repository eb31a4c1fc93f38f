package frames

import (
	"testing"

	"github.com/memstat/memstat/pkg/snapshot"
)

func TestHidden(t *testing.T) {
	for _, c := range []struct {
		f    snapshot.Frame
		want bool
	}{
		{snapshot.Frame{Name: "torch::unwind::unwind()", Filename: "??"}, true},
		{snapshot.Frame{Name: "_PyEval_EvalFrameDefault", Filename: "Python/ceval.c"}, true},
		{snapshot.Frame{Name: "at::_ops::add_Tensor::call", Filename: "aten/src/ATen/core/boxing/KernelFunction.h"}, true},
		{snapshot.Frame{Name: "train_start", Filename: "train.py"}, false},
		{snapshot.Frame{Name: "DeviceCachingAllocator::malloc", Filename: "CUDACachingAllocator.cpp"}, false},
	} {
		if got := Hidden(c.f); got != c.want {
			t.Errorf("Hidden(%+v) = %v", c.f, got)
		}
	}
}

func TestTop(t *testing.T) {
	cpp := snapshot.Frame{Name: "torch::unwind::unwind()", Filename: "??"}
	alloc := snapshot.Frame{Name: "DeviceCachingAllocator::malloc", Filename: "CUDACachingAllocator.cpp"}
	py := snapshot.Frame{Name: "forward", Filename: "model.py", Line: 3}
	if f, ok := Top([]snapshot.Frame{cpp, alloc, py}); !ok || f != py {
		t.Errorf("Top = %+v, want the Python frame", f)
	}
	lib := snapshot.Frame{Name: "__torch_function__", Filename: "/venv/lib/python3.12/site-packages/torch/utils/_device.py", Line: 104}
	if f, ok := Top([]snapshot.Frame{cpp, alloc, lib, py}); !ok || f != py {
		t.Errorf("Top = %+v, want the program's frame", f)
	}
	if f, ok := Top([]snapshot.Frame{cpp, lib, alloc}); !ok || f != lib {
		t.Errorf("Top = %+v, want the library's Python frame", f)
	}
	if f, ok := Top([]snapshot.Frame{cpp, alloc}); !ok || f != alloc {
		t.Errorf("Top = %+v, want the first shown frame", f)
	}
	if f, ok := Top([]snapshot.Frame{cpp}); !ok || f != cpp {
		t.Errorf("Top = %+v, want the only frame", f)
	}
	if _, ok := Top(nil); ok {
		t.Error("Top(nil) is ok")
	}
}
