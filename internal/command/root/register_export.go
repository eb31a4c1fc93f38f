package root

import (
	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/export"
)

func init() {
	register(140, func(f *command.Factory) *cobra.Command { return export.NewCmdExport(f, nil) })
}
