package replay

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// TestRoundTripOne reruns one round trip of the harness and prints every
// divergence, unapplied entry and mismatch it meets (RTTRACE=1 also lists
// the trace's segment events and ooms):
//
//	RTDEBUG='expandable_segments|2.4|18' go test ./pkg/replay -run TestRoundTripOne -v
func TestRoundTripOne(t *testing.T) {
	spec := os.Getenv("RTDEBUG") // setting|version|seed
	if spec == "" {
		t.Skip("RTDEBUG=setting|version|seed not set: nothing to rerun")
	}
	p := strings.Split(spec, "|")
	v, _ := allocator.ParseVersion(p[1])
	seed, _ := strconv.Atoi(p[2])
	for _, s := range rtSettings {
		if s.name == p[0] {
			rtDebugExamples = true
			if os.Getenv("RTTRACE") != "" {
				rtDebugTrace = func(es []snapshot.TraceEntry) { rtDumpTrace(t, es) }
			}
			o := roundTrip(s, v, uint64(seed), 250)
			t.Log(strings.Join(o.problems, "\n"))
		}
	}
}

func rtDumpTrace(t *testing.T, es []snapshot.TraceEntry) {
	for i, e := range es {
		if e.Action != snapshot.ActionAlloc && e.Action != snapshot.ActionFreeRequested && e.Action != snapshot.ActionFreeCompleted {
			t.Logf("%d %s %#x %d", i, e.Action, e.Addr, e.Size)
		}
	}
}
