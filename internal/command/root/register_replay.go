package root

import (
	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/replay"
)

func init() {
	register(80, func(f *command.Factory) *cobra.Command { return replay.NewCmdReplay(f, nil) })
}
