package analysis

import (
	"math"
	"strconv"
	"strings"

	"github.com/memstat/memstat/pkg/snapshot"
)

// FrameKind says whose code a stack frame is, which decides whether
// reports show it by default.
type FrameKind uint8

const (
	// UserFrame: the program's own Python code, where people act.
	UserFrame FrameKind = iota
	// LibraryFrame: third-party packages (site-packages, dist-packages)
	// and the Python standard library.
	LibraryFrame
	// InternalFrame: PyTorch's own Python code, code PyTorch generated
	// (Inductor's output, FX graphs), the interpreter's frozen modules,
	// and every native (C++) frame.
	InternalFrame
)

func (k FrameKind) String() string {
	switch k {
	case LibraryFrame:
		return "library"
	case InternalFrame:
		return "internal"
	}
	return "user"
}

// The display filter of PyTorch's _memory_viz.py and MemoryViz.js
// (snapshot-format.md §4.3): frames both tools never show.
var (
	filteredNames = []string{"unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "_start",
		"__libc_start_main", "PyEval_", "PyObject_", "PyFunction_"}
	filteredFiles = []string{"core/boxing", "/Register", "/Redispatch", "pythonrun.c", "Modules/main.c",
		"Objects/call.c", "Objects/methodobject.c", "pycore_ceval.h", "ceval.c", "cpython/abstract.h"}
)

// Filtered reports whether PyTorch's own viewers drop the frame from the
// stacks they display. The name list applies to native frames only: as a
// substring test it would also drop Python functions such as
// "train_start".
func Filtered(f snapshot.Frame) bool {
	for _, s := range filteredFiles {
		if strings.Contains(f.Filename, s) {
			return true
		}
	}
	if IsPython(f) {
		return false
	}
	for _, s := range filteredNames {
		if strings.Contains(f.Name, s) {
			return true
		}
	}
	return false
}

// IsPython reports whether a frame is Python code (or another source the
// program's author wrote: a .py file, a pseudo-file such as "<string>" or
// "<frozen runpy>", a notebook cell) rather than a native frame of
// stacks="all": those have "??" or "" for a file, or a C/C++ source or
// object file, and line 0 when unknown.
func IsPython(f snapshot.Frame) bool {
	fn := f.Filename
	switch {
	case strings.HasPrefix(fn, "<"):
		return true
	case fn == "" || fn == "??" || f.Line <= 0:
		return false
	}
	if i := strings.LastIndexByte(fn, '.'); i >= 0 {
		switch strings.ToLower(fn[i+1:]) {
		case "c", "cc", "cpp", "cxx", "c++", "h", "hh", "hpp", "hxx", "inl", "cu", "cuh", "s", "o", "so":
			return false
		}
	}
	return true
}

// slashed returns a filename with Windows separators turned into '/'.
func slashed(fn string) string {
	if strings.IndexByte(fn, '\\') >= 0 {
		return strings.ReplaceAll(fn, `\`, "/")
	}
	return fn
}

// torchDirs are the places PyTorch's Python code is loaded from.
var torchDirs = []string{"site-packages/torch/", "dist-packages/torch/", "pytorch/torch/"}

// ClassifyFrame says whose code a frame is.
func ClassifyFrame(f snapshot.Frame) FrameKind {
	if !IsPython(f) || Filtered(f) {
		return InternalFrame
	}
	fn := slashed(f.Filename)
	switch {
	case strings.HasPrefix(fn, "<frozen"), strings.HasPrefix(fn, "<eval_with_key"),
		strings.HasPrefix(fn, "torch/"), strings.Contains(fn, "/torchinductor_"):
		return InternalFrame
	}
	for _, d := range torchDirs {
		if strings.Contains(fn, d) {
			return InternalFrame
		}
	}
	if strings.Contains(fn, "site-packages/") || strings.Contains(fn, "dist-packages/") || isStdlib(fn) {
		return LibraryFrame
	}
	return UserFrame
}

// isStdlib recognizes the standard library of CPython installations:
// .../lib/python3.X/... (Unix) and ...\Lib\... (Windows).
func isStdlib(fn string) bool {
	return strings.Contains(fn, "/lib/python") || strings.Contains(fn, "/Lib/")
}

// ShortFile shortens a filename for tables: the path inside
// site-packages or the standard library, otherwise the last two path
// elements ("cs336_basics/model.py").
func ShortFile(fn string) string {
	s := slashed(fn)
	for _, m := range []string{"site-packages/", "dist-packages/"} {
		if i := strings.LastIndex(s, m); i >= 0 {
			return s[i+len(m):]
		}
	}
	if i := strings.Index(s, "/lib/python"); i >= 0 {
		if j := strings.IndexByte(s[i+len("/lib/python"):], '/'); j >= 0 {
			return s[i+len("/lib/python")+j+1:]
		}
	}
	if strings.HasPrefix(s, "<") {
		return s
	}
	// The last two elements (empty ones count): what follows the second
	// slash from the end, found in place rather than split and joined
	// (a stack's key shortens each of its files: report's groupings
	// spent a tenth of their time splitting).
	t := strings.TrimLeft(s, "/")
	if i := strings.LastIndexByte(t, '/'); i >= 0 {
		if j := strings.LastIndexByte(t[:i], '/'); j >= 0 {
			return t[j+1:]
		}
	}
	return t
}

// FrameString formats a frame for people: "cs336_basics/model.py:107
// forward" for Python frames; a native frame is its name, with its file
// where one is known.
func FrameString(f snapshot.Frame) string {
	if f.Filename == "" && f.Line == 0 && f.Name == "" {
		return "?"
	}
	if !IsPython(f) {
		name := NativeName(f.Name)
		if f.Filename == "" || f.Filename == "??" {
			return name
		}
		if f.Line > 0 {
			return name + " (" + ShortFile(f.Filename) + ":" + strconv.FormatInt(f.Line, 10) + ")"
		}
		return name + " (" + ShortFile(f.Filename) + ")"
	}
	return ShortFile(f.Filename) + ":" + strconv.FormatInt(f.Line, 10) + " " + f.Name
}

// NativeName shortens a demangled C++ function name for reading: no
// argument list, no return type, no "(anonymous namespace)::"
// ("torch::autograd::generated::MulBackward0::apply(std::vector<...>&&)"
// becomes "torch::autograd::generated::MulBackward0::apply").
func NativeName(name string) string {
	s := strings.ReplaceAll(name, "(anonymous namespace)::", "")
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '<':
			depth++
		case '>':
			depth--
		case '(':
			if depth == 0 && i > 0 {
				s = s[:i]
				i = len(s)
			}
		}
	}
	depth = 0
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case '>':
			depth++
		case '<':
			depth--
		case ' ':
			if depth == 0 {
				return s[i+1:]
			}
		}
	}
	return s
}

// NoStackFrame stands for an allocation without recorded frames (recorded
// with context="state" or None, before recording started, or on a thread
// the recorder does not see).
var NoStackFrame = snapshot.Frame{Name: "<no stack recorded>"}

// Frames classifies and filters the stacks of one snapshot, caching the
// result per stack. By default it hides internal frames (PyTorch's code,
// native frames; see ClassifyFrame) so that the user's own code comes
// first; AllFrames shows every frame but the ones PyTorch's viewers also
// drop.
type Frames struct {
	stacks    *snapshot.Stacks
	allFrames bool
	cache     map[snapshot.StackID]*stackView
	// sites caches Site alone (a listing of a trace needs nothing else):
	// siteAt[id] is 1 + the index in sites of stack id's site (0: not
	// yet), an index rather than a map lookup per entry (StackIDs are
	// dense), 4 bytes a stack. kinds caches ClassifyFrame by frame, 1 +
	// the kind (0: not yet): stacks share most of their frames.
	sites  []snapshot.Frame
	siteAt []int32
	kinds  []uint8
}

type stackView struct {
	site   snapshot.Frame
	shown  []snapshot.Frame
	hidden int
	key    string
}

// NewFrames returns a classifier over a snapshot's stacks.
func NewFrames(stacks *snapshot.Stacks, allFrames bool) *Frames {
	if stacks == nil {
		stacks = snapshot.NewStacks()
	}
	return &Frames{stacks: stacks, allFrames: allFrames, cache: make(map[snapshot.StackID]*stackView)}
}

// AllFrames reports whether internal frames are shown.
func (fr *Frames) AllFrames() bool { return fr.allFrames }

func (fr *Frames) view(id snapshot.StackID) *stackView {
	if v, ok := fr.cache[id]; ok {
		return v
	}
	v := &stackView{}
	// The frames are read in place by id (Stacks.Frame), not copied out
	// first (Stacks.Frames: a third of this function's time in report's
	// groupings); only the shown ones are copied, into a slice of their
	// number.
	ids := fr.stacks.Stack(id)
	frames := frameList{fr.stacks, ids}
	kinds := fr.kindsOf(id)
	v.site = siteOf(frames.at, kinds)
	// The frames shown: without internal ones unless all are asked for;
	// a stack of internal frames only keeps its Python frames, or its
	// unfiltered native ones, so that it never shows as empty.
	keep := func(i int) bool {
		if fr.allFrames {
			return !Filtered(frames.at(i))
		}
		return kinds[i] != InternalFrame
	}
	n := 0
	for i := range ids {
		if keep(i) {
			n++
		}
	}
	if n == 0 && !fr.allFrames {
		// Internal frames only (a stack of the autograd engine's thread,
		// recorded with C++ frames): the Python ones, else the native
		// ones that are not the allocator's or the interpreter's own
		// (IsMachinery), else the unfiltered ones.
		for _, k := range []func(i int) bool{
			func(i int) bool { return IsPython(frames.at(i)) && !Filtered(frames.at(i)) },
			func(i int) bool { return !IsMachinery(frames.at(i)) },
			func(i int) bool { return !Filtered(frames.at(i)) },
		} {
			keep = k
			n = 0
			for i := range ids {
				if keep(i) {
					n++
				}
			}
			if n > 0 {
				break
			}
		}
	}
	var b strings.Builder
	if n > 0 {
		v.shown = make([]snapshot.Frame, 0, n) // nil without one, as before
	}
	for i := range ids {
		if !keep(i) {
			v.hidden++
			continue
		}
		f := frames.at(i)
		v.shown = append(v.shown, f)
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		if !IsPython(f) {
			b.WriteString(NativeName(f.Name))
			continue
		}
		b.WriteString(ShortFile(f.Filename))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(f.Line, 10))
		b.WriteByte(':')
		b.WriteString(f.Name)
	}
	v.key = b.String()
	fr.cache[id] = v
	return v
}

// frameList reads a stack's frames by their ids.
type frameList struct {
	stacks *snapshot.Stacks
	ids    []snapshot.FrameID
}

func (l frameList) at(i int) snapshot.Frame { return l.stacks.Frame(l.ids[i]) }

// Site returns the frame a stack's allocation is attributed to: the
// innermost frame of the user's own code when there is one (see
// ClassifyFrame), NoStackFrame for an empty stack.
func (fr *Frames) Site(id snapshot.StackID) snapshot.Frame {
	if int(id) < len(fr.siteAt) && fr.siteAt[id] > 0 {
		return fr.sites[fr.siteAt[id]-1]
	}
	if v, ok := fr.cache[id]; ok {
		return v.site
	}
	ids := fr.stacks.Stack(id)
	f := siteOf(func(i int) snapshot.Frame { return fr.stacks.Frame(ids[i]) }, fr.kindsOf(id))
	if int(id) >= len(fr.siteAt) {
		n := max(int(id)+1, fr.stacks.NumStacks()+1)
		fr.siteAt = append(fr.siteAt, make([]int32, n-len(fr.siteAt))...)
	}
	if len(fr.sites) < math.MaxInt32 {
		fr.sites = append(fr.sites, f)
		fr.siteAt[id] = int32(len(fr.sites))
	}
	return f
}

// kindsOf classifies the frames of a stack, each frame once.
func (fr *Frames) kindsOf(id snapshot.StackID) []FrameKind {
	ids := fr.stacks.Stack(id)
	kinds := make([]FrameKind, len(ids))
	for i, f := range ids {
		if int(f) >= len(fr.kinds) {
			fr.kinds = append(fr.kinds, make([]uint8, fr.stacks.NumFrames()-len(fr.kinds))...)
		}
		k := fr.kinds[f]
		if k == 0 {
			k = uint8(ClassifyFrame(fr.stacks.Frame(f))) + 1
			fr.kinds[f] = k
		}
		kinds[i] = FrameKind(k - 1)
	}
	return kinds
}

// siteOf picks the allocation site of a stack's frames (see Site).
func siteOf(frame func(i int) snapshot.Frame, kinds []FrameKind) snapshot.Frame {
	// The allocation site: the innermost user frame, else the innermost
	// library frame, else the innermost Python frame, else the innermost
	// native frame the viewers show.
	site := NoStackFrame
	found := false
	for _, want := range []FrameKind{UserFrame, LibraryFrame} {
		for i := range kinds {
			f := frame(i)
			if kinds[i] == want {
				site, found = f, true
				break
			}
		}
		if found {
			break
		}
	}
	if !found {
		for i := range kinds {
			f := frame(i)
			if IsPython(f) {
				site, found = f, true
				break
			}
		}
	}
	if !found {
		// Native frames only: an allocation of the autograd engine's
		// thread is best named by the backward node that made it (the
		// frame the engine's Node::operator() calls: a generated
		// XBackward0::apply, AccumulateGrad::apply for gradients, ...).
		for i := range kinds {
			f := frame(i)
			if i > 0 && strings.Contains(f.Name, "torch::autograd::Node::operator()") {
				site, found = frame(i-1), true
				break
			}
		}
		for i := range kinds {
			f := frame(i)
			if found {
				break
			}
			if strings.Contains(f.Name, "autograd::generated::") && strings.Contains(f.Name, "Backward") {
				site, found = f, true
			}
		}
	}
	if !found {
		for i := range kinds {
			if f := frame(i); !IsMachinery(f) {
				site, found = f, true
				break
			}
		}
	}
	if !found {
		for i := range kinds {
			f := frame(i)
			if !Filtered(f) {
				site = f
				break
			}
		}
	}
	return site
}

// Shown returns the frames of a stack that reports show, innermost first
// (shared: do not modify), and how many were hidden.
func (fr *Frames) Shown(id snapshot.StackID) ([]snapshot.Frame, int) {
	v := fr.view(id)
	return v.shown, v.hidden
}

// Key identifies a stack by the content of its shown frames (file, line
// and function of each; files as ShortFile gives them, so that the same
// program run from another directory matches), so that stacks compare
// across snapshots, whose stack tables differ, and stacks that differ only
// in hidden frames group together. The empty stack's key is "".
func (fr *Frames) Key(id snapshot.StackID) string { return fr.view(id).key }
