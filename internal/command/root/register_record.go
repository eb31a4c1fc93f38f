package root

import (
	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/record"
)

func init() {
	register(10, func(f *command.Factory) *cobra.Command { return record.NewCmdRecord(f, nil) })
}
