package root

import (
	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/command/view"
)

func init() {
	register(125, func(f *command.Factory) *cobra.Command { return view.NewCmdView(f, nil) })
}
