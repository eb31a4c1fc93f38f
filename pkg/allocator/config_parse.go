package allocator

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"unicode"
)

// ConfigError is a rejected PYTORCH_CUDA_ALLOC_CONF string. Msg is PyTorch's
// own message for the version's parser wherever PyTorch has one; where
// PyTorch would fail with a bare C++ exception ("stoi") or read out of
// bounds, Msg says plainly what is wrong instead.
type ConfigError struct {
	Msg string
}

func (e *ConfigError) Error() string { return e.Msg }

func cfgErr(format string, a ...any) error { return &ConfigError{Msg: fmt.Sprintf(format, a...)} }

// ParseConfig parses a PYTORCH_CUDA_ALLOC_CONF string as the given PyTorch
// version does when the process starts. "" yields the defaults (and, like
// PyTorch, records "" as the source).
func ParseConfig(s string, v Version) (Config, error) {
	return DefaultConfig(v).parse(s, false)
}

// Reparse applies a settings string at runtime, as
// torch.cuda.memory._set_allocator_settings does: max_split_size_mb,
// roundup_power2_divisions and garbage_collection_threshold go back to
// their defaults first, every other option keeps its value unless the
// string sets it, and the backend cannot change.
func (c Config) Reparse(s string) (Config, error) {
	return c.parse(s, true)
}

// parse applies s on top of c. At runtime (a reparse) the backend chosen
// when the library loaded cannot change.
func (c Config) parse(s string, runtime bool) (Config, error) {
	loaded := c.Backend
	c.MaxSplitSize = NoMaxSplit
	c.RoundupPower2Divisions = [RoundupIntervals]int64{}
	c.GarbageCollectionThreshold = 0
	c.Source = s
	c.Warnings = nil
	var err error
	if c.Version.tokenizerParser() {
		err = c.parseTokenizer(s)
	} else {
		err = c.parseLegacy(s)
	}
	if err != nil {
		return Config{}, err
	}
	if runtime && c.Backend != loaded {
		return Config{}, cfgErr("Allocator backend parsed at runtime != allocator backend parsed at load time, %s != %s", c.Backend, loaded)
	}
	return c, nil
}

// keySince gives the first release whose parser knows a key; older parsers
// reject it as unrecognized. Dates for the pinned_* keys are approximate
// (allocator model §12.2).
func keySince(key string) (Version, bool) {
	switch key {
	case "max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold", "backend":
		return V2_0, true
	case "expandable_segments", "pinned_use_cuda_host_register", "pinned_use_hip_host_register",
		"pinned_num_register_threads":
		return V2_1, true
	case "release_lock_on_cudamalloc", "release_lock_on_hipmalloc":
		return V2_2, true
	case "pinned_use_background_threads":
		return V2_5, true
	case "max_non_split_rounding_mb":
		return V2_6, true
	case "pinned_reserve_segment_size_mb", "graph_capture_record_stream_reuse":
		return V2_8, true
	case "per_process_memory_fraction":
		return V2_10, true
	}
	return 0, false
}

func (c *Config) knows(key string) bool {
	since, ok := keySince(key)
	return ok && c.Version >= since
}

// ---------------------------------------------------------------------------
// The 2.0 ... 2.8 parser (CUDAAllocatorConfig::parseArgs and its 2.0 inline
// predecessor).

// lexLegacy splits at , : [ ] (each its own token) and drops spaces; other
// whitespace stays part of a token.
func lexLegacy(s string) []string {
	var toks []string
	var buf strings.Builder
	for _, r := range s {
		switch r {
		case ',', ':', '[', ']':
			if buf.Len() > 0 {
				toks = append(toks, buf.String())
				buf.Reset()
			}
			toks = append(toks, string(r))
		case ' ':
		default:
			buf.WriteRune(r)
		}
	}
	if buf.Len() > 0 {
		toks = append(toks, buf.String())
	}
	return toks
}

func (c *Config) parseLegacy(s string) error {
	toks := lexLegacy(s)
	consume := func(i int, want string) error {
		if i < len(toks) && toks[i] == want {
			return nil
		}
		return cfgErr("Error parsing CachingAllocator settings, expected %s", want)
	}
	// value returns the token after "key:".
	value := func(i int, key string) (int, string, error) {
		if err := consume(i+1, ":"); err != nil {
			return i, "", err
		}
		i += 2
		if i >= len(toks) {
			return i, "", cfgErr("Error, expecting %s value", key)
		}
		return i, toks[i], nil
	}
	boolean := func(i int, key string) (int, bool, error) {
		if err := consume(i+1, ":"); err != nil {
			return i, false, err
		}
		i += 2
		if i >= len(toks) || (toks[i] != "True" && toks[i] != "False") {
			return i, false, cfgErr("Expected a single True/False argument for %s", key)
		}
		return i, toks[i] == "True", nil
	}
	usedAsync, usedNative := false, false
	for i := 0; i < len(toks); i++ {
		key := toks[i]
		if !c.knows(key) {
			return cfgErr("Unrecognized CachingAllocator option: %s", key)
		}
		var err error
		switch key {
		case "max_split_size_mb", "max_non_split_rounding_mb":
			var tok string
			if i, tok, err = value(i, key); err != nil {
				return err
			}
			n, err := cStoi(tok, key)
			if err != nil {
				return err
			}
			// stoi's int lands in a size_t: a negative value wraps to a huge
			// one and passes the "> 20" check, then is clamped.
			mb := uint64(n)
			if mb <= LargeBuffer/MiB {
				return cfgErr("CachingAllocator option %s too small, must be > %d", key, LargeBuffer/MiB)
			}
			mb = min(mb, math.MaxUint64/MiB)
			if key == "max_split_size_mb" {
				c.MaxSplitSize = mb * MiB
			} else {
				c.MaxNonSplitRounding = mb * MiB
			}
			usedNative = true
		case "garbage_collection_threshold":
			var tok string
			if i, tok, err = value(i, key); err != nil {
				return err
			}
			f, err := cStod(tok, key)
			if err != nil {
				return err
			}
			if !(f > 0) {
				return cfgErr("garbage_collect_threshold too small, set it 0.0~1.0")
			}
			if !(f < 1) {
				return cfgErr("garbage_collect_threshold too big, set it 0.0~1.0")
			}
			c.GarbageCollectionThreshold = f
			usedNative = true
		case "roundup_power2_divisions":
			if i, err = c.parseLegacyDivisions(toks, i, consume); err != nil {
				return err
			}
			usedNative = true
		case "backend":
			if err := consume(i+1, ":"); err != nil {
				return err
			}
			i += 2
			if i >= len(toks) {
				return cfgErr("Error parsing backend value")
			}
			tok := toks[i]
			if tok != "native" && tok != "cudaMallocAsync" {
				return cfgErr("Unknown allocator backend, options are native and cudaMallocAsync")
			}
			c.Backend = tok
			usedAsync = tok == "cudaMallocAsync"
		case "expandable_segments":
			if i, c.ExpandableSegments, err = boolean(i, key); err != nil {
				return err
			}
			usedNative = true
		case "release_lock_on_cudamalloc", "release_lock_on_hipmalloc":
			if i, c.ReleaseLockOnCudaMalloc, err = boolean(i, "release_lock_on_cudamalloc"); err != nil {
				return err
			}
			usedNative = true
		case "pinned_use_cuda_host_register", "pinned_use_hip_host_register",
			"pinned_use_background_threads", "graph_capture_record_stream_reuse":
			name := key
			if key == "pinned_use_hip_host_register" {
				name = "pinned_use_cuda_host_register"
			}
			if err := consume(i+1, ":"); err != nil {
				return err
			}
			i += 2
			if i >= len(toks) {
				return cfgErr("Error, expecting %s value", name)
			}
			if toks[i] != "True" && toks[i] != "False" {
				return cfgErr("Expected a single True/False argument for %s", name)
			}
			on := toks[i] == "True"
			switch name {
			case "pinned_use_cuda_host_register":
				c.PinnedUseCudaHostRegister = on
			case "pinned_use_background_threads":
				c.PinnedUseBackgroundThreads = on
			default:
				c.GraphCaptureRecordStreamReuse = on
			}
			usedNative = true
		case "pinned_num_register_threads":
			var tok string
			if i, tok, err = value(i, key); err != nil {
				return err
			}
			n, err := cStoi(tok, key)
			if err != nil {
				return err
			}
			if !isPow2(uint64(n)) {
				return cfgErr("Number of register threads has to be power of 2 ")
			}
			if uint64(n) > 128 {
				return cfgErr("Number of register threads should be less than or equal to 128")
			}
			c.PinnedNumRegisterThreads = n
			usedNative = true
		case "pinned_reserve_segment_size_mb":
			var tok string
			if i, tok, err = value(i, key); err != nil {
				return err
			}
			n, err := cStoi(tok, key)
			if err != nil {
				return err
			}
			if uint64(n) == 0 {
				return cfgErr("Pinned reserve segment size has to be greater than 0 ")
			}
			c.PinnedReserveSegmentSizeMB = n
			usedNative = true
		}
		if i+1 < len(toks) {
			i++
			if err := consume(i, ","); err != nil {
				return err
			}
		}
	}
	if usedAsync && usedNative {
		c.Warnings = append(c.Warnings, "backend:cudaMallocAsync ignores max_split_size_mb,roundup_power2_divisions, and garbage_collect_threshold.")
	}
	return nil
}

func (c *Config) parseLegacyDivisions(toks []string, i int, consume func(int, string) error) (int, error) {
	// Before 2.4 the messages misspelled "divisions" and lists rejected 0.
	word := "divisions"
	if c.Version < V2_4 {
		word = "divisons"
	}
	if err := consume(i+1, ":"); err != nil {
		return i, err
	}
	i += 2
	if i >= len(toks) {
		return i, cfgErr("Error, expecting roundup_power2_divisions value")
	}
	t := &c.RoundupPower2Divisions
	if toks[i] != "[" {
		n, err := cStoi(toks[i], "roundup_power2_divisions")
		if err != nil {
			return i, err
		}
		if !isPow2(uint64(n)) {
			return i, cfgErr("For roundups, the %s has to be power of 2 ", word)
		}
		for j := range t {
			t[j] = n
		}
		return i, nil
	}
	first, last := true, 0
	for i++; i < len(toks) && toks[i] != "]"; i++ {
		boundary := toks[i]
		if err := consume(i+1, ":"); err != nil {
			return i, err
		}
		i += 2
		if i >= len(toks) {
			return i, cfgErr("Error parsing roundup_power2_divisions value")
		}
		n, err := cStoi(toks[i], "roundup_power2_divisions")
		if err != nil {
			return i, err
		}
		d := uint64(n)
		if c.Version < V2_4 {
			if !isPow2(d) {
				return i, cfgErr("For roundups, the %s has to be power of 2 ", word)
			}
		} else if d != 0 && !isPow2(d) {
			return i, cfgErr("For roundups, the divisions has to be power of 2 or 0 to disable roundup ")
		}
		if boundary == ">" {
			// These parsers fill from the last explicit index itself,
			// overwriting that entry.
			for j := last; j < RoundupIntervals; j++ {
				t[j] = n
			}
		} else {
			b, err := cStoul(boundary, "roundup_power2_divisions")
			if err != nil {
				return i, err
			}
			if !isPow2(b) {
				return i, cfgErr("For roundups, the intervals have to be power of 2 ")
			}
			idx := min(bits.Len64(b)-1, RoundupIntervals-1)
			if first {
				for j := 0; j < idx; j++ {
					t[j] = n
				}
				first = false
			}
			t[idx] = n
			last = idx
		}
		// PyTorch peeks at the next token unchecked; a list that ends
		// without "]" fails on the missing separator.
		if i+1 >= len(toks) || toks[i+1] != "]" {
			i++
			if err := consume(i, ","); err != nil {
				return i, err
			}
		}
	}
	return i, nil
}

// ---------------------------------------------------------------------------
// The 2.9+ parser: AcceleratorAllocatorConfig::parseArgs for the options
// shared by all accelerators, then CUDAAllocatorConfig::parseArgs for the
// CUDA ones, both over a ConfigTokenizer.

// acceleratorKey reports the options AcceleratorAllocatorConfig parses; the
// CUDA pass skips them.
func acceleratorKey(key string) bool {
	switch key {
	case "max_split_size_mb", "max_non_split_rounding_mb", "garbage_collection_threshold",
		"roundup_power2_divisions", "expandable_segments", "pinned_use_background_threads":
		return true
	}
	return false
}

// tokenizer is ConfigTokenizer: the legacy lexer, but dropping all
// whitespace.
type tokenizer []string

func newTokenizer(s string) tokenizer {
	var toks tokenizer
	var buf strings.Builder
	for _, r := range s {
		switch {
		case r == ',' || r == ':' || r == '[' || r == ']':
			if buf.Len() > 0 {
				toks = append(toks, buf.String())
				buf.Reset()
			}
			toks = append(toks, string(r))
		case unicode.IsSpace(r):
		default:
			buf.WriteRune(r)
		}
	}
	if buf.Len() > 0 {
		toks = append(toks, buf.String())
	}
	return toks
}

func (t tokenizer) at(i int) (string, error) {
	if i >= len(t) {
		return "", cfgErr("Index out of bounds in ConfigTokenizer")
	}
	return t[i], nil
}

// expect checks a delimiter. PyTorch's checkToken returns a bool that its
// callers ignore, so 2.9 silently accepts a missing ":" or ","; memstat
// reports it, since such a string almost certainly does not say what its
// author meant.
func (t tokenizer) expect(i int, want string) error {
	got, err := t.at(i)
	if err != nil {
		return err
	}
	if got != want {
		return cfgErr("Expected '%s' at index %d in ConfigTokenizer but got '%s'", want, i, got)
	}
	return nil
}

func (t tokenizer) toSizeT(i int, key string) (uint64, error) {
	tok, err := t.at(i)
	if err != nil {
		return 0, err
	}
	return cStoul(tok, key)
}

func (t tokenizer) toDouble(i int, key string) (float64, error) {
	tok, err := t.at(i)
	if err != nil {
		return 0, err
	}
	return cStod(tok, key)
}

func (t tokenizer) toBool(i int) (bool, error) {
	tok, err := t.at(i)
	if err != nil {
		return false, err
	}
	switch tok {
	case "True":
		return true, nil
	case "False":
		return false, nil
	}
	return false, cfgErr("Expected 'True' or 'False' at index %d in ConfigTokenizer but got '%s'", i, tok)
}

// skipKey steps over "key:value" or "key:[...]" and returns the index of
// the value's last token.
func (t tokenizer) skipKey(i int) (int, error) {
	if err := t.expect(i+1, ":"); err != nil {
		return i, err
	}
	i += 2
	tok, err := t.at(i)
	if err != nil {
		return i, err
	}
	if tok != "[" {
		return i, nil
	}
	for i++; i < len(t) && t[i] != "]"; i++ {
	}
	if i >= len(t) {
		return i, cfgErr("Expected closing bracket ']' in ConfigTokenizer but reached end of config")
	}
	return i, nil
}

func (c *Config) parseTokenizer(s string) error {
	t := newTokenizer(s)
	if err := c.parseAcceleratorKeys(t); err != nil {
		return err
	}
	return c.parseCUDAKeys(t)
}

func (c *Config) parseAcceleratorKeys(t tokenizer) error {
	for i := 0; i < len(t); i++ {
		key := t[i]
		var err error
		switch key {
		case "max_split_size_mb", "max_non_split_rounding_mb":
			if err := t.expect(i+1, ":"); err != nil {
				return err
			}
			i += 2
			mb, err := t.toSizeT(i, key)
			if err != nil {
				return err
			}
			if mb < LargeBuffer/MiB {
				return cfgErr("CachingAllocator option %s too small, must be >= %d", key, LargeBuffer/MiB)
			}
			mb = min(mb, math.MaxUint64/MiB)
			if key == "max_split_size_mb" {
				c.MaxSplitSize = mb * MiB
			} else {
				c.MaxNonSplitRounding = mb * MiB
			}
		case "garbage_collection_threshold":
			if err := t.expect(i+1, ":"); err != nil {
				return err
			}
			i += 2
			f, err := t.toDouble(i, key)
			if err != nil {
				return err
			}
			if !(f > 0 && f < 1) {
				return cfgErr("garbage_collect_threshold is invalid, set it in (0.0, 1.0)")
			}
			c.GarbageCollectionThreshold = f
		case "roundup_power2_divisions":
			if i, err = c.parseTokenizerDivisions(t, i); err != nil {
				return err
			}
		case "expandable_segments", "pinned_use_background_threads":
			if err := t.expect(i+1, ":"); err != nil {
				return err
			}
			i += 2
			on, err := t.toBool(i)
			if err != nil {
				return err
			}
			if key == "expandable_segments" {
				c.ExpandableSegments = on
			} else {
				c.PinnedUseBackgroundThreads = on
			}
		default:
			if i, err = t.skipKey(i); err != nil {
				return err
			}
		}
		if i+1 < len(t) {
			i++
			if err := t.expect(i, ","); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Config) parseTokenizerDivisions(t tokenizer, i int) (int, error) {
	if err := t.expect(i+1, ":"); err != nil {
		return i, err
	}
	i += 2
	tok, err := t.at(i)
	if err != nil {
		return i, err
	}
	tab := &c.RoundupPower2Divisions
	if tok != "[" {
		n, err := t.toSizeT(i, "roundup_power2_divisions")
		if err != nil {
			return i, err
		}
		if !isPow2(n) {
			return i, cfgErr("For roundups, the divisions has to be power of 2 ")
		}
		for j := range tab {
			tab[j] = int64(n)
		}
		return i, nil
	}
	first, last := true, 0
	for i++; i < len(t) && t[i] != "]"; i++ {
		boundaryAt := i
		if err := t.expect(i+1, ":"); err != nil {
			return i, err
		}
		i += 2
		d, err := t.toSizeT(i, "roundup_power2_divisions")
		if err != nil {
			return i, err
		}
		if d != 0 && !isPow2(d) {
			return i, cfgErr("For roundups, the divisions has to be power of 2 or 0 to disable roundup ")
		}
		if t[boundaryAt] == ">" {
			// This parser fills from the entry after the last explicit one.
			for j := last + 1; j < RoundupIntervals; j++ {
				tab[j] = int64(d)
			}
		} else {
			b, err := t.toSizeT(boundaryAt, "roundup_power2_divisions")
			if err != nil {
				return i, err
			}
			if !isPow2(b) {
				return i, cfgErr("For roundups, the intervals have to be power of 2 ")
			}
			idx := min(bits.Len64(b)-1, RoundupIntervals-1)
			if first {
				for j := 0; j < idx; j++ {
					tab[j] = int64(d)
				}
				first = false
			}
			tab[idx] = int64(d)
			last = idx
		}
		next, err := t.at(i + 1)
		if err != nil {
			return i, err
		}
		if next != "]" {
			i++
			if err := t.expect(i, ","); err != nil {
				return i, err
			}
		}
	}
	if i >= len(t) {
		return i, cfgErr("Expected closing bracket ']' in ConfigTokenizer but reached end of config")
	}
	return i, nil
}

func (c *Config) parseCUDAKeys(t tokenizer) error {
	usedAsync, usedNative := false, false
	for i := 0; i < len(t); i++ {
		key := t[i]
		var err error
		boolOpt := func(dst *bool) error {
			if err := t.expect(i+1, ":"); err != nil {
				return err
			}
			i += 2
			*dst, err = t.toBool(i)
			usedNative = true
			return err
		}
		switch {
		case key == "backend":
			if err := t.expect(i+1, ":"); err != nil {
				return err
			}
			i += 2
			tok, err := t.at(i)
			if err != nil {
				return err
			}
			if tok != "native" && tok != "cudaMallocAsync" {
				return cfgErr("Unknown allocator backend, options are native and cudaMallocAsync")
			}
			c.Backend = tok
			usedAsync = tok == "cudaMallocAsync"
		case key == "release_lock_on_cudamalloc" || key == "release_lock_on_hipmalloc":
			err = boolOpt(&c.ReleaseLockOnCudaMalloc)
		case key == "pinned_use_cuda_host_register" || key == "pinned_use_hip_host_register":
			err = boolOpt(&c.PinnedUseCudaHostRegister)
		case key == "graph_capture_record_stream_reuse":
			err = boolOpt(&c.GraphCaptureRecordStreamReuse)
		case key == "pinned_num_register_threads":
			if err := t.expect(i+1, ":"); err != nil {
				return err
			}
			i += 2
			n, err := t.toSizeT(i, key)
			if err != nil {
				return err
			}
			if !isPow2(n) {
				return cfgErr("Number of register threads has to be power of 2, got %d", n)
			}
			if n > 128 {
				return cfgErr("Number of register threads should be less than or equal to 128, got %d", n)
			}
			c.PinnedNumRegisterThreads = int64(n)
			usedNative = true
		case key == "pinned_reserve_segment_size_mb":
			if err := t.expect(i+1, ":"); err != nil {
				return err
			}
			i += 2
			n, err := t.toSizeT(i, key)
			if err != nil {
				return err
			}
			if n == 0 {
				return cfgErr("Pinned reserve segment size has to be greater than 0")
			}
			c.PinnedReserveSegmentSizeMB = int64(n)
			usedNative = true
		case key == "per_process_memory_fraction" && c.knows(key):
			if err := t.expect(i+1, ":"); err != nil {
				return err
			}
			i += 2
			f, err := t.toDouble(i, key)
			if err != nil {
				return err
			}
			if !(f >= 0 && f <= 1) {
				return cfgErr("per_process_memory_fraction is invalid, set it in [0.0, 1.0]")
			}
			c.PerProcessMemoryFraction = f
			usedNative = true
		case acceleratorKey(key):
			// Parsed by the accelerator pass. These do not count as
			// native-specific here, so 2.9+ does not warn about them
			// together with backend:cudaMallocAsync.
			i, err = t.skipKey(i)
		default:
			return cfgErr("Unrecognized key '%s' in CUDA allocator config.", key)
		}
		if err != nil {
			return err
		}
		if i+1 < len(t) {
			i++
			if err := t.expect(i, ","); err != nil {
				return err
			}
		}
	}
	if usedAsync && usedNative {
		c.Warnings = append(c.Warnings, "backend:cudaMallocAsync ignores max_split_size_mb,roundup_power2_divisions, and garbage_collect_threshold.")
	}
	return nil
}

// ---------------------------------------------------------------------------
// C library conversions. PyTorch parses values with std::stoi, std::stoul,
// std::stoull and std::stod, which accept a numeric prefix and ignore the
// rest ("128MB" is 128); these reproduce that, and turn the C++ exceptions
// into readable errors.

func isPow2(n uint64) bool { return n != 0 && n&(n-1) == 0 }

// cNumberPrefix splits leading whitespace, an optional sign and decimal
// digits off s (strtol's base-10 grammar).
func cNumberPrefix(s string) (neg bool, digits string) {
	s = strings.TrimLeftFunc(s, unicode.IsSpace)
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	end := 0
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	return neg, s[:end]
}

// cStoi is std::stoi: an int32, else invalid_argument / out_of_range.
func cStoi(s, key string) (int64, error) {
	neg, digits := cNumberPrefix(s)
	if digits == "" {
		return 0, cfgErr("invalid value %q for %s: not a number (std::invalid_argument from stoi)", s, key)
	}
	u, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || u > 1<<31 || (!neg && u > math.MaxInt32) {
		return 0, cfgErr("invalid value %q for %s: out of range (std::out_of_range from stoi)", s, key)
	}
	if neg {
		return -int64(u), nil
	}
	return int64(u), nil
}

// cStoul is std::stoul / std::stoull on LP64: an unsigned 64-bit value,
// where a leading minus negates modulo 2^64 as strtoul does.
func cStoul(s, key string) (uint64, error) {
	neg, digits := cNumberPrefix(s)
	if digits == "" {
		return 0, cfgErr("invalid value %q for %s: not a number (std::invalid_argument from stoull)", s, key)
	}
	u, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, cfgErr("invalid value %q for %s: out of range (std::out_of_range from stoull)", s, key)
	}
	if neg {
		u = -u
	}
	return u, nil
}

// cStod is std::stod: the longest prefix that reads as a decimal floating
// point number, "inf"/"infinity" or "nan".
func cStod(s, key string) (float64, error) {
	t := strings.TrimLeftFunc(s, unicode.IsSpace)
	i := 0
	if i < len(t) && (t[i] == '+' || t[i] == '-') {
		i++
	}
	lower := strings.ToLower(t[i:])
	for _, word := range []string{"infinity", "inf", "nan"} {
		if strings.HasPrefix(lower, word) {
			f, _ := strconv.ParseFloat(t[:i]+word, 64)
			return f, nil
		}
	}
	mant := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i, mant = i+1, mant+1
	}
	if i < len(t) && t[i] == '.' {
		i++
		for i < len(t) && t[i] >= '0' && t[i] <= '9' {
			i, mant = i+1, mant+1
		}
	}
	if mant == 0 {
		return 0, cfgErr("invalid value %q for %s: not a number (std::invalid_argument from stod)", s, key)
	}
	if i < len(t) && (t[i] == 'e' || t[i] == 'E') {
		j := i + 1
		if j < len(t) && (t[j] == '+' || t[j] == '-') {
			j++
		}
		if j < len(t) && t[j] >= '0' && t[j] <= '9' {
			for j < len(t) && t[j] >= '0' && t[j] <= '9' {
				j++
			}
			i = j
		}
	}
	f, err := strconv.ParseFloat(t[:i], 64)
	if err != nil {
		return 0, cfgErr("invalid value %q for %s: out of range (std::out_of_range from stod)", s, key)
	}
	return f, nil
}
