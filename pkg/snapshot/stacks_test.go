package snapshot

import (
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"testing"
)

// TestInternFrame: the frame index gives every frame the id a map from
// frame to first-seen position gives it, through its growth, on frames
// repeated in random order among few names and files, with lines that
// differ only in their high bits or are the extremes; two tables built
// from the same frames are equal (the hash's seed is the process's).
func TestInternFrame(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	lines := []int64{0, -1, 1, math.MaxInt64, math.MinInt64}
	for i := range 64 {
		lines = append(lines, int64(i)<<48, int64(i)<<32|7)
	}
	var frames []Frame
	for range 20000 {
		line := lines[r.Intn(len(lines))]
		if r.Intn(2) == 0 {
			line = int64(r.Intn(5000))
		}
		frames = append(frames, Frame{Name: fmt.Sprintf("fn_%d", r.Intn(30)), Filename: fmt.Sprintf("f%d.py", r.Intn(4)), Line: line})
	}
	build := func() *Stacks {
		s := NewStacks()
		want := map[Frame]FrameID{}
		for i := range 200000 {
			f := frames[r.Intn(len(frames))]
			if i%2 == 0 {
				f = frames[r.Intn(1+i/10%len(frames))] // the table grows as it goes
			}
			id, seen := want[f]
			if !seen {
				id = FrameID(len(want))
				want[f] = id
			}
			if got := s.InternFrame(f); got != id || s.Frame(got) != f {
				t.Fatalf("frame %d %+v: id %d (%+v), want %d", i, f, got, s.Frame(got), id)
			}
		}
		if s.NumFrames() != len(want) {
			t.Fatalf("%d frames interned, want %d", s.NumFrames(), len(want))
		}
		return s
	}
	seed := r.Int63()
	r.Seed(seed)
	a := build()
	r.Seed(seed)
	if b := build(); !reflect.DeepEqual(a, b) {
		t.Error("two tables of the same frames differ")
	}
}
