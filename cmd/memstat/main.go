// Command memstat records and analyzes the memory of PyTorch's CUDA caching
// allocator. See README.md.
package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/root"
)

func main() {
	// A write to a closed pipe (memstat trace | head) then fails with
	// EPIPE, which root.Main takes as the reader having had enough,
	// instead of killing the process with SIGPIPE.
	signal.Ignore(syscall.SIGPIPE)
	os.Exit(root.Main(command.NewFactory(), os.Args[1:]))
}
