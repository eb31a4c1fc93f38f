package analysis

import (
	"math/rand"
	"slices"
	"testing"
)

// TestPhaseCursor: the cursor answers as Phases.At does for nested,
// overlapping, open-ended and START-less ranges, at times that mostly rise
// and sometimes go back (an out-of-order entry) or are unknown (0).
func TestPhaseCursor(t *testing.T) {
	rng := rand.New(rand.NewSource(16))
	for round := 0; round < 200; round++ {
		var ps Phases
		for i := rng.Intn(40); i > 0; i-- {
			p := Phase{Name: string(rune('a' + rng.Intn(26))), StartUS: 1 + rng.Int63n(1000)}
			switch rng.Intn(5) {
			case 0: // still open
			case 1: // its START came before recording
				p.EndUS, p.StartUS = p.StartUS, 0
			default:
				p.EndUS = p.StartUS + rng.Int63n(300)
			}
			ps = append(ps, p)
		}
		slices.SortStableFunc(ps, func(x, y Phase) int { return int(x.StartUS - y.StartUS) })
		c := ps.Cursor()
		tm := int64(0)
		for i := 0; i < 400; i++ {
			switch r := rng.Intn(20); {
			case r == 0:
				tm = 0
			case r == 1:
				tm = rng.Int63n(1400) // back, or a jump
			default:
				tm += rng.Int63n(10)
			}
			if got, want := c.At(tm), ps.At(tm); got != want {
				t.Fatalf("round %d, t=%d: cursor says %q, At %q (phases %v)", round, tm, got, want, ps)
			}
		}
	}
}
