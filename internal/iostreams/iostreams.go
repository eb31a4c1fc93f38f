// Package iostreams carries a command's input and output streams and what
// memstat knows about them (terminal or not, width), so commands never touch
// os.Stdout directly and tests can inject buffers.
package iostreams

import (
	"bufio"
	"bytes"
	"io"
	"os"

	"golang.org/x/term"
)

// IOStreams are the streams a command reads and writes: results go to Out,
// diagnostics and progress to ErrOut.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	stdoutTTY bool
	stderrTTY bool
	width     int
}

// System returns the process's standard streams. Out is buffered (a
// table of a thousand rows is a few writes, not a thousand): Flush it
// before the process exits.
func System() *IOStreams {
	s := &IOStreams{In: os.Stdin, Out: bufio.NewWriterSize(os.Stdout, 64<<10), ErrOut: os.Stderr}
	s.stdoutTTY = term.IsTerminal(int(os.Stdout.Fd()))
	s.stderrTTY = term.IsTerminal(int(os.Stderr.Fd()))
	if s.stdoutTTY {
		if w, _, err := term.GetSize(int(os.Stdout.Fd())); err == nil {
			s.width = w
		}
	}
	return s
}

// Test returns streams backed by buffers, not terminals.
func Test() (*IOStreams, *bytes.Buffer, *bytes.Buffer, *bytes.Buffer) {
	in, out, errOut := &bytes.Buffer{}, &bytes.Buffer{}, &bytes.Buffer{}
	return &IOStreams{In: in, Out: out, ErrOut: errOut}, in, out, errOut
}

// Flush writes what Out still buffers.
func (s *IOStreams) Flush() error {
	if f, ok := s.Out.(interface{ Flush() error }); ok {
		return f.Flush()
	}
	return nil
}

// IsStdoutTTY reports whether results go to a terminal.
func (s *IOStreams) IsStdoutTTY() bool { return s.stdoutTTY }

// IsStderrTTY reports whether diagnostics go to a terminal: progress is
// shown only then.
func (s *IOStreams) IsStderrTTY() bool { return s.stderrTTY }

// SetStdoutTTY and SetStderrTTY let tests pretend to be a terminal.
func (s *IOStreams) SetStdoutTTY(b bool) { s.stdoutTTY = b }

// SetStderrTTY sets whether ErrOut counts as a terminal.
func (s *IOStreams) SetStderrTTY(b bool) { s.stderrTTY = b }

// TerminalWidth returns the width of the terminal Out writes to, or 0 when
// it is not a terminal.
func (s *IOStreams) TerminalWidth() int { return s.width }
