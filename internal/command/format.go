package command

import (
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/memstat/memstat/pkg/report"
)

// OutputFlags are the --format and --json flags every reporting command
// has: human tables by default, JSON for machines, markdown for PR comments,
// CSV where a table is all there is.
type OutputFlags struct {
	Format  string
	JSON    bool
	allowed []report.Format
	cmd     *cobra.Command
}

// AddOutputFlags registers --format (limited to the given formats; text
// first) and its --json shorthand.
func AddOutputFlags(cmd *cobra.Command, o *OutputFlags, formats ...report.Format) {
	if len(formats) == 0 {
		formats = []report.Format{report.Text, report.JSON, report.Markdown}
	}
	o.allowed = formats
	o.cmd = cmd
	names := make([]string, len(formats))
	for i, f := range formats {
		names[i] = string(f)
	}
	cmd.Flags().StringVar(&o.Format, "format", string(formats[0]), "output format: {"+strings.Join(names, "|")+"}")
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print JSON (same as --format json)")
}

// Resolve validates the flags and returns the chosen format.
func (o *OutputFlags) Resolve() (report.Format, error) {
	if o.JSON {
		if o.Format != "" && o.Format != string(o.allowed[0]) && o.Format != string(report.JSON) {
			return "", FlagErrorf("--json and --format %s disagree", o.Format)
		}
		return report.JSON, nil
	}
	for _, f := range o.allowed {
		if string(f) == o.Format {
			return f, nil
		}
	}
	names := make([]string, len(o.allowed))
	for i, f := range o.allowed {
		names[i] = string(f)
	}
	return "", FlagErrorf("invalid --format %q: choose one of %s", o.Format, strings.Join(names, ", "))
}

// Envelope is the top level of the command's --json output (see
// report.Envelope): its name, the files given and the flags set.
func (o *OutputFlags) Envelope(files []string, results []report.FileResult) *report.Envelope {
	if results == nil {
		results = []report.FileResult{}
	}
	return &report.Envelope{SchemaVersion: report.SchemaVersion, Command: o.commandName(), Inputs: o.Inputs(files), Results: results}
}

// JSONLHeader is the first line of the command's JSON Lines output.
func (o *OutputFlags) JSONLHeader(files []string) report.JSONLHeader {
	return report.JSONLHeader{Record: "header", SchemaVersion: report.SchemaVersion, Command: o.commandName(), Inputs: o.Inputs(files)}
}

func (o *OutputFlags) commandName() string {
	if o.cmd == nil {
		return ""
	}
	return o.cmd.Name()
}

// notAnInput are the flags that change how a result is printed or
// computed, never what it is: left out of the envelope's inputs so that
// the same question gives the same JSON.
var notAnInput = map[string]bool{"json": true, "format": true, "jobs": true}

// Inputs lists the files and the flags set on the command line, as typed
// (what reproduces the run), less those in notAnInput.
func (o *OutputFlags) Inputs(files []string) report.Inputs {
	in := report.Inputs{Files: append([]string{}, files...), Options: map[string]string{}}
	if o.cmd == nil {
		return in
	}
	o.cmd.Flags().Visit(func(f *pflag.Flag) {
		if notAnInput[f.Name] {
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			in.Options[f.Name] = strings.Join(sv.GetSlice(), ",")
			return
		}
		in.Options[f.Name] = f.Value.String()
	})
	return in
}
