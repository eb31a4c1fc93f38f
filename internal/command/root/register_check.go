package root

import (
	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/check"
)

func init() {
	register(100, func(f *command.Factory) *cobra.Command { return check.NewCmdCheck(f, nil) })
}
