package analysis

import (
	"fmt"
	"slices"

	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Peak is what `memstat peak` reports for one device: when allocated and
// reserved memory peaked, and what was live at the peak of allocated
// memory.
type Peak struct {
	Device   int    `json:"device"`
	Coverage string `json:"coverage"`
	Entries  int    `json:"trace_entries"`
	// Allocated is the moment allocated memory first reached its peak
	// (allocated_bytes.all.peak), Reserved the same for reserved memory.
	Allocated Moment `json:"peak_allocated"`
	Reserved  Moment `json:"peak_reserved"`
	// Live are the blocks allocated at the peak of allocated memory; their
	// sizes add up to Allocated.Allocated.
	Live      []LiveBlock `json:"-"`
	LiveBytes int64       `json:"live_bytes"`
	// BeforeTrace is the live memory at the peak that was allocated before
	// the trace began (a trace that starts mid-run, or no trace at all);
	// DuringTrace the rest.
	BeforeTrace Share `json:"before_trace"`
	DuringTrace Share `json:"during_trace"`
	// PrivatePools is the live memory at the peak that sat in private
	// pools (CUDA graphs, MemPool): blocks of segments whose
	// segment_pool_id is not (0, 0).
	PrivatePools Share `json:"private_pools"`
	// Phases are the peaks inside each annotated range name, in order of
	// first start; empty without annotations.
	Phases []PhasePeak `json:"phases"`
	// Warnings say where the figures do not add up.
	Warnings []string `json:"warnings,omitempty"`
}

// Share is some bytes in some blocks.
type Share struct {
	Bytes  int64 `json:"bytes"`
	Blocks int   `json:"blocks"`
}

// PhasePeak is the highest memory while ranges of one name were open.
type PhasePeak struct {
	Name string `json:"name"`
	// Ranges counts the ranges of that name (occurrences).
	Ranges        int    `json:"ranges"`
	PeakAllocated int64  `json:"peak_allocated"`
	PeakReserved  int64  `json:"peak_reserved"`
	At            Moment `json:"peak_allocated_at"`
	// Entries counts the trace entries recorded inside the ranges.
	Entries int `json:"entries"`
}

// FindPeak replays a device and rebuilds its state at the peak of
// allocated memory.
func FindPeak(rp *Replayed) (*Peak, error) {
	res := rp.Result
	p := &Peak{
		Device:    rp.Device,
		Coverage:  res.History.Coverage,
		Entries:   rp.Trace().Len(),
		Allocated: rp.MomentAt(res.PeakAllocated.Index),
		Reserved:  rp.MomentAt(res.PeakReserved.Index),
	}
	var st *State
	if res.History.Coverage == replay.CoverageNone {
		st = rp.FinalState()
		st.Index = -1
	} else {
		sts, err := rp.States(res.PeakAllocated.Index)
		if err != nil {
			return nil, err
		}
		st = sts[0]
	}
	p.Live = rp.LiveBlocks(st)
	p.PrivatePools = privateShare(st)
	for _, b := range p.Live {
		p.LiveBytes += b.Size
		if b.AllocIndex < 0 {
			p.BeforeTrace.Bytes += b.Size
			p.BeforeTrace.Blocks++
		} else {
			p.DuringTrace.Bytes += b.Size
			p.DuringTrace.Blocks++
		}
	}
	if want := res.PeakAllocated.Bytes; p.LiveBytes != want {
		p.Warnings = append(p.Warnings, fmt.Sprintf("the blocks live at the peak add up to %d bytes, allocated_bytes.all.peak is %d", p.LiveBytes, want))
	}
	p.Phases = phasePeaks(rp)
	return p, nil
}

// phasePeaks finds, for each annotated range name, the highest allocated
// and reserved memory after an entry recorded inside one of its ranges.
func phasePeaks(rp *Replayed) []PhasePeak {
	if len(rp.Phases) == 0 {
		return nil
	}
	byName := map[string]int{}
	var out []PhasePeak
	for _, ph := range rp.Phases {
		i, ok := byName[ph.Name]
		if !ok {
			i = len(out)
			byName[ph.Name] = i
			out = append(out, PhasePeak{Name: ph.Name, At: Moment{Index: -2}})
		}
		out[i].Ranges++
	}
	outside := PhasePeak{Name: NoAnnotationLabel, At: Moment{Index: -2}}
	var prevAction snapshot.Action
	for k, e := range rp.Trace().All() {
		seen := map[int]bool{}
		hit := func(pp *PhasePeak) {
			pp.Entries++
			// The segment events that lead an allocation share its state;
			// the peak is after the allocation, as the replay reports it.
			a := rp.AllocatedAt(k)
			lead := pp.At.Index == k-1 && k > 0 && isSegmentEvent(prevAction)
			if a > pp.PeakAllocated || pp.At.Index == -2 || a == pp.PeakAllocated && lead {
				pp.PeakAllocated = a
				pp.At = Moment{Index: k} // described after the pass
			}
			if r := rp.ReservedAt(k); r > pp.PeakReserved {
				pp.PeakReserved = r
			}
		}
		rp.Phases.open(e.TimeUS, func(i int) {
			j := byName[rp.Phases[i].Name]
			if !seen[j] {
				seen[j] = true
				hit(&out[j])
			}
		})
		if len(seen) == 0 && e.TimeUS != 0 {
			hit(&outside)
		}
		prevAction = e.Action
	}
	for i := range out {
		if out[i].At.Index >= 0 {
			out[i].At = rp.MomentAt(out[i].At.Index)
		}
	}
	if outside.At.Index >= 0 {
		outside.At = rp.MomentAt(outside.At.Index)
	}
	out = slices.DeleteFunc(out, func(pp PhasePeak) bool { return pp.Entries == 0 && pp.Ranges == 0 })
	if outside.Entries > 0 {
		out = append(out, outside)
	}
	for i := range out {
		if out[i].At.Index == -2 {
			out[i].At = Moment{Index: -1}
		}
	}
	return out
}

func isSegmentEvent(a snapshot.Action) bool {
	switch a {
	case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentMap, snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
		return true
	}
	return false
}

// privateShare sums the allocated blocks of a state's private-pool
// segments.
func privateShare(st *State) Share {
	var sh Share
	for _, seg := range st.Segments {
		if seg.PoolID.IsDefault() {
			continue
		}
		for _, b := range seg.Blocks {
			if b.State == snapshot.ActiveAllocated {
				sh.Bytes += b.Size
				sh.Blocks++
			}
		}
	}
	return sh
}
