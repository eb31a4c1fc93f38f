package check

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/memstat/memstat/internal/textfile"
	"github.com/memstat/memstat/pkg/report"
)

// Kind is what a rule limits.
type Kind uint8

// Rule kinds.
const (
	// Max: the figure must not exceed an absolute limit.
	Max Kind = iota
	// MaxIncrease: the figure must not exceed the baseline's by more
	// than an amount or a percentage.
	MaxIncrease
)

func (k Kind) String() string {
	if k == MaxIncrease {
		return "max_increase"
	}
	return "max"
}

// Rule is one budget: a figure and its limit.
type Rule struct {
	Kind Kind
	Key  string
	Unit Unit
	// Value is the limit (Max) or the allowed increase (MaxIncrease), in
	// the figure's unit: bytes, a count, or a fraction (0.3 for 30%).
	Value float64
	// Relative: a MaxIncrease given as a percentage of the baseline's
	// value (Value 0.1 for 10%). For fractions such as fragmentation an
	// increase in percent is in percentage points and is not relative.
	Relative bool
	// Source says where the rule came from: "--max peak_reserved=20GiB"
	// or ".memstat.toml:4".
	Source string
}

// ParseRule reads a KEY=VALUE rule of the given kind. source is where it
// was written, for messages.
func ParseRule(kind Kind, spec, source string) (Rule, error) {
	key, val, ok := strings.Cut(spec, "=")
	key, val = strings.TrimSpace(key), strings.TrimSpace(val)
	if !ok || key == "" || val == "" {
		return Rule{}, fmt.Errorf("%s: want KEY=VALUE, e.g. peak_reserved=20GiB", source)
	}
	return newRule(kind, key, val, source)
}

func newRule(kind Kind, key, val, source string) (Rule, error) {
	unit, ok := lookupKey(key)
	if !ok {
		return Rule{}, fmt.Errorf("%s: %s", source, unknownKey(key))
	}
	r := Rule{Kind: kind, Key: key, Unit: unit, Source: source}
	var err error
	r.Value, r.Relative, err = parseValue(kind, unit, val)
	if err != nil {
		return Rule{}, fmt.Errorf("%s: %s: %v", source, textfile.Cut(key), err)
	}
	return r, nil
}

// parseValue reads a limit in a figure's unit. Percentages are shares for
// fractions (30% = 0.3, and an increase of 5% is 5 percentage points), and
// shares of the baseline for the increase of anything else.
func parseValue(kind Kind, unit Unit, s string) (v float64, relative bool, err error) {
	if num, ok := strings.CutSuffix(s, "%"); ok {
		p, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || p < 0 || math.IsInf(p, 0) || math.IsNaN(p) {
			return 0, false, fmt.Errorf("invalid percentage %s", textfile.Quote(s))
		}
		switch {
		case unit == Fraction:
			return p / 100, false, nil
		case kind == MaxIncrease:
			return p / 100, true, nil
		}
		return 0, false, fmt.Errorf("a percentage (%s) needs a baseline here: use --max-increase, or give a %s", textfile.Cut(s), unitExample(unit))
	}
	switch unit {
	case Bytes:
		n, err := report.ParseSize(s)
		if err != nil {
			return 0, false, err
		}
		if n < 0 {
			return 0, false, fmt.Errorf("negative size %s", textfile.Quote(s))
		}
		return float64(n), false, nil
	case Count:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0, false, fmt.Errorf("invalid count %s: want a whole number", textfile.Quote(s))
		}
		return float64(n), false, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1 {
		return 0, false, fmt.Errorf("invalid share %s: want a percentage such as 30%% or a fraction between 0 and 1", textfile.Quote(s))
	}
	return f, false, nil
}

func unitExample(u Unit) string {
	switch u {
	case Bytes:
		return "size such as 20GiB or 512MB"
	case Count:
		return "count such as 0 or 200"
	}
	return "share such as 30%"
}

// unknownKey is the message for a key that names nothing: the closest
// keys, or where to find them.
func unknownKey(key string) string {
	close := closeKeys(key, 4)
	if len(close) == 0 {
		return fmt.Sprintf("unknown key %s: use a memory_stats key such as allocated_bytes.all.peak or one of %s", textfile.Quote(key), strings.Join(namedNames(), ", "))
	}
	return fmt.Sprintf("unknown key %s (did you mean %s?)", textfile.Quote(key), strings.Join(close, ", "))
}

func namedNames() []string {
	var out []string
	for _, n := range NamedFigures {
		out = append(out, n.Name)
	}
	return out
}

// closeKeys returns up to n keys close to key: within an edit distance of
// a third of its length, or containing it (peak → peak_reserved ...).
func closeKeys(key string, n int) []string {
	type cand struct {
		k string
		d int
	}
	var cs []cand
	lk := strings.ToLower(key)
	limit := max(2, len(key)/3)
	for _, k := range Keys() {
		d := editDistance(lk, k)
		if strings.Contains(k, lk) && len(lk) >= 3 {
			d = min(d, limit)
		}
		if d <= limit {
			cs = append(cs, cand{k, d})
		}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].d < cs[j].d })
	var out []string
	for i := 0; i < len(cs) && i < n; i++ {
		out = append(out, cs[i].k)
	}
	return out
}

// editDistance is the Levenshtein distance of two ASCII strings.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Format prints a value of the unit: "20.0 GiB", "12", "30.0%".
func (u Unit) Format(v float64) string {
	switch u {
	case Bytes:
		return report.Size(int64(v))
	case Count:
		return strconv.FormatInt(int64(v), 10)
	}
	return report.Percent(v)
}

// allowance prints a MaxIncrease's allowed increase: "10%", "1.0 GiB",
// "5.0 pt".
func (r Rule) allowance() string {
	switch {
	case r.Relative:
		return strconv.FormatFloat(100*r.Value, 'f', -1, 64) + "%"
	case r.Unit == Fraction:
		return strconv.FormatFloat(100*r.Value, 'f', 1, 64) + " pt"
	}
	return r.Unit.Format(r.Value)
}

// String is the rule as reports name it: "peak_reserved <= 20.0 GiB",
// "peak_reserved <= baseline + 10%".
func (r Rule) String() string {
	if r.Kind == MaxIncrease {
		return fmt.Sprintf("%s <= baseline + %s", r.Key, r.allowance())
	}
	return fmt.Sprintf("%s <= %s", r.Key, r.Unit.Format(r.Value))
}

// Limit is the rule's bound given the baseline's value (ignored for Max).
func (r Rule) Limit(base float64) float64 {
	switch {
	case r.Kind == Max:
		return r.Value
	case r.Relative:
		return base * (1 + r.Value)
	}
	return base + r.Value
}
