package root

import (
	"sort"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
)

// Each command is wired in by a small file of its own in this package
// (register_<name>.go) that calls register from init, so commands can be
// added without touching a shared list. order fixes where `memstat --help`
// lists the command.
type registration struct {
	order int
	ctor  func(*command.Factory) *cobra.Command
}

var registrations []registration

func register(order int, ctor func(*command.Factory) *cobra.Command) {
	registrations = append(registrations, registration{order, ctor})
}

func commandList() []func(*command.Factory) *cobra.Command {
	sort.SliceStable(registrations, func(i, j int) bool { return registrations[i].order < registrations[j].order })
	out := make([]func(*command.Factory) *cobra.Command, len(registrations))
	for i, r := range registrations {
		out[i] = r.ctor
	}
	return out
}
