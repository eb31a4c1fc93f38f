package advise

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Families of settings, each one knob of PYTORCH_CUDA_ALLOC_CONF.
const (
	Recorded   = "recorded"
	Expandable = "expandable_segments"
	MaxSplit   = "max_split_size_mb"
	Roundup    = "roundup_power2_divisions"
	GC         = "garbage_collection_threshold"
)

// knob is one family's value, as the text that sets it.
type knob struct {
	family string
	text   string // "max_split_size_mb:256"
}

// Setting is one allocator configuration to try: the recorded one with
// some knobs changed.
type Setting struct {
	// Conf is the whole PYTORCH_CUDA_ALLOC_CONF, canonical ("" = the
	// defaults).
	Conf string `json:"alloc_conf"`
	// Changes are the knobs changed from the recorded settings
	// ("expandable_segments:True"); empty for the recorded settings.
	Changes []string `json:"changes"`
	// Families are the changed knobs' families, parallel to Changes.
	Families []string `json:"families"`
	cfg      allocator.Config
}

// Label is how tables name the setting: its changes, or "recorded
// settings".
func (s *Setting) Label() string {
	if len(s.Changes) == 0 {
		return "(recorded settings)"
	}
	return strings.Join(s.Changes, ",")
}

// Sizes describes the trace's requests: what max_split_size_mb values
// are worth trying depends on them.
type Sizes struct {
	Requests      int   `json:"requests"`
	LargeRequests int   `json:"large_requests"`
	LargeBytes    int64 `json:"large_bytes"`
	Largest       int64 `json:"largest"`
	// Quantiles of the large requests' sizes weighted by bytes: half of
	// the large-request bytes are in requests up to Q50, and so on.
	Q25 int64 `json:"q25"`
	Q50 int64 `json:"q50"`
	Q75 int64 `json:"q75"`
	Q90 int64 `json:"q90"`
	// large are the large requests' rounded sizes, sorted.
	large []int64
}

// sizesOf profiles the requests of a trace (and its starting state's
// blocks, which what-if allocates first).
func sizesOf(trace *snapshot.Trace, cfg allocator.Config) Sizes {
	var s Sizes
	var large []int64
	for _, e := range trace.All() {
		if e.Action != snapshot.ActionAlloc {
			continue
		}
		s.Requests++
		if r := cfg.RoundSize(e.Size); r > allocator.SmallSize {
			large = append(large, r)
			s.LargeBytes += r
		}
	}
	s.LargeRequests = len(large)
	if len(large) == 0 {
		return s
	}
	slices.Sort(large)
	s.large = large
	s.Largest = large[len(large)-1]
	q := func(f float64) int64 {
		target := int64(f * float64(s.LargeBytes))
		var acc int64
		for _, n := range large {
			acc += n
			if acc >= target {
				return n
			}
		}
		return s.Largest
	}
	s.Q25, s.Q50, s.Q75, s.Q90 = q(0.25), q(0.5), q(0.75), q(0.9)
	return s
}

// maxSplitValues are the max_split_size_mb values worth trying: the
// byte-weighted quantiles of the large requests' sizes, so that the
// largest tensors (those holding the top three quarters, half, quarter or
// tenth of the bytes) get blocks of their own that smaller requests never
// split; at least 21 (every release accepts it: before 2.9 PyTorch wants
// more than 20), and not above the largest request (there nothing
// changes).
func maxSplitValues(s Sizes) []int64 {
	var out []int64
	for _, q := range []int64{s.Q25, s.Q50, s.Q75, s.Q90} {
		mb := q / allocator.MiB
		if mb < 21 {
			mb = 21
		}
		if mb*allocator.MiB > s.Largest || slices.Contains(out, mb) {
			continue
		}
		out = append(out, mb)
	}
	return out
}

// gcThresholds and gcFraction: the garbage collector acts only under a
// memory fraction, so each threshold comes with one just below the whole
// device (1.0 itself means "no limit" from PyTorch 2.10).
var gcThresholds = []string{"0.6", "0.8"}

const gcFraction = "0.99"

// roundupValues: one division count for every size, and PyTorch's
// documented list form (coarse rounding for small requests, finer for
// large ones, where each step wastes more).
var roundupValues = []string{"2", "4", "8", "16", "[256:1,512:2,1024:4,>:8]"}

// singleKnobs lists the one-knob candidates for a trace. Knobs the
// version cannot express are skipped with the reason.
func singleKnobs(v allocator.Version, sizes Sizes, capacity int64) (knobs []knob, skipped []string) {
	knobs = append(knobs, knob{Expandable, "expandable_segments:True"})
	for _, mb := range maxSplitValues(sizes) {
		knobs = append(knobs, knob{MaxSplit, "max_split_size_mb:" + strconv.FormatInt(mb, 10)})
	}
	if len(maxSplitValues(sizes)) == 0 {
		skipped = append(skipped, fmt.Sprintf("max_split_size_mb: no request is larger than 21 MiB (the largest is %s), so it changes nothing", mib(sizes.Largest)))
	}
	switch {
	case v < allocator.V2_10:
		skipped = append(skipped, fmt.Sprintf("garbage_collection_threshold: acts only under a memory fraction, which PyTorch %s sets in code (torch.cuda.set_per_process_memory_fraction), not in PYTORCH_CUDA_ALLOC_CONF; not simulated", v))
	case capacity == 0:
		skipped = append(skipped, "garbage_collection_threshold: acts only under a memory fraction of the device, and the device memory is unknown (give --device-memory)")
	default:
		for _, t := range gcThresholds {
			knobs = append(knobs, knob{GC, "garbage_collection_threshold:" + t + ",per_process_memory_fraction:" + gcFraction})
		}
	}
	for _, d := range roundupValues {
		knobs = append(knobs, knob{Roundup, "roundup_power2_divisions:" + d})
	}
	return knobs, skipped
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/allocator.MiB) }

// makeSetting applies knobs to the recorded configuration. Each knob is
// parsed alone under the version (so its grammar and range are PyTorch's),
// then its fields are copied onto the recorded configuration; the result
// must render to a string that parses back to itself.
func makeSetting(recorded allocator.Config, knobs []knob) (Setting, error) {
	cfg := recorded
	s := Setting{}
	for _, k := range knobs {
		kc, err := allocator.ParseConfig(k.text, recorded.Version)
		if err != nil {
			return Setting{}, fmt.Errorf("%s: %v", k.text, err)
		}
		switch k.family {
		case Expandable:
			cfg.ExpandableSegments = kc.ExpandableSegments
		case MaxSplit:
			cfg.MaxSplitSize = kc.MaxSplitSize
		case Roundup:
			cfg.RoundupPower2Divisions = kc.RoundupPower2Divisions
		case GC:
			cfg.GarbageCollectionThreshold = kc.GarbageCollectionThreshold
			cfg.PerProcessMemoryFraction = kc.PerProcessMemoryFraction
		}
		s.Changes = append(s.Changes, k.text)
		s.Families = append(s.Families, k.family)
	}
	conf := cfg.String()
	parsed, err := allocator.ParseConfig(conf, recorded.Version)
	if err != nil {
		return Setting{}, fmt.Errorf("%s: %v", conf, err)
	}
	s.Conf, s.cfg = conf, parsed
	return s, nil
}
