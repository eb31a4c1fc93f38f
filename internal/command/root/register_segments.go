package root

import (
	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/segments"
)

func init() {
	register(50, func(f *command.Factory) *cobra.Command { return segments.NewCmdSegments(f, nil) })
}
