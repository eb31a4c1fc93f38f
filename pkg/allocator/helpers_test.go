package allocator

import (
	"fmt"
	"strings"
	"testing"

	"github.com/memstat/memstat/pkg/snapshot"
)

// Test harness shared by the test-vector and property tests. Stream s0 is
// the default stream; s1 < s2 are side streams (allocator model §15.0).
const (
	s0 int64 = 0
	s1 int64 = 1
	s2 int64 = 2
)

// base is the first segment address of the default placement.
const base = DefaultBaseAddress

// sim wraps an Allocator with fatal-on-error helpers and a check of every
// invariant after each operation.
type sim struct {
	t *testing.T
	*Allocator
}

func newSim(t *testing.T, conf string, v Version, opts Options) *sim {
	t.Helper()
	cfg, err := ParseConfig(conf, v)
	if err != nil {
		t.Fatalf("ParseConfig(%q): %v", conf, err)
	}
	a, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.RecordHistory(HistoryOptions{Enabled: HistoryAll, Context: ContextAll}); err != nil {
		t.Fatal(err)
	}
	return &sim{t, a}
}

func (s *sim) check() {
	s.t.Helper()
	if err := s.CheckInvariants(); err != nil {
		s.t.Fatalf("invariant: %v", err)
	}
	if n, want := s.NumSegments(), len(s.Segments()); n != want {
		s.t.Fatalf("numSegments %d, Segments has %d", n, want)
	}
}

func (s *sim) alloc(size int64, stream int64) uint64 {
	s.t.Helper()
	addr, err := s.Malloc(size, stream, snapshot.NoStack)
	if err != nil {
		s.t.Fatalf("Malloc(%d): %v", size, err)
	}
	s.check()
	return addr
}

func (s *sim) oom(size int64, stream int64) *OOMError {
	s.t.Helper()
	addr, err := s.Malloc(size, stream, snapshot.NoStack)
	oom, ok := err.(*OOMError)
	if !ok {
		s.t.Fatalf("Malloc(%d) = %#x, %v; want an OOMError", size, addr, err)
	}
	s.check()
	return oom
}

func (s *sim) free(addr uint64) {
	s.t.Helper()
	if err := s.Free(addr, snapshot.NoStack); err != nil {
		s.t.Fatal(err)
	}
	s.check()
}

func (s *sim) emptyCache() {
	s.t.Helper()
	s.EmptyCache(snapshot.NoStack)
	s.check()
}

// tuple renders a Stat as PyTorch test vectors write it:
// (current, peak, allocated, freed).
func tuple(st Stat) string {
	return fmt.Sprintf("(%d,%d,%d,%d)", st.Current, st.Peak, st.Allocated, st.Freed)
}

// wantStats compares named stat tuples, e.g. "allocation.large_pool":
// "(1,2,3,2)". For a pool-specific name the "all" entry must match too
// (every test vector has one pool only), and the other pool must be zero.
func wantStats(t *testing.T, st Stats, want map[string]string) {
	t.Helper()
	arrays := map[string]*StatArray{
		"allocation": &st.Allocation, "segment": &st.Segment, "active": &st.Active,
		"inactive_split": &st.InactiveSplit, "allocated_bytes": &st.AllocatedBytes,
		"reserved_bytes": &st.ReservedBytes, "active_bytes": &st.ActiveBytes,
		"inactive_split_bytes": &st.InactiveSplitBytes, "requested_bytes": &st.RequestedBytes,
	}
	for name, w := range want {
		var got string
		switch name {
		case "oversize_allocations":
			got = tuple(st.OversizeAllocations)
		case "oversize_segments":
			got = tuple(st.OversizeSegments)
		default:
			stat, pool, _ := strings.Cut(name, ".")
			arr := arrays[stat]
			if arr == nil {
				t.Fatalf("unknown stat %q", name)
			}
			i, other := PoolLarge, PoolSmall
			if pool == "small_pool" {
				i, other = PoolSmall, PoolLarge
			}
			got = tuple(arr[i])
			if all := tuple(arr[PoolAll]); all != got {
				t.Errorf("%s: all=%s differs from %s=%s", stat, all, pool, got)
			}
			if o := tuple(arr[other]); o != "(0,0,0,0)" {
				t.Errorf("%s: other pool is %s, want zeros", stat, o)
			}
		}
		if got != w {
			t.Errorf("%s = %s, want %s", name, got, w)
		}
	}
}

// traceString renders a trace as "action(addr,size)" items with addresses
// relative to base, e.g. "segment_alloc(+0,2097152)"; oom entries show the
// device_free figure.
func traceString(tr []snapshot.TraceEntry, origin uint64) string {
	var parts []string
	for _, e := range tr {
		switch e.Action {
		case snapshot.ActionOOM:
			parts = append(parts, fmt.Sprintf("oom(free=%d,%d)", e.Addr, e.Size))
		case snapshot.ActionSnapshot:
			parts = append(parts, fmt.Sprintf("snapshot(%d)", e.Size))
		default:
			parts = append(parts, fmt.Sprintf("%s(+%d,%d)", e.Action, int64(e.Addr-origin), e.Size))
		}
	}
	return strings.Join(parts, " ")
}

// layout renders the blocks of every snapshot segment as
// "[+off:size state req]" with offsets from origin.
func layout(segs []snapshot.Segment, origin uint64) string {
	var parts []string
	for _, sg := range segs {
		var bs []string
		for _, b := range sg.Blocks {
			bs = append(bs, fmt.Sprintf("[+%d:%d %s %d]", int64(b.Address-origin), b.Size, b.State, b.RequestedSize))
		}
		parts = append(parts, strings.Join(bs, ""))
	}
	return strings.Join(parts, " | ")
}

func formatInt(n int64) string { return fmt.Sprint(n) }

func formatInts(xs []int64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, " ")
}
