package root

import (
	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
)

// commands are the subcommand constructors in the order `memstat --help`
// lists them.
var commands = []func(*command.Factory) *cobra.Command{}
