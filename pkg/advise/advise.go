// Package advise answers "which PYTORCH_CUDA_ALLOC_CONF should this run
// use?": it replays a recorded trace through the allocator simulation
// under candidate settings (expandable segments, max_split_size_mb values
// chosen from the trace's sizes, garbage collection under a memory
// fraction, rounding to power-of-two divisions, and combinations of the
// best), ranks them, and says whether the run fits a given GPU.
package advise

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Options configure Advise.
type Options struct {
	Device int
	// Version is the PyTorch release whose allocator rules apply; 0
	// guesses it from the file.
	Version allocator.Version
	// DeviceMemory is the GPU memory every setting is replayed with; 0
	// uses the recorded one (derived from the trace's oom entry), or
	// unlimited without one.
	DeviceMemory int64
	// Jobs bounds how many replays run at once; 0 means GOMAXPROCS.
	Jobs int
}

// Result is one setting's replay.
type Result struct {
	Setting
	// OOMs counts the requests that ran out of memory in the replay;
	// FirstOOM is the trace entry of the first (-1: none) and
	// FirstOOMSize its request size.
	OOMs         int   `json:"ooms"`
	FirstOOM     int   `json:"first_oom_entry"`
	FirstOOMSize int64 `json:"first_oom_request"`
	// StartFailed: the tensors live when the trace starts (a trace that
	// starts mid-run) did not all fit; their failures happen before the
	// first entry and are not in OOMs.
	StartFailed bool `json:"start_failed"`
	// AllocatedAtFirstOOM is the memory tensors held when the first OOM
	// happened.
	AllocatedAtFirstOOM int64 `json:"allocated_at_first_oom"`
	PeakReserved        int64 `json:"peak_reserved"`
	PeakAllocated       int64 `json:"peak_allocated"`
	PeakRequested       int64 `json:"peak_requested"`
	// Fragmentation is the share of reserved memory stranded at the
	// peak of allocated memory (AtPeak.Fragmentation).
	Fragmentation   float64       `json:"fragmentation"`
	AtPeak          replay.Unused `json:"at_peak_allocated"`
	SegmentsCreated int64         `json:"segments_created"`
	AllocRetries    int64         `json:"alloc_retries"`
	// Rank is the position in the ranking, 1 = best.
	Rank int `json:"rank"`

	first firstEntry
}

// firstEntry is the state after a replay's first alloc entry (the first
// point where a follow replay and a what-if one have applied the same
// requests: a segment_alloc before it is applied with it when following,
// and is nothing in what-if): the memory requested then, and whether
// anything ran out of memory by then.
type firstEntry struct {
	requested int64
	oom       bool
}

// failures counts what ran out of memory, the starting state as one.
func (r *Result) failures() int {
	if r.StartFailed {
		return r.OOMs + 1
	}
	return r.OOMs
}

// startShort reports whether the replay had less memory requested than
// the recording after the first alloc entry: live blocks of the starting
// state that did not fit (an OOM of the window's own requests is counted
// already).
func (r *Result) startShort(recorded int64) bool {
	return !r.first.oom && r.first.requested < recorded
}

// Advice is what Advise found for one device.
type Advice struct {
	Device         int    `json:"device"`
	TorchVersion   string `json:"torch_version"`
	RecordedConf   string `json:"recorded_alloc_conf"`
	DeviceMemory   int64  `json:"device_memory"`
	DeviceMemoryBy string `json:"device_memory_source"`
	// Coverage says what the trace covers (complete, partial).
	Coverage string `json:"coverage"`
	Entries  int    `json:"entries"`
	// RecordedOOMs are the oom entries of the trace; RecordedOOMAt the
	// first one's index (-1: none).
	RecordedOOMs  int   `json:"recorded_ooms"`
	RecordedOOMAt int   `json:"recorded_oom_entry"`
	Sizes         Sizes `json:"sizes"`
	// Demand is the peak of the memory the recorded run's tensors asked
	// for (requested_bytes.all.peak, replaying the recording itself).
	Demand int64 `json:"demand"`
	// Recorded is the recorded run itself, followed as `memstat stats`
	// replays it (the same peaks, fragmentation and segments created);
	// its FirstOOM is the trace's first oom entry.
	Recorded Result `json:"recorded"`
	// Baseline is the recorded settings replayed by the simulator alone,
	// like every other setting: from a rebuilt start state whose live
	// blocks are allocated afresh when the trace starts mid-run.
	Baseline Result `json:"baseline"`
	// Ranked are every setting tried, the baseline included, best first.
	Ranked []Result `json:"ranked"`
	// Best is the best setting when it helps (see Helps) against both the
	// recorded run and the baseline; nil when no setting tried does.
	Best *Result `json:"best"`
	// Simpler is a setting with fewer changes than Best, as good on OOMs,
	// within 1% of its peak reserved memory (nil if none): worth knowing
	// before changing more knobs than needed.
	Simpler *Result `json:"simpler"`
	// Skipped are settings not tried, with why.
	Skipped []string `json:"skipped"`
}

// ErrNoTrace is returned for a device without a trace: there is nothing to
// replay.
var ErrNoTrace = errors.New("no trace to replay (record one with torch.cuda.memory._record_memory_history())")

// Advise replays device o.Device of s under the candidate settings.
func Advise(s *snapshot.Snapshot, o Options) (*Advice, error) {
	trace := s.Trace(o.Device)
	if trace.Len() == 0 {
		return nil, ErrNoTrace
	}
	v := o.Version
	if v == 0 {
		v = replay.GuessVersion(s)
	}
	// What cannot be used of the recorded settings is left at the
	// defaults; `memstat replay` reports it.
	recorded, _ := replay.ConfigFromSettings(s.Settings, v)
	base, err := makeSetting(recorded, nil)
	if err != nil {
		return nil, fmt.Errorf("recorded settings: %w", err)
	}
	adv := &Advice{Device: o.Device, TorchVersion: v.String(), RecordedConf: base.Conf, Entries: trace.Len(), RecordedOOMAt: -1}
	for i, e := range trace.All() {
		if e.Action == snapshot.ActionOOM {
			if adv.RecordedOOMs == 0 {
				adv.RecordedOOMAt = i
			}
			adv.RecordedOOMs++
		}
	}
	adv.Sizes = sizesOf(trace, recorded)

	// The recording itself: what the tensors asked for, at the first
	// entry (after the starting state) and at the peak.
	demand, err := recordedDemand(s, o, v)
	if err != nil {
		return nil, err
	}
	adv.Demand = demand.peak
	adv.Recorded = demand.run
	adv.Recorded.Setting = base
	adv.Recorded.FirstOOM = adv.RecordedOOMAt

	// The baseline first: it fixes the device memory the others get.
	baseRun, err := replaySetting(s, o, base, v, demand.recording)
	if err != nil {
		return nil, err
	}
	adv.Baseline = baseRun.Result
	adv.DeviceMemory, adv.DeviceMemoryBy = baseRun.capacity, baseRun.capacitySource
	adv.Coverage = baseRun.coverage

	knobs, skipped := singleKnobs(v, adv.Sizes, adv.DeviceMemory)
	adv.Skipped = skipped
	seen := map[string]bool{base.Conf: true}
	var singles []Setting
	for _, k := range knobs {
		st, err := makeSetting(recorded, []knob{k})
		if err != nil {
			adv.Skipped = append(adv.Skipped, fmt.Sprintf("%s: not valid for PyTorch %s: %v", k.text, v, err))
			continue
		}
		if seen[st.Conf] {
			continue
		}
		seen[st.Conf] = true
		singles = append(singles, st)
	}
	results, err := replayAll(s, o, v, singles, demand.recording)
	if err != nil {
		return nil, err
	}

	// Round two: the best setting of each of the three leading families,
	// in pairs and all together.
	rankResults(results)
	var leaders []knob
	for _, r := range results {
		f := r.Families[0]
		if !slices.ContainsFunc(leaders, func(k knob) bool { return k.family == f }) && len(leaders) < 3 {
			leaders = append(leaders, knob{f, r.Changes[0]})
		}
	}
	var combos []Setting
	for _, set := range combinations(leaders) {
		st, err := makeSetting(recorded, set)
		if err != nil || seen[st.Conf] {
			continue
		}
		seen[st.Conf] = true
		combos = append(combos, st)
	}
	more, err := replayAll(s, o, v, combos, demand.recording)
	if err != nil {
		return nil, err
	}
	all := append(append([]Result{adv.Baseline}, results...), more...)
	for i := range all {
		all[i].StartFailed = all[i].startShort(demand.first)
	}
	adv.Baseline.StartFailed = all[0].StartFailed
	rankResults(all)
	for i := range all {
		all[i].Rank = i + 1
		if len(all[i].Changes) == 0 {
			adv.Baseline.Rank = i + 1
		}
	}
	adv.Ranked = all
	if helps := func(r *Result) bool { return Helps(r, &adv.Baseline) && Helps(r, &adv.Recorded) }; helps(&all[0]) {
		best := all[0]
		adv.Best = &best
		for _, r := range all[1:] {
			if len(r.Changes) > 0 && len(r.Changes) < len(best.Changes) && r.failAt() == best.failAt() &&
				helps(&r) && r.PeakReserved-best.PeakReserved <= best.PeakReserved/100 {
				simpler := r
				adv.Simpler = &simpler
				break
			}
		}
	}
	return adv, nil
}

// combinations returns the pairs of knobs and, with three, all three.
func combinations(ks []knob) [][]knob {
	var out [][]knob
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			out = append(out, []knob{ks[i], ks[j]})
		}
	}
	if len(ks) == 3 {
		out = append(out, slices.Clone(ks))
	}
	return out
}

// MinSaving is the least saving of peak reserved memory that makes a
// setting worth recommending: at least MinSavingShare of it and at least
// MinSavingBytes. Less is noise: a different placement, a rounding.
const (
	MinSavingBytes = 64 * allocator.MiB
	MinSavingShare = 0.01
)

// noFailure is failAt's value for a run that never ran out of memory.
const noFailure = math.MaxInt

// failAt is where a run first failed: -1 for a starting state that did
// not fit, the trace entry of its first OOM, or noFailure. Later OOMs do
// not count: the program died at the first.
func (r *Result) failAt() int {
	switch {
	case r.StartFailed:
		return -1
	case r.OOMs > 0:
		return r.FirstOOM
	}
	return noFailure
}

// Helps reports whether a setting's run a is worth recommending over b:
// it removes b's first OOM or moves it later, or, when neither runs out
// of memory, it lowers peak reserved memory by at least MinSavingShare
// and MinSavingBytes. Two runs that die at the same entry are as bad as
// each other, whatever their peaks and later OOMs.
func Helps(a, b *Result) bool {
	fa, fb := a.failAt(), b.failAt()
	if fa != fb {
		return fa > fb
	}
	if fa != noFailure {
		return false
	}
	saving := b.PeakReserved - a.PeakReserved
	return saving >= MinSavingBytes && float64(saving) >= MinSavingShare*float64(b.PeakReserved)
}

// rankResults sorts best first: the latest first OOM (none is best; a run
// that fails is worse than any that fits, and later OOMs do not count),
// then least peak reserved memory (what the GPU must have), then least
// fragmentation at the allocated peak, then fewest changed knobs (simpler
// is better), then the setting's text.
func rankResults(rs []Result) {
	slices.SortStableFunc(rs, func(a, b Result) int {
		switch {
		case a.failAt() != b.failAt():
			if a.failAt() > b.failAt() {
				return -1
			}
			return 1
		case a.PeakReserved != b.PeakReserved:
			return cmpInt(a.PeakReserved, b.PeakReserved)
		case a.Fragmentation != b.Fragmentation:
			if a.Fragmentation < b.Fragmentation {
				return -1
			}
			return 1
		case len(a.Changes) != len(b.Changes):
			return len(a.Changes) - len(b.Changes)
		case a.Conf < b.Conf:
			return -1
		case a.Conf > b.Conf:
			return 1
		}
		return 0
	})
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// run is one replay's result and what the replay decided about the
// device.
type run struct {
	Result
	capacity       int64
	capacitySource string
	coverage       string
}

// demand is what the recorded run's tensors asked for, and the recorded
// run's own figures.
type demand struct {
	first int64 // requested memory after the first alloc entry
	peak  int64 // peak requested memory
	run   Result
	// recording is what every setting's what-if replay starts from: the
	// recording is followed once, not once more per setting.
	recording *replay.Recording
}

// recordedDemand replays the recording itself (follow mode, as `memstat
// stats` does).
func recordedDemand(s *snapshot.Snapshot, o Options, v allocator.Version) (demand, error) {
	var d demand
	k := firstAlloc(s.Trace(o.Device))
	r, err := replay.New(s, replay.Options{Device: o.Device, Version: v, KeepStart: true,
		OnEvent: func(i int, _ snapshot.TraceEntry, a *allocator.Allocator) {
			if i == k {
				st := a.Stats()
				d.first = st.RequestedBytes[allocator.PoolAll].Current
			}
		}})
	if err != nil {
		return d, fmt.Errorf("recorded settings: %w", err)
	}
	res, err := r.Run()
	if err != nil {
		return d, fmt.Errorf("recorded settings: %w", err)
	}
	d.peak = res.Stats.RequestedBytes[allocator.PoolAll].Peak
	if d.recording, err = r.Recording(); err != nil {
		return d, fmt.Errorf("recorded settings: %w", err)
	}
	d.run = Result{
		OOMs: res.OOMs.Recorded, FirstOOM: -1, PeakReserved: res.PeakReserved.Bytes, PeakAllocated: res.PeakAllocated.Bytes,
		PeakRequested: d.peak, Fragmentation: res.AtPeak.Fragmentation, AtPeak: res.AtPeak,
		SegmentsCreated: res.SegmentsCreated, AllocRetries: res.Stats.NumAllocRetries,
	}
	return d, nil
}

// firstAlloc is the index of the first alloc entry (-1: none).
func firstAlloc(trace *snapshot.Trace) int {
	for i, e := range trace.All() {
		if e.Action == snapshot.ActionAlloc {
			return i
		}
	}
	return -1
}

// replaySetting runs one setting in what-if mode, starting from rec (the
// recording followed once). It shares nothing mutable with other replays:
// the snapshot and rec are only read.
func replaySetting(s *snapshot.Snapshot, o Options, st Setting, v allocator.Version, rec *replay.Recording) (*run, error) {
	out := &run{Result: Result{Setting: st, FirstOOM: -1}}
	var ooms int64
	k := firstAlloc(s.Trace(o.Device))
	onEvent := func(i int, e snapshot.TraceEntry, a *allocator.Allocator) {
		if out.FirstOOM >= 0 && i > k {
			return
		}
		// Stats copies every statistic: read it only where it is used
		// (this runs after every entry of every candidate).
		n := a.NumOOMs()
		if i == k {
			out.first = firstEntry{a.Stats().RequestedBytes[allocator.PoolAll].Current, n > 0}
		}
		if n > ooms {
			out.FirstOOM = i
			out.FirstOOMSize = e.Size
			al, _ := a.AllocatedReserved()
			out.AllocatedAtFirstOOM = al.Current
		}
	}
	cfg := st.cfg
	r, err := replay.New(s, replay.Options{
		Device: o.Device, Version: v, Config: &cfg, Capacity: o.DeviceMemory, Mode: replay.WhatIf, OnEvent: onEvent, Recording: rec,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", st.Label(), err)
	}
	res, err := r.Run()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", st.Label(), err)
	}
	out.OOMs = res.OOMs.Simulated
	out.PeakReserved = res.PeakReserved.Bytes
	out.PeakAllocated = res.PeakAllocated.Bytes
	out.PeakRequested = res.Stats.RequestedBytes[allocator.PoolAll].Peak
	out.Fragmentation = res.AtPeak.Fragmentation
	out.AtPeak = res.AtPeak
	out.SegmentsCreated = res.SegmentsCreated
	out.AllocRetries = res.Stats.NumAllocRetries
	out.capacity, out.capacitySource = res.Capacity, res.CapacitySource
	out.coverage = res.History.Coverage
	return out, nil
}

// replayAll replays the settings in parallel, at most o.Jobs at a time,
// and returns their results in the settings' order.
func replayAll(s *snapshot.Snapshot, o Options, v allocator.Version, settings []Setting, rec *replay.Recording) ([]Result, error) {
	jobs := o.Jobs
	if jobs <= 0 {
		jobs = runtime.GOMAXPROCS(0)
	}
	out := make([]Result, len(settings))
	errs := make([]error, len(settings))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(jobs, len(settings)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r, err := replaySetting(s, o, settings[i], v, rec)
				if err != nil {
					errs[i] = err
					continue
				}
				out[i] = r.Result
			}
		}()
	}
	for i := range settings {
		next <- i
	}
	close(next)
	wg.Wait()
	return out, errors.Join(errs...)
}
