package root

import (
	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/trace"
)

func init() {
	register(60, func(f *command.Factory) *cobra.Command { return trace.NewCmdTrace(f, nil) })
}
