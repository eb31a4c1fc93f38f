package root

import (
	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/peak"
)

func init() {
	register(30, func(f *command.Factory) *cobra.Command { return peak.NewCmdPeak(f, nil) })
}
