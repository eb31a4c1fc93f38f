package command

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/pkg/report"
)

// OutputFlags are the --format and --json flags every reporting command
// has: human tables by default, JSON for machines, markdown for PR comments,
// CSV where a table is all there is.
type OutputFlags struct {
	Format  string
	JSON    bool
	allowed []report.Format
}

// AddOutputFlags registers --format (limited to the given formats; text
// first) and its --json shorthand.
func AddOutputFlags(cmd *cobra.Command, o *OutputFlags, formats ...report.Format) {
	if len(formats) == 0 {
		formats = []report.Format{report.Text, report.JSON, report.Markdown}
	}
	o.allowed = formats
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
