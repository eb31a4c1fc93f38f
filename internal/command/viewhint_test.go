package command

import (
	"testing"

	"github.com/memstat/memstat/internal/iostreams"
)

func TestViewHint(t *testing.T) {
	ios, _, _, errOut := iostreams.Test()
	ViewHint(ios, "run.pickle", 1, "peak")
	if errOut.Len() != 0 {
		t.Errorf("hint printed to a stderr that is not a terminal: %q", errOut)
	}
	ios.SetStderrTTY(true)
	ViewHint(ios, "run.pickle", 1, "peak")
	ViewHint(ios, "my run.pickle", -1, "1234")
	want := "memstat: to see it over time, with stacks and the allocator's state: memstat view run.pickle --device 1 --at peak\n" +
		"memstat: to see it over time, with stacks and the allocator's state: memstat view \"my run.pickle\" --at 1234\n"
	if got := errOut.String(); got != want {
		t.Errorf("hints:\n%s\nwant:\n%s", got, want)
	}
}
