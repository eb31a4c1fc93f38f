// Package root assembles memstat's commands and maps errors to exit
// statuses, once.
package root

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/parallel"
	"github.com/memstat/memstat/pkg/report"
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
		return &command.FlagError{Err: plainFlagError(err)}
	})
	cmd.CompletionOptions.HiddenDefaultCmd = true
	for _, sub := range commandList() {
		cmd.AddCommand(sub(f))
	}
	return cmd
}

// Main runs memstat with the process's arguments and returns the exit
// status.
//
// A panic anywhere in the command (a bug, never the input's fault) becomes
// one line, "memstat: internal error: ...", and exit 2; the Go stack goes
// to stderr only when MEMSTAT_TRACEBACK is set.
func Main(f *command.Factory, args []string) (code int) {
	// Warnings wait until the command returns, so that an error line
	// comes before them (see command.HeldStderr).
	stderr := f.IO.ErrOut
	held := command.HoldStderr(stderr)
	f.IO.ErrOut = held
	defer func() {
		f.IO.ErrOut = stderr
		held.Release()
	}()
	cmd := NewCmdRoot(f)
	cmd.SetArgs(args)
	var (
		c   *cobra.Command
		err error
	)
	func() {
		defer func() {
			if p := parallel.Recovered(recover()); p != nil {
				err = p
			}
		}()
		c, err = cmd.ExecuteC()
	}()
	command.ReleaseHeapLimit()
	if ferr := f.IO.Flush(); err == nil {
		err = ferr
	}
	if p := (*parallel.PanicError)(nil); errors.As(err, &p) {
		fmt.Fprintf(stderr, "memstat: %s (a bug in memstat: please report it with the command line; MEMSTAT_TRACEBACK=1 prints where)\n", report.Escape(err.Error()))
		held.Release()
		if f.Getenv != nil && f.Getenv("MEMSTAT_TRACEBACK") != "" {
			stderr.Write(p.Stack)
		}
		return command.ExitError
	}
	if err == nil || errors.Is(err, syscall.EPIPE) {
		// A reader that closed the pipe (memstat trace | head) has what
		// it wanted: that is no failure.
		return command.ExitOK
	}
	var cf *command.CheckFailedError
	if errors.As(err, &cf) {
		return command.ExitCheckFailed
	}
	// One line, whatever the error quotes from a file, before any
	// warning.
	fmt.Fprintf(stderr, "memstat: %s\n", report.Escape(err.Error()))
	var fe *command.FlagError
	if errors.As(err, &fe) || isUnknownCommand(err) {
		if c == nil {
			c = cmd
		}
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", c.CommandPath())
	}
	return command.ExitCode(err)
}

func isUnknownCommand(err error) bool {
	msg := err.Error()
	return len(msg) > 15 && msg[:15] == "unknown command"
}

// strconvError is the tail pflag adds to a number it cannot parse:
// `: strconv.ParseInt: parsing "abc": invalid syntax`.
var strconvError = regexp.MustCompile(`: strconv\.Parse(Int|Uint|Float|Bool): parsing "(?:[^"\\]|\\.)*": (invalid syntax|value out of range)$`)

// plainFlagError rewords pflag's errors for numbers and booleans, which
// name Go's strconv functions, in the user's terms.
func plainFlagError(err error) error {
	m := strconvError.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	want := map[string]string{"Int": "a whole number", "Uint": "a whole number of at least 0", "Float": "a number", "Bool": "true or false"}[m[1]]
	if m[2] == "value out of range" {
		want += " in range"
	}
	msg := strings.TrimSuffix(err.Error(), m[0])
	return errors.New(strings.Replace(msg, " flag", "", 1) + ": want " + want)
}
