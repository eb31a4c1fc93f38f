// Package cmdtest runs a memstat command in a test, with buffers for its
// streams, and returns what it printed with the folders of the files it
// was given cut, so that golden files do not depend on where the checkout
// or a temporary folder is.
package cmdtest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/pkg/report"
)

// Run executes the command newCmd builds with args and returns its stdout,
// its stderr and its error.
func Run(t testing.TB, newCmd func(*command.Factory) *cobra.Command, args ...string) (string, string, error) {
	t.Helper()
	ios, _, out, errOut := iostreams.Test()
	cmd := newCmd(&command.Factory{IO: ios, Getenv: os.Getenv})
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	command.ReleaseHeapLimit()
	o, e := out.String(), errOut.String()
	for _, a := range args {
		if !strings.ContainsRune(a, os.PathSeparator) {
			continue
		}
		dir := filepath.Dir(a) + string(os.PathSeparator)
		o, e = strings.ReplaceAll(o, dir, ""), strings.ReplaceAll(e, dir, "")
	}
	return o, e, err
}

// IsFlagError reports whether err is a usage mistake whose text contains
// want.
func IsFlagError(err error, want string) bool {
	_, ok := err.(*command.FlagError)
	return ok && strings.Contains(err.Error(), want)
}

// MarkdownTables checks that every markdown table in out ends with a blank
// line (a line right after a table is read as one more row) and returns
// how many tables out has.
func MarkdownTables(t testing.TB, out string) int {
	t.Helper()
	lines := strings.Split(out, "\n")
	tables := 0
	for i := 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i-1], "|") && !strings.HasPrefix(lines[i], "|") {
			tables++
			if lines[i] != "" {
				t.Errorf("line %d follows a table without a blank line: %q", i+1, lines[i])
			}
		}
	}
	return tables
}

// Parse runs the command newCmd builds with args as far as its RunE's
// checks, and returns the options it would have run with (nil when it
// stopped before) and its error: for tests of flag parsing.
func Parse[O any](t testing.TB, newCmd func(*command.Factory, func(*O) error) *cobra.Command, args ...string) (*O, error) {
	t.Helper()
	var got *O
	_, _, err := Run(t, func(f *command.Factory) *cobra.Command {
		return newCmd(f, func(o *O) error { got = o; return nil })
	}, args...)
	return got, err
}

// Result returns the JSON of the first entry of a --json output's results
// (the envelope's `.results[0]`: file and devices), for tests written
// against one file's record; it fails the test when out is not an
// envelope of the current schema version.
func Result(t testing.TB, out string) string {
	t.Helper()
	var env struct {
		SchemaVersion int               `json:"schema_version"`
		Results       []json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &env); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	if env.SchemaVersion != report.SchemaVersion || len(env.Results) == 0 {
		t.Fatalf("not a version %d envelope with results:\n%s", report.SchemaVersion, out)
	}
	return string(env.Results[0])
}
