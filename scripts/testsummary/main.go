// Command testsummary reads `go test -json` on stdin and prints what plain
// `go test` prints (a line per package, the output of failing tests, build
// errors) plus one line for each test that skipped, with its reason:
// without -v, plain `go test` hides t.Skip messages, and a fresh clone
// without ../shared or python3 must say what it did not test. Tests that
// skip for one reason share a line (how many, the first few named). It exits 1 when a
// package failed or did not build, or when no package reported at all.
//
// Usage: go test -json ./... | go run ./scripts/testsummary
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// skipGroup is the tests skipped for one reason.
type skipGroup struct {
	reason string
	tests  []string // package.Test of each skipped top-level test, once
	n      int      // skipped tests and subtests
}

func main() {
	failed, err := summarize(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
	if failed {
		os.Exit(1)
	}
}

func summarize(in io.Reader, out io.Writer) (failed bool, err error) {
	w := bufio.NewWriter(out)
	defer w.Flush()
	outputs := map[string][]string{} // package + test -> its output lines
	var skips []*skipGroup
	groups := map[string]*skipGroup{}
	named := map[string]bool{} // reason + package.Test already listed
	packages := 0
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if json.Unmarshal(line, &e) != nil || e.Action == "" {
			// Not an event (go itself failing early): pass it on.
			fmt.Fprintf(w, "%s\n", line)
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "build-output":
			fmt.Fprint(w, e.Output)
		case "build-fail":
			failed = true
		case "output":
			if e.Test == "" {
				if e.Output != "PASS\n" {
					fmt.Fprint(w, e.Output)
					w.Flush() // a package's line as it finishes, as go test prints it
				}
				continue
			}
			outputs[key] = append(outputs[key], e.Output)
		case "fail":
			if e.Test == "" {
				packages++
				failed = true
				continue
			}
			for _, l := range outputs[key] {
				if !isFrameLine(l) {
					fmt.Fprint(w, l)
				}
			}
			delete(outputs, key)
		case "skip":
			if e.Test == "" {
				packages++
				continue
			}
			top, _, _ := strings.Cut(e.Test, "/")
			reason := skipReason(outputs[key])
			g := groups[reason]
			if g == nil {
				g = &skipGroup{reason: reason}
				groups[reason] = g
				skips = append(skips, g)
			}
			g.n++
			name := e.Package[strings.LastIndex(e.Package, "/")+1:] + "." + top
			if !named[reason+"\x00"+name] {
				named[reason+"\x00"+name] = true
				g.tests = append(g.tests, name)
			}
			delete(outputs, key)
		case "pass":
			if e.Test == "" {
				packages++
			}
			delete(outputs, key)
		}
	}
	if err := sc.Err(); err != nil {
		return true, err
	}
	for _, g := range skips {
		const shown = 3
		names := strings.Join(g.tests[:min(len(g.tests), shown)], ", ")
		if len(g.tests) > shown {
			names += fmt.Sprintf(", +%d more", len(g.tests)-shown)
		}
		what := "1 test"
		if g.n > 1 {
			what = fmt.Sprintf("%d tests", g.n)
		}
		fmt.Fprintf(w, "skipped %s (%s): %s\n", what, names, g.reason)
	}
	if packages == 0 {
		return true, fmt.Errorf("no test results on stdin (did go test -json fail to start?)")
	}
	return failed, nil
}

// isFrameLine tells the lines test2json adds around a test's own output.
func isFrameLine(l string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}

// skipReason is the last line a skipped test wrote (its t.Skip message),
// without the file:line prefix.
func skipReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || isFrameLine(l) || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		if _, rest, ok := strings.Cut(l, ": "); ok && strings.Contains(l[:len(l)-len(rest)], ".go:") {
			return rest
		}
		return l
	}
	return "(no reason given)"
}
