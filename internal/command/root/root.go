// Package root assembles memstat's commands and maps errors to exit
// statuses, once.
package root

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
)

// Version is set at build time (-ldflags "-X ...root.Version=v1.2.3").
var Version = "dev"

// NewCmdRoot returns the memstat command with every subcommand.
func NewCmdRoot(f *command.Factory) *cobra.Command {
	// List commands in workflow order (register ORDER), not alphabetically.
	cobra.EnableCommandSorting = false
	cmd := &cobra.Command{
		Use:   "memstat <command> [flags]",
		Short: "Record and analyze PyTorch CUDA caching-allocator memory",
		Long: `memstat reads the memory snapshots PyTorch writes with
torch.cuda.memory._dump_snapshot() and answers from the command line, with no
Python, torch or GPU: the exact torch.cuda.memory_stats() figures, peaks, OOM
explanations, segment maps, traces and diffs. It also embeds a simulation of
the CUDA caching allocator to record workloads and to replay real traces under
other allocator settings.`,
		Version:       Version,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	cmd.SetOut(f.IO.Out)
	cmd.SetErr(f.IO.ErrOut)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &command.FlagError{Err: err}
	})
	cmd.CompletionOptions.HiddenDefaultCmd = true
	for _, sub := range commandList() {
		cmd.AddCommand(sub(f))
	}
	return cmd
}

// Main runs memstat with the process's arguments and returns the exit
// status.
func Main(f *command.Factory, args []string) int {
	cmd := NewCmdRoot(f)
	cmd.SetArgs(args)
	c, err := cmd.ExecuteC()
	if err == nil {
		return command.ExitOK
	}
	var cf *command.CheckFailedError
	if errors.As(err, &cf) {
		return command.ExitCheckFailed
	}
	fmt.Fprintf(f.IO.ErrOut, "memstat: %v\n", err)
	var fe *command.FlagError
	if errors.As(err, &fe) || isUnknownCommand(err) {
		if c == nil {
			c = cmd
		}
		fmt.Fprintf(f.IO.ErrOut, "Run '%s --help' for usage.\n", c.CommandPath())
	}
	return command.ExitCode(err)
}

func isUnknownCommand(err error) bool {
	msg := err.Error()
	return len(msg) > 15 && msg[:15] == "unknown command"
}
