package root

import (
	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/oom"
)

func init() {
	register(40, func(f *command.Factory) *cobra.Command { return oom.NewCmdOOM(f, nil) })
}
