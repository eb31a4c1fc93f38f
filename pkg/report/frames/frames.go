// Package frames decides which stack frames reports show: the display
// filter of PyTorch's own viewers (_memory_viz.py and MemoryViz.js), and
// the frame that best names an allocation site in a one-line table cell.
package frames

import (
	"strings"

	"github.com/memstat/memstat/pkg/snapshot"
)

// The display filter of PyTorch's viewers (snapshot-format.md §4.3): a
// frame whose name or file contains one of these is never shown.
var (
	hiddenNames = []string{"unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "_start",
		"__libc_start_main", "PyEval_", "PyObject_", "PyFunction_"}
	hiddenFiles = []string{"core/boxing", "/Register", "/Redispatch", "pythonrun.c", "Modules/main.c",
		"Objects/call.c", "Objects/methodobject.c", "pycore_ceval.h", "ceval.c", "cpython/abstract.h"}
)

// Hidden reports whether PyTorch's viewers drop the frame. The name list
// applies to native frames only, so that a Python function such as
// "train_start" stays.
func Hidden(f snapshot.Frame) bool {
	for _, s := range hiddenFiles {
		if strings.Contains(f.Filename, s) {
			return true
		}
	}
	if IsPython(f) {
		return false
	}
	for _, s := range hiddenNames {
		if strings.Contains(f.Name, s) {
			return true
		}
	}
	return false
}

// IsPython reports whether a frame is Python code (a .py file or a
// pseudo-file such as "<string>") rather than a native frame.
func IsPython(f snapshot.Frame) bool {
	fn := f.Filename
	return strings.HasPrefix(fn, "<") || strings.HasSuffix(fn, ".py") || strings.HasSuffix(fn, ".pyx")
}

// IsUser reports whether a frame is the program's own Python code: not
// PyTorch's, not a third-party package's (site-packages, dist-packages),
// not the standard library's, not generated or frozen code.
func IsUser(f snapshot.Frame) bool {
	if !IsPython(f) || Hidden(f) {
		return false
	}
	fn := strings.ReplaceAll(f.Filename, `\`, "/")
	if strings.HasPrefix(fn, "<") || strings.HasPrefix(fn, "torch/") || strings.Contains(fn, "/torchinductor_") {
		return false
	}
	for _, s := range []string{"site-packages/", "dist-packages/", "/lib/python", "/Lib/", "pytorch/torch/"} {
		if strings.Contains(fn, s) {
			return false
		}
	}
	return true
}

// Top returns the frame that names an allocation site: the innermost frame
// of the program's own code (the line that allocated), else the innermost
// Python frame, else the innermost frame the viewers show. ok is false for
// an empty stack.
func Top(fs []snapshot.Frame) (f snapshot.Frame, ok bool) {
	for _, f := range fs {
		if IsUser(f) {
			return f, true
		}
	}
	for _, f := range fs {
		if IsPython(f) && !Hidden(f) {
			return f, true
		}
	}
	for _, f := range fs {
		if !Hidden(f) {
			return f, true
		}
	}
	if len(fs) > 0 {
		return fs[0], true
	}
	return snapshot.Frame{}, false
}
