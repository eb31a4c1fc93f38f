package check

import (
	"fmt"
	"io"
	"strings"
)

// WriteGitHubAnnotations writes one ::error workflow command per failed
// rule, which GitHub Actions shows on the run's summary page and on the
// pull request.
func WriteGitHubAnnotations(w io.Writer, devices []*Device) error {
	for _, d := range devices {
		for _, o := range d.Outcomes {
			if o.Passed {
				continue
			}
			title := fmt.Sprintf("memstat check: %s", o.Rule)
			msg := fmt.Sprintf("%s, device %d: %s", d.File, d.Device, o.Message())
			if _, err := fmt.Fprintf(w, "::error file=%s,title=%s::%s\n",
				escapeProperty(d.File), escapeProperty(title), escapeData(msg)); err != nil {
				return err
			}
		}
	}
	return nil
}

// escapeData and escapeProperty are the runner's escaping of workflow
// command values: % and line breaks everywhere, and in properties also the
// characters that separate them.
func escapeData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

func escapeProperty(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}
