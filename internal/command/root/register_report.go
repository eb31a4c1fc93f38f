package root

import (
	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/report"
)

func init() {
	register(120, func(f *command.Factory) *cobra.Command { return report.NewCmdReport(f, nil) })
}
