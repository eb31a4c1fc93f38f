package root

import (
	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/pprof"
)

func init() {
	register(130, func(f *command.Factory) *cobra.Command { return pprof.NewCmdPprof(f, nil) })
}
