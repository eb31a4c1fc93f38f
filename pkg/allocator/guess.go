package allocator

import (
	"fmt"

	"github.com/memstat/memstat/pkg/snapshot"
)

// GuessVersion returns the oldest PyTorch release whose snapshot schema
// matches the keys a file has (allocator model §13, snapshot format §1-§4):
// user_metadata on trace entries means 2.10, the
// graph_capture_record_stream_reuse setting 2.9, compile_context 2.8,
// external_annotations 2.5, allocator_settings 2.3, time_us 2.2, block
// addresses 2.1, anything older 2.0. The simulator's decisions under the
// default configuration are the same for all of them; what changes is the
// set of memory_stats keys (the num_device_* counters exist from 2.3).
func GuessVersion(s *snapshot.Snapshot) Version {
	f := s.Features
	switch {
	case f.UserMetadata:
		return V2_10
	case hasSetting(s, "graph_capture_record_stream_reuse"):
		return V2_9
	case f.CompileContext:
		return V2_8
	case f.Annotations:
		return V2_5
	case f.AllocatorSetting:
		return V2_3
	case f.TimeUS:
		return V2_2
	case f.BlockAddresses:
		return V2_1
	}
	return V2_0
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
func ConfigFromSettings(st *snapshot.AllocatorSettings, v Version) (Config, []string) {
	cfg := DefaultConfig(v)
	if st == nil {
		return cfg, nil
	}
	var notes []string
	if st.AllocConf != "" {
		if c, err := ParseConfig(st.AllocConf, v); err == nil {
			cfg = c
		} else {
			notes = append(notes, fmt.Sprintf("recorded PYTORCH_CUDA_ALLOC_CONF %q does not parse under PyTorch %s (%v); using the settings dict", st.AllocConf, v, err))
		}
	}
	fromDict := cfg
	fromDict.MaxSplitSize = NoMaxSplit
	if st.MaxSplitSize > 0 {
		fromDict.MaxSplitSize = uint64(st.MaxSplitSize)
	}
	fromDict.GarbageCollectionThreshold = st.GarbageCollectionThreshold
	fromDict.ExpandableSegments = st.ExpandableSegments && v.hasExpandableSegments()
	fromDict.RoundupPower2Divisions = st.RoundupPower2Divisions
	fromDict.ReleaseLockOnCudaMalloc = st.ReleaseLockOnCudaMalloc
	fromDict.Source = st.AllocConf
	if err := fromDict.Validate(); err != nil {
		notes = append(notes, fmt.Sprintf("recorded allocator_settings cannot be simulated (%v); using the defaults for them", err))
		return cfg, notes
	}
	return fromDict, notes
}
