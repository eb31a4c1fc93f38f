package command

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/memstat/memstat/internal/iostreams"
)

// ViewHint points a person at a moment in memstat view, the command that
// shows it over time (at: "peak" or a trace entry). It goes to stderr,
// and only when stderr is a terminal: a script or a pipe reading the
// results sees nothing more. device < 0 leaves --device out (a snapshot of
// one device).
func ViewHint(ios *iostreams.IOStreams, file string, device int, at string) {
	if !ios.IsStderrTTY() {
		return
	}
	if strings.ContainsAny(file, " \t'\"$`\\;&|<>()*?!#~") {
		file = strconv.Quote(file)
	}
	dev := ""
	if device >= 0 {
		dev = fmt.Sprintf(" --device %d", device)
	}
	fmt.Fprintf(ios.ErrOut, "memstat: to see it over time, with stacks and the allocator's state: memstat view %s%s --at %s\n", file, dev, at)
}
