// Package command holds what memstat's commands share: the Factory that
// gives them their streams and clock, the error types that decide the exit
// status, and the output-format flag. Each command lives in its own package
// under internal/command/ with an Options struct, a NewCmdX constructor and
// a runX function (the cli/cli pattern); internal/command/root assembles
// them and maps errors to exit codes once.
package command

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/memstat/memstat/internal/iostreams"
)

// Exit statuses.
const (
	ExitOK = 0
	// ExitCheckFailed: a `memstat check` rule failed.
	ExitCheckFailed = 1
	// ExitError: bad input, bad usage, or any other error.
	ExitError = 2
)

// Factory gives commands their dependencies; tests replace the fields.
type Factory struct {
	IO     *iostreams.IOStreams
	Now    func() time.Time
	Getenv func(string) string
}

// NewFactory returns the factory of a real process.
func NewFactory() *Factory {
	return &Factory{IO: iostreams.System(), Now: time.Now, Getenv: os.Getenv}
}

// FlagError is a usage mistake; the usage text is printed after it.
type FlagError struct{ Err error }

func (e *FlagError) Error() string { return e.Err.Error() }
func (e *FlagError) Unwrap() error { return e.Err }

// FlagErrorf makes a FlagError.
func FlagErrorf(format string, args ...any) error {
	return &FlagError{Err: fmt.Errorf(format, args...)}
}

// CheckFailedError reports that `memstat check` ran and a rule failed: the
// command already printed the details, so Main prints nothing more and
// exits 1.
type CheckFailedError struct{ Failed int }

func (e *CheckFailedError) Error() string { return fmt.Sprintf("%d check(s) failed", e.Failed) }

// ExitCode maps an error to memstat's exit status.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var cf *CheckFailedError
	if errors.As(err, &cf) {
		return ExitCheckFailed
	}
	return ExitError
}
