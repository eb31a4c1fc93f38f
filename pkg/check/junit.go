package check

import (
	"encoding/xml"
	"fmt"
	"io"
	"path/filepath"
	"time"
)

// JUnit XML in the shape CI systems read (Jenkins, GitLab, Azure Pipelines,
// and the GitHub Actions test reporters): <testsuites> holding one
// <testsuite> per checked file and one <testcase> per rule and device; a
// failed rule has a <failure> whose message says why.

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       string          `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr,omitempty"`
	Properties []junitProperty `xml:"properties>property,omitempty"`
	Cases      []junitCase     `xml:"testcase"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	File      string        `xml:"file,attr,omitempty"`
	Time      string        `xml:"time,attr"`
	Failure   *junitFailure `xml:"failure"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes the outcomes as JUnit XML: a test suite per file (in
// the order of files), a test case per rule and device. now stamps the
// suites (zero: no timestamp).
func WriteJUnit(w io.Writer, files []string, devices []*Device, now time.Time) error {
	doc := junitSuites{Name: "memstat check", Time: "0"}
	for _, file := range files {
		s := junitSuite{Name: file, Time: "0"}
		if !now.IsZero() {
			// The schema's timestamp is a local date and time, no zone.
			s.Timestamp = now.UTC().Format("2006-01-02T15:04:05")
		}
		for _, d := range devices {
			if d.File != file {
				continue
			}
			s.Properties = append(s.Properties, junitProperty{fmt.Sprintf("device %d torch_version", d.Device), d.Version})
			if d.BaselineFile != "" {
				s.Properties = append(s.Properties, junitProperty{fmt.Sprintf("device %d baseline", d.Device),
					fmt.Sprintf("%s, device %d", d.BaselineFile, d.BaselineDevice)})
			}
			for _, o := range d.Outcomes {
				c := junitCase{
					Name:      fmt.Sprintf("device %d: %s", d.Device, o.Rule),
					Classname: "memstat check." + filepath.Base(file),
					File:      file,
					Time:      "0",
					SystemOut: o.Message() + "\nrule from " + o.Rule.Source + "\n",
				}
				if !o.Passed {
					c.Failure = &junitFailure{
						Message: o.Message(),
						Type:    "memory budget exceeded",
						Text:    fmt.Sprintf("%s, device %d: %s\nrule from %s\n", file, d.Device, o.Message(), o.Rule.Source),
					}
					s.Failures++
				}
				s.Tests++
				s.Cases = append(s.Cases, c)
			}
		}
		doc.Tests += s.Tests
		doc.Failures += s.Failures
		doc.Suites = append(doc.Suites, s)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
