package report

import (
	"fmt"

	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/snapshot"
)

// FrameJSON is a stack frame in JSON output.
type FrameJSON struct {
	Function string `json:"function"`
	File     string `json:"file"`
	Line     int64  `json:"line"`
	// Kind is "user", "library" or "internal" (analysis.ClassifyFrame),
	// or "none" for the stand-in of a missing stack.
	Kind string `json:"kind"`
}

// FrameRecord turns a frame into its JSON form.
func FrameRecord(f snapshot.Frame) FrameJSON {
	kind := analysis.ClassifyFrame(f).String()
	if f == analysis.NoStackFrame || f == analysis.NoStackBeforeTrace {
		kind = "none"
	}
	return FrameJSON{Function: f.Name, File: f.Filename, Line: f.Line, Kind: kind}
}

// FrameRecords turns frames into their JSON form (never nil).
func FrameRecords(fs []snapshot.Frame) []FrameJSON {
	out := make([]FrameJSON, 0, len(fs))
	for _, f := range fs {
		out = append(out, FrameRecord(f))
	}
	return out
}

// SiteLabel names where memory was allocated: the site, followed by its
// caller when the stack shows one ("model.py:107 forward ← model.py:380
// forward"), so that rows of the same site but different stacks differ.
func SiteLabel(site snapshot.Frame, stack []snapshot.Frame) string {
	s := analysis.FrameString(site)
	for i, f := range stack {
		if f == site && i+1 < len(stack) {
			return s + " ← " + analysis.FrameString(stack[i+1])
		}
	}
	return s
}

// StackLines lists a stack innermost first, one frame a line, with a last
// line saying how many frames were hidden.
func StackLines(stack []snapshot.Frame, hidden int, allFrames bool) []string {
	var out []string
	for _, f := range stack {
		out = append(out, analysis.FrameString(f))
	}
	if len(stack) == 0 {
		out = append(out, analysis.NoStackFrame.Name)
	}
	if hidden > 0 {
		what := "internal frames hidden; --all-frames shows them"
		if allFrames {
			what = "frames hidden that PyTorch's viewers also hide"
		}
		out = append(out, fmt.Sprintf("(%d %s)", hidden, what))
	}
	return out
}
