package analysis

import (
	"path/filepath"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/snapshot"
)

// devicesWithData lists the devices with segments or a trace.
func devicesWithData(s *snapshot.Snapshot) []int {
	var out []int
	for d := range s.Devices() {
		if s.Trace(d).Len() > 0 || len(s.DeviceSegments(d)) > 0 {
			out = append(out, d)
		}
	}
	return out
}

// TestPeakAddsUpOnEveryRealSnapshot: the blocks live at the peak add up to
// allocated_bytes.all.peak of the replay's memory_stats, every grouping
// keeps the total, and the before/during split covers every block.
func TestPeakAddsUpOnEveryRealSnapshot(t *testing.T) {
	for _, fn := range realdata.Files(t) {
		t.Run(filepath.Base(fn), func(t *testing.T) {
			s, err := snapshot.Load(fn)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range devicesWithData(s) {
				rp, err := Replay(s, d)
				if err != nil {
					t.Fatal(err)
				}
				p, err := FindPeak(rp)
				if err != nil {
					t.Fatal(err)
				}
				want := rp.Result.Stat("allocated_bytes.all.peak")
				if p.LiveBytes != want || p.Allocated.Allocated != want {
					t.Errorf("device %d: live at peak %d, moment says %d, allocated_bytes.all.peak %d", d, p.LiveBytes, p.Allocated.Allocated, want)
				}
				if p.BeforeTrace.Bytes+p.DuringTrace.Bytes != want || p.BeforeTrace.Blocks+p.DuringTrace.Blocks != len(p.Live) {
					t.Errorf("device %d: split %+v + %+v does not cover %d bytes in %d blocks", d, p.BeforeTrace, p.DuringTrace, want, len(p.Live))
				}
				if r := rp.Result.Stat("reserved_bytes.all.peak"); p.Reserved.Reserved != r {
					t.Errorf("device %d: reserved at its peak moment %d, reserved_bytes.all.peak %d", d, p.Reserved.Reserved, r)
				}
				fr := NewFrames(s.Stacks, false)
				for _, by := range []GroupBy{ByStack, ByFrame, ByFile, ByAnnotation} {
					var sum int64
					n := 0
					for _, g := range GroupBlocks(p.Live, by, fr, rp.Phases, want) {
						sum += g.Bytes
						n += g.Count
					}
					if sum != want || n != len(p.Live) {
						t.Errorf("device %d: by %s: groups add up to %d bytes in %d blocks, want %d in %d", d, by, sum, n, want, len(p.Live))
					}
				}
				if len(p.Warnings) > 0 {
					t.Errorf("device %d: warnings %v", d, p.Warnings)
				}
			}
		})
	}
}
