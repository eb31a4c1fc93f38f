package root

import (
	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/advise"
)

func init() {
	register(90, func(f *command.Factory) *cobra.Command { return advise.NewCmdAdvise(f, nil) })
}
