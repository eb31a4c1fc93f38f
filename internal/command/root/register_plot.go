package root

import (
	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/plot"
)

func init() {
	register(110, func(f *command.Factory) *cobra.Command { return plot.NewCmdPlot(f, nil) })
}
