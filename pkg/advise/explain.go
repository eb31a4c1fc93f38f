package advise

import (
	"fmt"
	"strings"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/report"
)

// RankingNote says how settings are ranked.
const RankingNote = "ranking: the latest first OOM first (a run that fails is worse than any that fits; OOMs after the first do not count), then least peak reserved memory (what the GPU must have), then least fragmentation (stranded memory at the allocated peak), then fewest changes; a setting is recommended only when it removes the first OOM or moves it later, or saves at least 1% and 64 MiB of peak reserved memory, against both the recorded run and the recorded settings replayed"

// EnvLine is the line to put in the environment: PYTORCH_CUDA_ALLOC_CONF=...,
// quoted for a shell when it needs to be.
func EnvLine(conf string) string {
	if conf == "" {
		return "unset PYTORCH_CUDA_ALLOC_CONF (the defaults)"
	}
	for _, r := range conf {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_:.,-", r)) {
			return "PYTORCH_CUDA_ALLOC_CONF='" + conf + "'"
		}
	}
	return "PYTORCH_CUDA_ALLOC_CONF=" + conf
}

// Verdict is the answer in a sentence.
func (a *Advice) Verdict() string {
	n := len(a.Ranked)
	b, base := a.Best, &a.Baseline
	if b == nil {
		s := fmt.Sprintf("no setting tried helps: none of the %d other settings removes the first OOM, moves it later, or saves at least 1%% and %s of peak reserved memory; keep the recorded settings",
			n-1, report.Size(MinSavingBytes))
		if c := a.bestOther(); c != nil {
			s += fmt.Sprintf(". The best candidate, %s: peak reserved %s (recorded run %s, recorded settings replayed %s), %s",
				c.Label(), report.Size(c.PeakReserved), report.Size(a.Recorded.PeakReserved), report.Size(base.PeakReserved), firstOOMText(c))
		}
		return s
	}
	switch fb, fr := b.failAt(), base.failAt(); {
	case fb == noFailure && fr != noFailure:
		return fmt.Sprintf("use %s: no OOM, where the recorded settings replayed hit %s; peak reserved %s", b.Label(), oomAt(base), report.Size(b.PeakReserved))
	case fb != fr:
		return fmt.Sprintf("use %s: the first OOM comes later, at event %d instead of %d; peak reserved %s", b.Label(), b.FirstOOM, fr, report.Size(b.PeakReserved))
	}
	// Against the recorded run, the first column of the comparison.
	rec := &a.Recorded
	return fmt.Sprintf("use %s: peak reserved %s instead of %s (%s, %s)", b.Label(), report.Size(b.PeakReserved),
		report.Size(rec.PeakReserved), report.SignedSize(b.PeakReserved-rec.PeakReserved),
		signedPct(float64(b.PeakReserved-rec.PeakReserved)/float64(rec.PeakReserved)))
}

// bestOther is the best-ranked setting that changes something (nil when
// none was tried).
func (a *Advice) bestOther() *Result {
	for i := range a.Ranked {
		if len(a.Ranked[i].Changes) > 0 {
			return &a.Ranked[i]
		}
	}
	return nil
}

func firstOOMText(r *Result) string {
	if r.failAt() == noFailure {
		return "no OOM"
	}
	return "first " + oomAt(r)
}

func signedPct(f float64) string { return fmt.Sprintf("%+.1f%%", 100*f) }

// oomAt describes a result's first OOM: "OOM at event 1117 (a 1.2 GiB
// request with 20.5 GiB allocated)".
func oomAt(r *Result) string {
	if r.StartFailed {
		return "the tensors live when the trace starts (it starts mid-run) do not all fit"
	}
	return fmt.Sprintf("OOM at event %d (a %s request with %s allocated)", r.FirstOOM, report.Size(r.FirstOOMSize), report.Size(r.AllocatedAtFirstOOM))
}

// SimplerLine names a setting with fewer changes that comes within 1% of
// the best one's peak reserved memory ("" when there is none).
func (a *Advice) SimplerLine() string {
	if a.Simpler == nil {
		return ""
	}
	return fmt.Sprintf("simpler: %s alone gives peak reserved %s (%s more than the best)", a.Simpler.Label(),
		report.Size(a.Simpler.PeakReserved), report.Size(a.Simpler.PeakReserved-a.Best.PeakReserved))
}

// firstFitting is the best-ranked setting without an OOM.
func (a *Advice) firstFitting() *Result {
	for i := range a.Ranked {
		if a.Ranked[i].failures() == 0 {
			return &a.Ranked[i]
		}
	}
	return nil
}

// MemoryAnswer says whether the run fits the device memory: the one given
// (--device-memory), or the recorded one when the run ran out of it. It is
// "" when the device memory is unknown and nothing ran out.
func (a *Advice) MemoryAnswer() string {
	base := &a.Baseline
	fit := a.firstFitting()
	mem := report.Size(a.DeviceMemory)
	switch {
	case a.DeviceMemory == 0:
		return ""
	case a.DeviceMemoryBy == "option":
		switch {
		case base.failures() == 0 && (fit == nil || len(fit.Changes) == 0 || fit.PeakReserved >= base.PeakReserved):
			return fmt.Sprintf("fits in %s with the recorded settings (peak reserved %s)", mem, report.Size(base.PeakReserved))
		case base.failures() == 0:
			return fmt.Sprintf("fits in %s with the recorded settings (peak reserved %s), and with %s (peak reserved %s)",
				mem, report.Size(base.PeakReserved), fit.Label(), report.Size(fit.PeakReserved))
		case fit != nil:
			return fmt.Sprintf("fits in %s with %s (peak reserved %s); does not fit with the recorded settings: %s",
				mem, fit.Label(), report.Size(fit.PeakReserved), oomAt(base))
		}
		return fmt.Sprintf("does not fit in %s with any of the %d settings tried; with the recorded settings: %s. %s",
			mem, len(a.Ranked), oomAt(base), capitalize(a.shortfall()))
	case a.RecordedOOMs == 0:
		return ""
	}
	s := fmt.Sprintf("the recorded run ran out of memory at event %d with %s of device memory", a.RecordedOOMAt, mem)
	switch {
	case base.OOMs == 0:
		s += "; replayed by the simulator with the recorded settings it does not (the simulation differs from the recording here)"
	default:
		s += "; replayed with the recorded settings: " + oomAt(base)
	}
	switch {
	case fit != nil && base.failures() > 0:
		return s + fmt.Sprintf(". With %s it does not run out of memory (peak reserved %s): that setting would have avoided the OOM", fit.Label(), report.Size(fit.PeakReserved))
	case fit == nil:
		return s + ". No setting tried avoids it: " + a.shortfall()
	}
	return s
}

func capitalize(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

// shortfall explains an OOM no setting avoids: whether the tensors alone
// exceed the device, or cached memory does.
func (a *Advice) shortfall() string {
	base := &a.Baseline
	if a.Demand > a.DeviceMemory {
		return fmt.Sprintf("the recorded run's tensors alone ask for %s at their peak (requested memory), more than the %s of device memory; only using less memory (smaller batches, activation checkpointing, lower precision) makes it fit",
			report.Size(a.Demand), report.Size(a.DeviceMemory))
	}
	if base.StartFailed {
		return fmt.Sprintf("the tensors live when the trace starts do not all fit, though the tensors ask for at most %s (requested memory) of the %s: the rest is cached memory that no setting tried could reuse",
			report.Size(a.Demand), report.Size(a.DeviceMemory))
	}
	need := base.AllocatedAtFirstOOM + base.FirstOOMSize
	if need > a.DeviceMemory {
		return fmt.Sprintf("at event %d tensors held %s and asked for %s more, %s in all, more than the %s of device memory; only using less memory (smaller batches, activation checkpointing, lower precision) avoids it",
			base.FirstOOM, report.Size(base.AllocatedAtFirstOOM), report.Size(base.FirstOOMSize), report.Size(need), report.Size(a.DeviceMemory))
	}
	return fmt.Sprintf("at event %d tensors held %s and asked for %s more, %s in all, within the %s of device memory: the rest was cached memory that no setting tried could reuse",
		base.FirstOOM, report.Size(base.AllocatedAtFirstOOM), report.Size(base.FirstOOMSize), report.Size(need), report.Size(a.DeviceMemory))
}

// Why explains, one sentence per changed knob, why the best setting helps,
// with the figures behind it.
func (a *Advice) Why() []string {
	if a.Best == nil {
		return nil
	}
	b, base := a.Best, &a.Baseline
	var out []string
	for i, fam := range b.Families {
		change := b.Changes[i]
		switch fam {
		case Expandable:
			base := &a.Recorded
			out = append(out, fmt.Sprintf("expandable segments map memory page by page into one address range per stream that grows and shrinks, so blocks freed next to each other merge and larger requests reuse the space instead of needing new segments: the recorded run created %d segments (cudaMalloc calls) and reserved %s at peak, with %s of their reserved memory unused at the allocated peak (%s stranded, %s cached); %s made %d map calls and reserved %s, %s unused (%s stranded, %s cached)",
				base.SegmentsCreated, report.Size(base.PeakReserved), report.Percent(base.AtPeak.UnusedShare), report.Percent(base.AtPeak.Fragmentation), report.Percent(base.AtPeak.CachedShare),
				b.Label(), b.SegmentsCreated, report.Size(b.PeakReserved), report.Percent(b.AtPeak.UnusedShare), report.Percent(b.AtPeak.Fragmentation), report.Percent(b.AtPeak.CachedShare)))
		case MaxSplit:
			var mb int64
			fmt.Sscanf(change, "max_split_size_mb:%d", &mb)
			out = append(out, fmt.Sprintf("blocks of %d MiB or more are never split, so smaller requests no longer carve up the cached blocks the largest tensors need, and those blocks are released first when cudaMalloc fails; requests of %d MiB or more hold %s of the large-request bytes in this trace",
				mb, mb, report.Percent(a.Sizes.shareAtLeast(mb*allocator.MiB))))
		case Roundup:
			d := strings.TrimPrefix(change, "roundup_power2_divisions:")
			out = append(out, fmt.Sprintf("requests are rounded up to one of %s steps between powers of two, so tensors whose sizes vary a little (variable-length batches) fit each other's cached blocks; rounding can cost allocated memory (peak allocated %s here, %s with the recorded settings)",
				d, report.Size(b.PeakAllocated), report.Size(base.PeakAllocated)))
		case GC:
			var t float64
			fmt.Sscanf(change, "garbage_collection_threshold:%g", &t)
			out = append(out, fmt.Sprintf("under a memory fraction of %s, once reserved memory passes %s of the allowed memory the allocator frees cached segments that have not been reused lately before asking the GPU for more, instead of growing the cache",
				gcFraction, report.Percent(t)))
		}
	}
	if d := b.PeakAllocated - base.PeakAllocated; d != 0 {
		note := fmt.Sprintf("peak allocated differs by %s", report.SignedSize(d))
		switch {
		case b.OOMs != base.OOMs:
			note += fmt.Sprintf(": requests that ran out of memory (%d with the recorded settings, %d with %s) were never served, nor was what they would have held", base.OOMs, b.OOMs, b.Label())
		case b.PeakRequested == base.PeakRequested:
			note += fmt.Sprintf(" although the requests are the same (peak requested %s): allocated memory counts whole blocks, and rounding and block remainders too small to split change them", report.Size(b.PeakRequested))
		default:
			note += ": allocated memory counts whole blocks, and rounding and block remainders too small to split change them"
		}
		out = append(out, note)
	}
	return out
}

// shareAtLeast is the share of the large-request bytes in requests of at
// least n bytes.
func (s Sizes) shareAtLeast(n int64) float64 {
	if s.LargeBytes == 0 {
		return 0
	}
	var sum int64
	for _, r := range s.large {
		if r >= n {
			sum += r
		}
	}
	return float64(sum) / float64(s.LargeBytes)
}
