// Command memstat records and analyzes the memory of PyTorch's CUDA caching
// allocator. See README.md.
package main

import (
	"os"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/root"
)

func main() {
	os.Exit(root.Main(command.NewFactory(), os.Args[1:]))
}
