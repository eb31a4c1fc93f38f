package replay

import (
	"fmt"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/snapshot"
)

// VersionRange is the releases a snapshot's schema allows, Min to Max
// inclusive (Min == Max: the keys pin one release).
type VersionRange struct {
	Min, Max allocator.Version
}

// String is "2.3" for one release and "2.3-2.4" for a range.
func (r VersionRange) String() string {
	if r.Min == r.Max {
		return r.Min.String()
	}
	return r.Min.String() + "-" + r.Max.String()
}

// GuessVersion returns the oldest release GuessVersionRange allows: the
// rules a replay applies when the user names none.
func GuessVersion(s *snapshot.Snapshot) allocator.Version {
	return GuessVersionRange(s).Min
}

// GuessVersionRange returns the narrowest range of PyTorch releases whose
// _dump_snapshot writes the keys this file has and lacks (docs/versions.md,
// "Snapshot keys"). A key's presence sets the oldest release; its absence
// where PyTorch would have written it sets the newest:
//
//   - blocks with "address" (and the 2.1 segment keys): 2.1+; blocks
//     without it, or with 2.0's "history": 2.0;
//   - trace entries with time_us: 2.2+; entries without it: up to 2.1;
//   - allocator_settings: 2.3+; none: up to 2.2;
//   - external_annotations: 2.5+; none: up to 2.4;
//   - compile_context on entries: 2.8+; entries without it: up to 2.7;
//   - the graph_capture_record_stream_reuse setting: 2.9+; settings
//     without it: up to 2.8;
//   - user_metadata on entries: 2.10; entries without it: up to 2.9.
//
// A file with no trace entries, or no blocks, says nothing about the
// entry or block keys, so its range is wider. Keys that contradict each
// other (a fork, a hand-edited file) give the release of the newest key
// present. The simulator's default decisions are the same across each
// range; what differs is listed in docs/versions.md.
func GuessVersionRange(s *snapshot.Snapshot) VersionRange {
	entries := false
	for _, tr := range s.Traces {
		if tr.Len() > 0 {
			entries = true
			break
		}
	}
	return GuessVersionRangeEntries(s, entries)
}

// GuessVersionRangeEntries is GuessVersionRange for a snapshot whose
// entries were handed on as it decoded, not kept (snapshot.Stream):
// entries says whether the file had any.
func GuessVersionRangeEntries(s *snapshot.Snapshot, entries bool) VersionRange {
	f := s.Features
	r := VersionRange{Min: allocator.V2_0, Max: allocator.Latest}
	atLeast := func(v allocator.Version) {
		if v > r.Min {
			r.Min = v
		}
	}
	atMost := func(v allocator.Version) {
		if v < r.Max {
			r.Max = v
		}
	}
	blocks := false
	for i := range s.Segments {
		if len(s.Segments[i].Blocks) > 0 {
			blocks = true
			break
		}
	}
	switch {
	case f.BlockAddresses:
		atLeast(allocator.V2_1)
	case f.BlockHistory || blocks:
		atMost(allocator.V2_0)
	}
	if f.TimeUS {
		atLeast(allocator.V2_2)
	} else if entries {
		atMost(allocator.V2_1)
	}
	if f.AllocatorSetting {
		atLeast(allocator.V2_3)
		if hasSetting(s, "graph_capture_record_stream_reuse") {
			atLeast(allocator.V2_9)
		} else {
			atMost(allocator.V2_8)
		}
	} else {
		atMost(allocator.V2_2)
	}
	if f.Annotations {
		atLeast(allocator.V2_5)
	} else {
		atMost(allocator.V2_4)
	}
	if f.CompileContext {
		atLeast(allocator.V2_8)
	} else if entries {
		atMost(allocator.V2_7)
	}
	if f.UserMetadata {
		atLeast(allocator.V2_10)
	} else if entries {
		atMost(allocator.V2_9)
	}
	if r.Max < r.Min {
		r.Max = r.Min
	}
	return r
}

func hasSetting(s *snapshot.Snapshot, key string) bool {
	if s.Settings == nil {
		return false
	}
	for _, kv := range s.Settings.Other {
		if kv.Key == key {
			return true
		}
	}
	return false
}

// ConfigFromSettings rebuilds the configuration a snapshot was recorded
// under from its allocator_settings (nil: the defaults of v). The settings
// string is parsed with v's grammar for the options the dict does not
// carry (max_non_split_rounding_mb, ...); the dict's own values win. What
// cannot be used is reported in the returned notes, and the defaults are
// kept for it.
func ConfigFromSettings(st *snapshot.AllocatorSettings, v allocator.Version) (allocator.Config, []string) {
	cfg := allocator.DefaultConfig(v)
	if st == nil {
		return cfg, nil
	}
	var notes []string
	if st.AllocConf != "" {
		if c, err := allocator.ParseConfig(st.AllocConf, v); err == nil {
			cfg = c
		} else {
			notes = append(notes, fmt.Sprintf("recorded PYTORCH_CUDA_ALLOC_CONF %q does not parse under PyTorch %s (%v); using the settings dict", st.AllocConf, v, err))
		}
	}
	fromDict := cfg
	fromDict.MaxSplitSize = allocator.NoMaxSplit
	if st.MaxSplitSize > 0 {
		fromDict.MaxSplitSize = uint64(st.MaxSplitSize)
	}
	fromDict.GarbageCollectionThreshold = st.GarbageCollectionThreshold
	fromDict.ExpandableSegments = st.ExpandableSegments && v.HasExpandableSegments()
	fromDict.RoundupPower2Divisions = st.RoundupPower2Divisions
	fromDict.ReleaseLockOnCudaMalloc = st.ReleaseLockOnCudaMalloc
	fromDict.Source = st.AllocConf
	if err := fromDict.Validate(); err != nil {
		notes = append(notes, fmt.Sprintf("recorded allocator_settings cannot be simulated (%v); using the defaults for them", err))
		return cfg, notes
	}
	return fromDict, notes
}
