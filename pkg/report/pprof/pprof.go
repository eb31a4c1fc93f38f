// Package pprof writes the memory allocated at one moment (pkg/live) as a
// pprof profile: one sample per allocation stack with the number of blocks
// (inuse_objects) and their bytes (inuse_space), so that `go tool pprof`
// shows where live memory was allocated (-top, -http flame graphs) and
// compares two runs (-diff_base).
package pprof

import (
	"fmt"
	"io"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/live"
	"github.com/memstat/memstat/pkg/snapshot"
)

// noStack is the function blocks without a recorded stack are charged to
// (PyTorch records none when _record_memory_history was off when they
// were allocated). Brackets, because pprof strips <...> and (...) from
// names as C++ template arguments and parameters.
const noStack = "[no stack recorded]"

// displayName keeps Python's pseudo-function names ("<module>",
// "<lambda>", "<listcomp>") readable in pprof, which would strip them to
// nothing.
func displayName(name string) string {
	if len(name) > 2 && name[0] == '<' && name[len(name)-1] == '>' && !strings.ContainsAny(name[1:len(name)-1], "<>") {
		return "[" + name[1:len(name)-1] + "]"
	}
	return name
}

// Options adjust a profile.
type Options struct {
	// AllFrames keeps every recorded frame. By default a stack keeps the
	// frames the other commands show (analysis.Frames: the user's code
	// and libraries; PyTorch's own code, native frames and the frames its
	// viewers hide are dropped; a stack of native frames only keeps
	// those that are not the allocator's or the interpreter's,
	// analysis.IsMachinery), so that -top and flame graphs start at the
	// program's code, not at DeviceCachingAllocator::malloc.
	AllFrames bool
	// Comments go into the profile (pprof -comments shows them).
	Comments []string
}

// Profile builds the profile of a live state.
func Profile(st *live.State, o Options) (*profile.Profile, error) {
	comments := o.Comments
	p := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "inuse_objects", Unit: "count"},
			{Type: "inuse_space", Unit: "bytes"},
		},
		DefaultSampleType: "inuse_space",
		PeriodType:        &profile.ValueType{Type: "space", Unit: "bytes"},
		Period:            1,
		Comments:          comments,
		TimeNanos:         st.TimeUS * 1000,
	}
	funcs := map[[2]string]*profile.Function{}
	locs := map[snapshot.Frame]*profile.Location{}
	frames := analysis.NewFrames(st.Stacks, false)
	function := func(name, file string) *profile.Function {
		k := [2]string{name, file}
		if f := funcs[k]; f != nil {
			return f
		}
		f := &profile.Function{ID: uint64(len(p.Function) + 1), Name: displayName(name), SystemName: name, Filename: file}
		funcs[k] = f
		p.Function = append(p.Function, f)
		return f
	}
	var unknown *profile.Location
	for _, g := range st.ByStack() {
		s := &profile.Sample{Value: []int64{int64(g.Blocks), g.Bytes}}
		var shown []snapshot.Frame
		if o.AllFrames {
			shown = st.Stacks.Frames(g.Stack)
		} else {
			shown, _ = frames.Shown(g.Stack)
		}
		if len(shown) == 0 {
			if unknown == nil {
				unknown = &profile.Location{ID: uint64(len(p.Location) + 1), Line: []profile.Line{{Function: function(noStack, "")}}}
				p.Location = append(p.Location, unknown)
			}
			s.Location = []*profile.Location{unknown}
		}
		// PyTorch stores frames innermost first, pprof wants the leaf
		// first: the same order.
		for _, fr := range shown {
			loc := locs[fr]
			if loc == nil {
				loc = &profile.Location{
					ID:   uint64(len(p.Location) + 1),
					Line: []profile.Line{{Function: function(fr.Name, fr.Filename), Line: fr.Line}},
				}
				locs[fr] = loc
				p.Location = append(p.Location, loc)
			}
			s.Location = append(s.Location, loc)
		}
		p.Sample = append(p.Sample, s)
	}
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("pprof: %w", err)
	}
	return p, nil
}

// Write writes the profile of a live state gzip-compressed, as pprof
// reads it.
func Write(w io.Writer, st *live.State, o Options) error {
	p, err := Profile(st, o)
	if err != nil {
		return err
	}
	return p.Write(w)
}
