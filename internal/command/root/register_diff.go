package root

import (
	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/diff"
)

func init() {
	register(70, func(f *command.Factory) *cobra.Command { return diff.NewCmdDiff(f, nil) })
}
