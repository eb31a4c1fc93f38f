package command

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/snapshot"
)

// twoDevices has one whole free segment on devices 0 and 2, nothing on 1.
func twoDevices() *snapshot.Snapshot {
	seg := func(device int, addr uint64) snapshot.Segment {
		return snapshot.Segment{
			Device: device, Address: addr, TotalSize: 2 << 20,
			Blocks: []snapshot.Block{{Address: addr, Size: 2 << 20, State: snapshot.Inactive}},
		}
	}
	return &snapshot.Snapshot{Stacks: snapshot.NewStacks(), Segments: []snapshot.Segment{seg(0, 0x7f0000000000), seg(2, 0x7f1000000000)}}
}

func TestReplayEach(t *testing.T) {
	device := func(rp *analysis.Replayed) (int, error) { return rp.Device, nil }
	var errOut bytes.Buffer
	got, err := ReplayEach(&errOut, "a.pickle", twoDevices(), -1, device)
	if err != nil || !slices.Equal(got, []int{0, 2}) || errOut.Len() != 0 {
		t.Errorf("every device: %v, %v, stderr %q; want [0 2], no error, nothing on stderr", got, err, errOut.String())
	}
	if got, err := ReplayEach(&errOut, "a.pickle", twoDevices(), 2, device); err != nil || !slices.Equal(got, []int{2}) {
		t.Errorf("--device 2: %v, %v; want [2]", got, err)
	}
	if _, err := ReplayEach(&errOut, "a.pickle", twoDevices(), 1, device); err == nil {
		t.Error("--device 1, which has no data: no error")
	}

	failed := errors.New("cannot analyse")
	_, err = ReplayEach(&errOut, "a.pickle", twoDevices(), -1, func(*analysis.Replayed) (int, error) { return 0, failed })
	if !errors.Is(err, failed) || err.Error() != "a.pickle: cannot analyse" {
		t.Errorf("analyse's error came back as %v, want it prefixed with the file", err)
	}

	errOut.Reset()
	got, err = ReplayEach(&errOut, "a.pickle", &snapshot.Snapshot{Stacks: snapshot.NewStacks()}, -1, device)
	if err != nil || len(got) != 0 || errOut.String() != "memstat: a.pickle: no device has segments or a trace\n" {
		t.Errorf("no device with data: %v, %v, stderr %q", got, err, errOut.String())
	}
}
