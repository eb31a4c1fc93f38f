package check

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/memstat/memstat/internal/textfile"
)

// DefaultConfigFile is the rules file `memstat check` reads from the
// current folder when no rule is given on the command line.
const DefaultConfigFile = ".memstat.toml"

// Config is a rules file: the baseline to compare with and the rules.
//
// The format is a small subset of TOML, so editors highlight it and TOML
// tools read it:
//
//	# memory budget of the nightly training run
//	baseline = "ci/baseline.pickle"   # relative to this file
//
//	[max]
//	peak_reserved = "20GiB"
//	fragmentation = "30%"
//	ooms = 0
//	"allocated_bytes.all.peak" = "18GiB"
//
//	[max-increase]
//	peak_reserved = "10%"
//	segments = 20
//
// Keys are bare words or double-quoted (quote keys with dots: TOML reads a
// bare dotted key as nested tables); values are double-quoted strings or
// bare numbers; # starts a comment outside quotes. Each key may appear once
// per section.
type Config struct {
	Path string
	// Baseline is the baseline file, resolved against the rules file's
	// folder ("" if none).
	Baseline string
	Rules    []Rule
}

// Size limits of a rules file: real ones are a few dozen lines.
const (
	maxConfigBytes = 1 << 20
	maxConfigLine  = 4096
)

// ReadConfig reads a rules file (a regular file of at most 1 MiB).
func ReadConfig(path string) (*Config, error) {
	src, err := textfile.Read(path, "rules file", maxConfigBytes)
	if err != nil {
		return nil, err
	}
	return ParseConfig(path, src)
}

// ParseConfig parses the text of a rules file; path names it in messages
// and anchors a relative baseline.
func ParseConfig(path, src string) (*Config, error) {
	c := &Config{Path: path}
	section := ""
	seen := map[string]int{}
	for n, line := range strings.Split(src, "\n") {
		lineNo := n + 1
		at := fmt.Sprintf("%s:%d", path, lineNo)
		if len(line) > maxConfigLine {
			return nil, fmt.Errorf("%s: line longer than %d bytes", at, maxConfigLine)
		}
		line, err := stripComment(strings.TrimSpace(strings.TrimSuffix(line, "\r")))
		if err != nil {
			return nil, fmt.Errorf("%s: %v", at, err)
		}
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "[") {
			name, ok := strings.CutSuffix(line, "]")
			name = strings.TrimSpace(strings.TrimPrefix(name, "["))
			switch {
			case !ok:
				return nil, fmt.Errorf("%s: section header %s has no closing ]", at, textfile.Quote(line))
			case name == "max", name == "max-increase", name == "max_increase":
				section = strings.ReplaceAll(name, "_", "-")
			default:
				return nil, fmt.Errorf("%s: unknown section [%s]: want [max] or [max-increase]", at, textfile.Cut(name))
			}
			continue
		}
		key, val, err := keyValue(line)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", at, err)
		}
		id := section + "\x00" + key
		if prev, dup := seen[id]; dup {
			return nil, fmt.Errorf("%s: %s is set twice (first on line %d)", at, textfile.Cut(key), prev)
		}
		seen[id] = lineNo
		switch section {
		case "":
			if key != "baseline" {
				return nil, fmt.Errorf("%s: unknown setting %s before any section: the top level takes baseline; rules go under [max] or [max-increase]", at, textfile.Quote(key))
			}
			c.Baseline = val
			if val != "" && !filepath.IsAbs(val) {
				c.Baseline = filepath.Join(filepath.Dir(path), val)
			}
		case "max", "max-increase":
			kind := Max
			if section == "max-increase" {
				kind = MaxIncrease
			}
			r, err := newRule(kind, key, val, at)
			if err != nil {
				return nil, err
			}
			c.Rules = append(c.Rules, r)
		}
	}
	return c, nil
}

// stripComment drops a # comment that is not inside a quoted string.
func stripComment(line string) (string, error) {
	in := false
	for i := 0; i < len(line); i++ {
		switch line[i] {
		case '\\':
			if in {
				i++
			}
		case '"':
			in = !in
		case '#':
			if !in {
				return strings.TrimSpace(line[:i]), nil
			}
		}
	}
	if in {
		return "", fmt.Errorf("unterminated string")
	}
	return line, nil
}

// keyValue splits `key = value`, unquoting either side.
func keyValue(line string) (key, val string, err error) {
	var rest string
	if strings.HasPrefix(line, `"`) {
		end := closingQuote(line)
		if end < 0 {
			return "", "", fmt.Errorf("unterminated key")
		}
		if key, err = strconv.Unquote(line[:end+1]); err != nil {
			return "", "", fmt.Errorf("bad key %s", textfile.Cut(line[:end+1]))
		}
		rest = strings.TrimSpace(line[end+1:])
		if !strings.HasPrefix(rest, "=") {
			return "", "", fmt.Errorf("want key = value")
		}
		rest = rest[1:]
	} else {
		var ok bool
		key, rest, ok = strings.Cut(line, "=")
		key = strings.TrimSpace(key)
		if !ok || key == "" {
			return "", "", fmt.Errorf("want key = value, got %s", textfile.Quote(line))
		}
		for _, r := range key {
			if !(r == '_' || r == '-' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				return "", "", fmt.Errorf("bad key %s: quote it", textfile.Quote(key))
			}
		}
	}
	rest = strings.TrimSpace(rest)
	switch {
	case rest == "":
		return "", "", fmt.Errorf("%s has no value", textfile.Cut(key))
	case strings.HasPrefix(rest, `"`):
		end := closingQuote(rest)
		if end != len(rest)-1 {
			return "", "", fmt.Errorf("%s: want one quoted string, got %s", textfile.Cut(key), textfile.Cut(rest))
		}
		if val, err = strconv.Unquote(rest); err != nil {
			return "", "", fmt.Errorf("%s: bad string %s", textfile.Cut(key), textfile.Cut(rest))
		}
		return key, val, nil
	case strings.ContainsAny(rest, " \t\"'[]{}"):
		return "", "", fmt.Errorf("%s: quote the value: %s", textfile.Cut(key), textfile.Cut(rest))
	}
	// TOML allows 1_000 in numbers.
	return key, strings.ReplaceAll(rest, "_", ""), nil
}

// closingQuote returns the index of the quote that closes the string s
// starts with, or -1.
func closingQuote(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}
