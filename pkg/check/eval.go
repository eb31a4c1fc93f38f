package check

import (
	"fmt"

	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/report"
)

// Outcome is one rule evaluated on one device of one file.
type Outcome struct {
	Rule   Rule
	Actual float64
	// Baseline is the baseline's value (MaxIncrease rules only).
	Baseline float64
	Limit    float64
	Passed   bool
	// Bound is set when the figure is not exact: the rule passes only if
	// every value inside it does (Actual is then its lower end).
	// BaselineBound likewise for the baseline's figure (Baseline is its
	// lower end, which gives the strictest limit).
	Bound, BaselineBound *replay.Bound
}

// Device is one device of one checked file and the outcome of every rule
// on it.
type Device struct {
	File    string
	Device  int
	Version string
	// BaselineFile and BaselineDevice name the run MaxIncrease rules were
	// compared with ("" when there are none).
	BaselineFile   string
	BaselineDevice int
	Outcomes       []Outcome
	// Bounds are the device's figures the snapshot does not determine.
	Bounds map[string]replay.Bound
}

// Failed counts the rules that failed.
func (d *Device) Failed() int {
	n := 0
	for _, o := range d.Outcomes {
		if !o.Passed {
			n++
		}
	}
	return n
}

// Baseline is the run that MaxIncrease rules compare with.
type Baseline struct {
	File    string
	Device  int
	Figures *Figures
}

// Evaluate applies the rules to one device's figures. A rule whose key
// the file's PyTorch version does not report is an error, not a failure:
// the rule names nothing there.
func Evaluate(file string, device int, f *Figures, rules []Rule, base *Baseline) (*Device, error) {
	d := &Device{File: file, Device: device, Version: f.Version, Bounds: f.bounds}
	if base != nil {
		d.BaselineFile, d.BaselineDevice = base.File, base.Device
	}
	for _, r := range rules {
		actual, ok := f.Value(r.Key)
		if !ok {
			return nil, fmt.Errorf("%s: device %d: %s: PyTorch %s's memory_stats has no key %s", file, device, r.Source, f.Version, r.Key)
		}
		o := Outcome{Rule: r, Actual: actual}
		if b, ok := f.Bound(r.Key); ok {
			o.Bound = &b
		}
		if r.Kind == MaxIncrease {
			if base == nil {
				return nil, fmt.Errorf("%s: %s needs a baseline (--baseline FILE)", r.Source, r)
			}
			b, ok := base.Figures.Value(r.Key)
			if !ok {
				return nil, fmt.Errorf("%s: device %d: %s: PyTorch %s's memory_stats has no key %s", base.File, base.Device, r.Source, base.Figures.Version, r.Key)
			}
			o.Baseline = b
			if bb, ok := base.Figures.Bound(r.Key); ok {
				o.BaselineBound = &bb
			}
		}
		o.Limit = r.Limit(o.Baseline)
		o.Passed = o.Actual <= o.Limit
		if o.Bound != nil {
			// A gate never passes on a figure it could not compute: the
			// whole bound must be within the limit.
			o.Passed = o.Bound.Max != nil && float64(*o.Bound.Max) <= o.Limit
		}
		d.Outcomes = append(d.Outcomes, o)
	}
	return d, nil
}

// Message says what an outcome means in a sentence: "peak_reserved is
// 21.8 GiB, above the limit of 20.0 GiB".
func (o Outcome) Message() string {
	r := o.Rule
	u := r.Unit
	verdict := "within"
	if !o.Passed {
		verdict = "above"
	}
	s := fmt.Sprintf("%s is %s, %s the limit of %s", r.Key, u.Format(o.Actual), verdict, u.Format(o.Limit))
	if o.Bound != nil {
		// Each end in the rule's unit (a size, a share, a count).
		b := *o.Bound
		b.Bytes = true
		switch {
		case o.Passed:
			verdict = "within"
		case float64(b.Min) > o.Limit:
			verdict = "above"
		default:
			verdict = "not provably within"
		}
		s = fmt.Sprintf("%s is %s (a bound: the snapshot does not determine it), %s the limit of %s", r.Key, b.Format(func(v int64) string { return u.Format(float64(v)) }), verdict, u.Format(o.Limit))
	}
	if r.Kind == MaxIncrease {
		base := u.Format(o.Baseline)
		if o.BaselineBound != nil {
			bb := *o.BaselineBound
			bb.Bytes = true
			base = bb.Format(func(v int64) string { return u.Format(float64(v)) }) + ", its lower end taken"
		}
		s += fmt.Sprintf(" (baseline %s + %s; change %s)", base, r.allowance(), o.Change())
	}
	return s
}

// Change is the signed change from the baseline: "+1.5 GiB", "+12.0%"
// (relative rules), "+2.0 pt" (fractions).
func (o Outcome) Change() string {
	r := o.Rule
	diff := o.Actual - o.Baseline
	switch {
	case r.Unit == Fraction:
		return fmt.Sprintf("%+.1f pt", 100*diff)
	case r.Relative && o.Baseline != 0:
		return fmt.Sprintf("%+.1f%%", 100*diff/o.Baseline)
	case r.Unit == Bytes:
		return report.SignedSize(int64(diff))
	}
	return fmt.Sprintf("%+d", int64(diff))
}
