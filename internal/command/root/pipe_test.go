package root

import (
	"bytes"
	"syscall"
	"testing"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
)

// closedPipe is a stdout whose reader has gone (memstat trace | head).
type closedPipe struct{}

func (closedPipe) Write([]byte) (int, error) { return 0, syscall.EPIPE }

// TestClosedPipeExitsZero: when the reader of stdout closes the pipe, a
// command ends quietly with status 0: the reader had what it wanted.
func TestClosedPipeExitsZero(t *testing.T) {
	good, _ := goodSnapshot(t, t.TempDir())
	for _, args := range [][]string{{"trace", good}, {"trace", "--json", good}, {"stats", good}, {"segments", good}} {
		var errOut bytes.Buffer
		ios := &iostreams.IOStreams{In: &bytes.Buffer{}, Out: closedPipe{}, ErrOut: &errOut}
		code := Main(&command.Factory{IO: ios, Getenv: func(string) string { return "" }}, args)
		if code != command.ExitOK || errOut.Len() != 0 {
			t.Errorf("%v into a closed pipe: exit %d, stderr %q; want 0 and nothing", args, code, errOut.String())
		}
	}
}
