package allocator_test

import (
	"reflect"
	"testing"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// TestTouchChangesNothing: Touch reads the block at a handed-out or
// pending address (a handed-out block's address is what it returns) and
// changes no figure, segment or block; an empty allocator reads nothing.
func TestTouchChangesNothing(t *testing.T) {
	a, err := allocator.New(allocator.DefaultConfig(allocator.Latest), allocator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Touch(0x7f0000000000, false) + a.Touch(0x7f0000000000, true); got != 0 {
		t.Fatalf("an empty allocator's Touch read %#x", got)
	}
	var addrs []uint64
	for _, n := range []int64{512, 4096, 1 << 20, 3 << 20, 700} {
		p, err := a.Malloc(n, 0, snapshot.NoStack)
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, p)
	}
	if err := a.FreeDeferred(addrs[1], snapshot.NoStack); err != nil {
		t.Fatal(err)
	}
	before, segs := a.Stats(), a.Segments()
	for k, p := range addrs {
		pending := k == 1
		got := a.Touch(p, pending)
		if got == 0 {
			t.Errorf("Touch(%#x, %v) read nothing", p, pending)
		}
		if !pending && got != p {
			t.Errorf("Touch(%#x) = %#x, want the block's address", p, got)
		}
	}
	if !reflect.DeepEqual(a.Stats(), before) || !reflect.DeepEqual(a.Segments(), segs) {
		t.Fatal("Touch changed the allocator")
	}
	if err := a.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
