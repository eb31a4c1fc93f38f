package root

import (
	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/stats"
)

func init() {
	register(20, func(f *command.Factory) *cobra.Command { return stats.NewCmdStats(f, nil) })
}
