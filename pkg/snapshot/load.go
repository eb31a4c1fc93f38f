package snapshot

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/memstat/memstat/pkg/pickle"
)

// InputError is a file memstat cannot read as a snapshot. Its message is
// one line that names the file and what is wrong.
type InputError struct {
	File string
	Err  error
}

func (e *InputError) Error() string { return e.File + ": " + e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// ErrNotSnapshot is wrapped by errors for files that decode but are not a
// memory snapshot.
var ErrNotSnapshot = errors.New("not a memory snapshot")

// MaxDevices bounds the devices a snapshot may describe: every command
// replays or scans each device, so a few bytes per device (an empty trace
// list, a segment's device index) must not buy unbounded work. PyTorch
// knows at most C10_COMPILE_TIME_MAX_GPUS devices (c10/cuda/CUDAMacros.h:
// 16 for years, 120 in recent releases); no real snapshot comes near 1024.
const MaxDevices = 1024

// Caps on what one snapshot may list, each far past what a real allocator
// holds or records (c10/cuda/CUDACachingAllocator.cpp, any release 1.13 to
// 2.10), so that a file naming more is refused with the limit named
// rather than read:
//   - MaxSegments: a segment is at least 2 MiB (kSmallBuffer; large ones
//     round to kRoundLarge, 2 MiB): 2^20 of them are 2 TiB, more than
//     eight of the largest GPUs (192 GB) hold together.
//   - MaxBlocks: a block is at least 512 bytes (kMinBlockSize) and is a
//     live tensor or a cached split: 2^28 of them would be 128 GiB of
//     512-byte blocks, each a tensor the recording process holds.
//   - MaxTraceEntries: the history ring buffer (alloc_trace) keeps
//     max_entries, unbounded by default, but each entry is a dict of some
//     500 bytes in the process that dumps it: 2^28 entries need over
//     100 GB of its memory, and the published traces keep 10^4 to 10^6.
//   - MaxFrames (distinct frames) and MaxStackDepth (frames of one
//     stack): CPython's recursion limit is 1000 by default, and a stack
//     adds a few hundred C++ frames at most.
const (
	MaxSegments     = 1 << 20
	MaxBlocks       = 1 << 28
	MaxTraceEntries = 1 << 28
	MaxFrames       = 1 << 24
	MaxStackDepth   = 1 << 16
)

// caps holds the caps the builder applies: the constants, lowered by tests
// that check the errors without decoding millions of records.
var caps = struct{ segments, blocks, entries, frames, depth int }{
	MaxSegments, MaxBlocks, MaxTraceEntries, MaxFrames, MaxStackDepth}

// A gzip stream may expand to at most maxGzipRatio times the compressed
// bytes read so far, plus gzipFloor, so that a compression bomb cannot make
// the decoder (which may hold some 100 bytes per input byte) exhaust
// memory. Real snapshots compress 5 to 40 times; the floor covers small
// files and the start of a stream.
const (
	maxGzipRatio = 200
	gzipFloor    = 4 << 20
)

// Decoding a snapshot holds at most MemoryPerDecodedByte bytes per byte
// of pickle or JSON decoded and MemoryPerFileByte per byte read from the
// file (the compressed bytes, for a gzip), plus MemoryFloor. The decoder
// and the model count what they hold as they go (pickle.Decoder.SetBudget)
// and stop when it is past either bound, so that a compression bomb (200
// times expansion, up to some 100 bytes held per opcode) or a pickle of
// nested containers is refused after a few MiB, not gigabytes. Real
// snapshots hold 4 to 10 bytes per byte of pickle (snapshots
// gen_snapshot.py makes: 5), and their gzip up to 43 per compressed byte.
const (
	MemoryPerDecodedByte = 32
	MemoryPerFileByte    = 512
	MemoryFloor          = 8 << 20
)

// ErrMemoryBudget is wrapped by the error for an input refused by the
// memory budget.
var ErrMemoryBudget = errors.New("over the memory budget")

// observeMemory, when set (by tests), sees every check of the budget.
var observeMemory func(held, decoded, file int64)

// checkMemory is the decoding budget: held bytes after decoded bytes of
// pickle or JSON, read from file bytes of the file.
func checkMemory(held, decoded, file int64) error {
	if observeMemory != nil {
		observeMemory(held, decoded, file)
	}
	if held > MemoryFloor+MemoryPerDecodedByte*decoded {
		return fmt.Errorf("%w: decoding holds %s after %s of data, more than the limit of %d bytes per byte decoded + %s; refusing a possible nesting bomb",
			ErrMemoryBudget, byteSize(held), byteSize(decoded), MemoryPerDecodedByte, byteSize(MemoryFloor))
	}
	if held > MemoryFloor+MemoryPerFileByte*file {
		return fmt.Errorf("%w: decoding holds %s after reading %s of the file, more than the limit of %d bytes per byte read + %s; refusing a possible compression bomb",
			ErrMemoryBudget, byteSize(held), byteSize(file), MemoryPerFileByte, byteSize(MemoryFloor))
	}
	return nil
}

// byteSize prints n as a message does: bytes, KiB or MiB, rounded down.
func byteSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Load reads a snapshot file: a pickle (protocol 0-5), its gzip, or the JSON
// form the newest web viewer reads. "-" reads standard input.
func Load(path string) (*Snapshot, error) { return LoadWith(path, LoadOptions{}) }

// LoadOptions are what a caller of LoadWith may ask of the reading.
type LoadOptions struct {
	// TraceGrown, when set, is called on the reading goroutine each time
	// more of the file's trace entries are complete (about every MiB of
	// the compact trace, some 90,000 entries), with the entries read so
	// far in file order, every device's (TraceBuilder.Closed): a trace
	// another goroutine may read while the file is still being read, so
	// that a pass over the trace can run beside the decoding. A device's
	// trace that continues it says so (Trace.Extends); not every one does
	// (a second device's, one read from JSON in pieces). It must not
	// block.
	TraceGrown func(prefix *Trace)
}

// ReadWith is Read with options.
func ReadWith(r io.Reader, size int64, o LoadOptions) (*Snapshot, error) {
	return decode(r, size, nil, true, o.TraceGrown)
}

// LoadWith is Load with options.
func LoadWith(path string, o LoadOptions) (*Snapshot, error) {
	var r io.Reader
	var size int64 = -1
	if path == "-" {
		r = os.Stdin
	} else if path == "" {
		return nil, &InputError{File: `""`, Err: errors.New("an empty file name, not a snapshot file")}
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, &InputError{File: path, Err: errors.Unwrap(err)}
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil {
			if st.IsDir() {
				return nil, &InputError{File: path, Err: errors.New("is a directory, not a snapshot file")}
			}
			size = st.Size()
		}
		r = f
	}
	s, err := decode(r, size, nil, true, o.TraceGrown)
	if err != nil {
		return nil, &InputError{File: path, Err: err}
	}
	return s, nil
}

// Read decodes a snapshot from r; size is the input's length if known
// (-1 otherwise), used only to bound gzip expansion.
func Read(r io.Reader, size int64) (*Snapshot, error) { return readWith(r, size, nil) }

// readWith is Read, handing the trace entries to stream when it is set
// (Stream) instead of keeping them.
func readWith(r io.Reader, size int64, stream *entryStream) (*Snapshot, error) {
	return readFlat(r, size, stream, true)
}

// readFlat is readWith with the decoder's flat-dict path on or off (tests
// compare the two; see pickle.FlatDictCompactor).
func readFlat(r io.Reader, size int64, stream *entryStream, flat bool) (*Snapshot, error) {
	return decode(r, size, stream, flat, nil)
}

// decode is readFlat handing the trace as it grows to grown when set
// (LoadOptions.TraceGrown).
func decode(r io.Reader, size int64, stream *entryStream, flat bool, grown func(*Trace)) (*Snapshot, error) {
	bufSize := 1 << 20
	if size >= 0 && size < int64(bufSize) {
		bufSize = max(int(size), 16)
	}
	// A large input is read a few buffers ahead by a goroutine of its
	// own (readahead.go): the read system calls, some 5% of decoding a
	// 100 MB pickle, run on the second core.
	src := r
	if size >= readAheadMin {
		ahead := newReadAhead(r)
		defer ahead.Close()
		src, bufSize = ahead, readAheadSize
	}
	br := bufio.NewReaderSize(src, bufSize)
	// head is copied: Peek's slice changes as the buffer refills.
	head, err := br.Peek(4)
	head = bytes.Clone(head)
	if len(head) == 0 {
		if err != nil && err != io.EOF {
			return nil, err
		}
		return nil, errors.New("empty file, not a snapshot")
	}
	var features Features
	var in io.Reader = br
	var compressed *countingReader
	if len(head) >= 2 && head[0] == 0x1f && head[1] == 0x8b {
		compressed = &countingReader{r: br}
		zr, err := gzip.NewReader(compressed)
		if err != nil {
			return nil, fmt.Errorf("bad gzip data: %v", err)
		}
		in = &limitReader{r: zr, in: compressed}
		features.Gzip = true
		br = bufio.NewReaderSize(in, 1<<20)
		in = br
		head, err = br.Peek(4)
		head = bytes.Clone(head)
		if len(head) == 0 {
			if err != nil && err != io.EOF {
				return nil, fmt.Errorf("bad gzip data: %v", err)
			}
			return nil, errors.New("gzip file holds no data")
		}
	}
	if bytes.HasPrefix(head, []byte("PK\x03\x04")) {
		return nil, errors.New("is a zip archive (a torch.save checkpoint?), not a memory snapshot; write one with torch.cuda.memory._dump_snapshot()")
	}
	vs := pickle.NewValues()
	b := newBuilder(vs)
	b.stream = stream
	b.traceGrown = grown
	if stream == nil && size >= entrySinkMin {
		b.sink = startEntrySink(&b.trace, grown)
		defer b.traceDone() // a reading that fails ends it too
	}
	var top pickle.Value
	if isJSONStart(head) {
		features.JSON = true
		jr := &countingReader{r: br}
		fileRead := func() int64 { return jr.n }
		if compressed != nil {
			fileRead = func() int64 { return compressed.n }
		}
		top, err = readJSON(jr, vs, b, func(held int64) error { return checkMemory(held+b.footprint(), jr.n, fileRead()) })
		if err != nil {
			if stream != nil && stream.err != nil {
				return nil, stream.err
			}
			return nil, err
		}
	} else {
		if !features.Gzip && src != r {
			// The decoder reads the read-ahead buffers straight into its
			// own, not through br's (one copy of the file, not two).
			buffered, _ := br.Peek(br.Buffered())
			in = io.MultiReader(bytes.NewReader(buffered), src)
		}
		d := pickle.NewDecoder(in, vs, b)
		d.SetFlatDicts(flat)
		if stream != nil {
			stream.place = picklePlace(d, vs)
		}
		fileRead := d.Offset
		if compressed != nil {
			fileRead = func() int64 { return compressed.n }
		}
		d.SetBudget(func(held int64) error { return checkMemory(held+b.footprint(), d.Offset(), fileRead()) })
		top, err = d.Decode()
		if err != nil {
			if stream != nil && stream.err != nil {
				return nil, stream.err
			}
			return nil, explainPickleError(err, head)
		}
		features.PickleProtocol = d.Protocol()
	}
	if features.Gzip {
		if err := checkGzipTrailer(in); err != nil {
			return nil, err
		}
	}
	s, err := b.assemble(top)
	if err != nil {
		return nil, err
	}
	s.Features.JSON, s.Features.Gzip, s.Features.PickleProtocol = features.JSON, features.Gzip, features.PickleProtocol
	return s, nil
}

func isJSONStart(head []byte) bool {
	for _, c := range head {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return true
		}
		return false
	}
	return false
}

// explainPickleError adds what the file probably is to a decoding error.
func explainPickleError(err error, head []byte) error {
	if errors.Is(err, ErrMemoryBudget) {
		return err
	}
	var pe *pickle.Error
	if errors.As(err, &pe) && errors.Is(err, pickle.ErrRefused) && (pe.Op == "GLOBAL" || pe.Op == "STACK_GLOBAL") {
		return fmt.Errorf("%w (a torch.save file or another Python object, not a memory snapshot)", err)
	}
	if errors.As(err, &pe) && pe.Err != nil && !errors.Is(err, pickle.ErrTruncated) && !errors.Is(err, pickle.ErrRefused) {
		return err // the input could not be read (gzip, I/O): not a format question
	}
	if head[0] != 0x80 && looksLikeText(head) && !errors.Is(err, pickle.ErrTruncated) {
		return fmt.Errorf("not a snapshot: looks like a text file, not a pickle (%v)", err)
	}
	return err
}

func looksLikeText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, c := range b {
		if c < 0x20 && c != '\n' && c != '\r' && c != '\t' {
			return false
		}
	}
	return true
}

// checkGzipTrailer reads the gzip stream to its end after the snapshot
// (decoding stops at the pickle's STOP or the JSON's closing brace), so
// that gzip checks the CRC-32 and length of what it decompressed, as
// Python's gzip does: a corrupted CRC, a missing trailer and a flipped bit
// are errors, not figures. What follows the snapshot counts against the
// expansion limit like the rest.
func checkGzipTrailer(r io.Reader) error {
	_, err := io.Copy(io.Discard, r)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, gzip.ErrChecksum):
		return errors.New("bad gzip data: the CRC-32 or length in the gzip trailer does not match the data (a corrupted file)")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("bad gzip data: the gzip stream ends before its trailer (a truncated file)")
	}
	return fmt.Errorf("bad gzip data: %v", err)
}

// countingReader counts the compressed bytes gzip reads (it implements
// io.ByteReader, so that gzip reads no further ahead than it needs).
type countingReader struct {
	r *bufio.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

// limitReader refuses gzip output past gzipFloor + maxGzipRatio times the
// compressed bytes read so far; it checks before each read, so at most one
// read's worth (1 MiB) more comes out.
type limitReader struct {
	r   io.Reader
	in  *countingReader
	out int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.out > gzipFloor+maxGzipRatio*l.in.n {
		return 0, fmt.Errorf("gzip data expands more than %dx (%d bytes from the first %d); refusing a possible compression bomb", maxGzipRatio, l.out, l.in.n)
	}
	n, err := l.r.Read(p)
	l.out += int64(n)
	return n, err
}

// assemble turns the decoded top-level value into a Snapshot.
func (b *builder) assemble(top pickle.Value) (*Snapshot, error) {
	b.traceDone()
	vs := b.vs
	s := &Snapshot{Stacks: b.stacks}
	if b.unknownActions > 0 {
		s.Warnings = append(s.Warnings, fmt.Sprintf("%d trace entries have an action memstat does not know (the first: %s); they are listed as \"unknown\" and change no figure", b.unknownActions, quote(b.firstUnknown)))
	}
	var segList pickle.Value
	switch top.Kind {
	case pickle.KindList, pickle.KindTuple:
		// 1.13: a bare list of segments.
		s.Features.BareSegmentList = true
		segList = top
	case pickle.KindDict:
		v, ok := vs.Get(top, "segments")
		if !ok {
			return nil, fmt.Errorf("%w: the pickle is a dict with keys %s, expected \"segments\" and \"device_traces\"", ErrNotSnapshot, keyList(vs, top))
		}
		segList = v
		if tr, ok := vs.Get(top, "device_traces"); ok {
			if err := b.traces(s, tr); err != nil {
				return nil, err
			}
		}
		if st, ok := vs.Get(top, "allocator_settings"); ok && st.Kind == pickle.KindDict {
			s.Settings = settings(vs, st)
			s.Features.AllocatorSetting = true
		}
		if an, ok := vs.Get(top, "external_annotations"); ok {
			s.Annotations = annotations(vs, an)
			s.Features.Annotations = true
		}
		if m, ok := vs.Get(top, "memstat"); ok && m.Kind == pickle.KindDict {
			s.Recorder = recorder(vs, m)
		}
	case pickle.KindRecord:
		return nil, fmt.Errorf("%w: the pickle holds a single %s, not a snapshot dict", ErrNotSnapshot, recordName(top.Tag))
	default:
		return nil, fmt.Errorf("%w: the pickle holds a %s, expected a dict with \"segments\" and \"device_traces\"", ErrNotSnapshot, top.Kind)
	}
	if segList.Kind != pickle.KindList && segList.Kind != pickle.KindTuple {
		return nil, fmt.Errorf("%w: \"segments\" is a %s, not a list", ErrNotSnapshot, segList.Kind)
	}
	// Each segment record is taken once: a file that lists one segment dict
	// many times (memo references cost 2 bytes) would otherwise copy its
	// blocks once per reference, quadratic memory for linear input.
	taken := make([]bool, len(b.segments))
	if n := min(vs.Len(segList), len(b.segments)); n > 0 {
		s.Segments = make([]Segment, 0, n) // each segment is taken once
	}
	for i, it := range vs.Items(segList) {
		if it.Kind != pickle.KindRecord || it.Tag != tagSegment {
			return nil, fmt.Errorf("%w: segments[%d] is not a segment dict (with \"blocks\")", ErrNotSnapshot, i)
		}
		if taken[it.N] {
			return nil, fmt.Errorf("%w: segments[%d] repeats a segment dict listed before (PyTorch writes each segment once)", ErrNotSnapshot, i)
		}
		taken[it.N] = true
		s.Segments = append(s.Segments, b.finishSegment(&b.segments[it.N], &s.Warnings))
	}
	s.Strings = b.strs
	contexts := b.contexts // a copy: a pointer into b would keep the builder alive
	s.Contexts = &contexts
	s.Features = mergeFeatures(s.Features, b.features)
	b.blocks, b.segments, b.history, b.trace = blockStore{}, nil, nil, TraceBuilder{}
	return s, nil
}

func mergeFeatures(a, b Features) Features {
	a.BlockHistory = a.BlockHistory || b.BlockHistory
	a.BlockAddresses = a.BlockAddresses || b.BlockAddresses
	a.TimeUS = a.TimeUS || b.TimeUS
	a.CompileContext = a.CompileContext || b.CompileContext
	a.UserMetadata = a.UserMetadata || b.UserMetadata
	a.TracePoolID = a.TracePoolID || b.TracePoolID
	return a
}

func recordName(tag uint8) string {
	switch tag {
	case tagFrame:
		return "stack frame"
	case tagStack:
		return "stack"
	case tagEntry:
		return "trace entry"
	case tagBlock:
		return "block"
	case tagSegment:
		return "segment"
	}
	return "record"
}

func keyList(vs *pickle.Values, dict pickle.Value) string {
	items := vs.Items(dict)
	var keys []string
	for i := 0; i+1 < len(items) && len(keys) < 8; i += 2 {
		keys = append(keys, quote(vs.Text(items[i])))
	}
	if len(keys) == 0 {
		return "(none)"
	}
	return "[" + strings.Join(keys, ", ") + "]"
}

// finishSegment copies a segment's blocks out of the builder, fills what
// older files leave out, and notes inconsistencies as warnings.
func (b *builder) finishSegment(p *pendingSegment, warnings *[]string) Segment {
	s := p.seg
	if p.run {
		// The blocks decoded one after another and each is taken once:
		// the segment's blocks are a slice of them, filled in place.
		s.Blocks = b.blocks.run(p.first, p.n)
	} else {
		s.Blocks = make([]Block, len(p.blocks))
	}
	addr := s.Address
	var total, allocated, active, requested int64
	for i := range s.Blocks {
		var bl Block
		if p.run {
			bl = s.Blocks[i]
		} else {
			bl = *b.blocks.at(p.blocks[i])
		}
		if bl.Address == addrUnknown {
			bl.Address = addr
		}
		addr = bl.Address + uint64(bl.Size)
		total += bl.Size
		switch bl.State {
		case ActiveAllocated:
			allocated += bl.Size
			active += bl.Size
			requested += bl.RequestedSize
		case ActivePendingFree:
			active += bl.Size
			requested += bl.RequestedSize
		}
		s.Blocks[i] = bl
	}
	if s.TotalSize == 0 {
		s.TotalSize = total
	}
	if !p.hasAllocated {
		s.AllocatedSize = allocated
	}
	if !p.hasActive {
		s.ActiveSize = active
	}
	if !p.hasRequested {
		s.RequestedSize = requested
	}
	if total != s.TotalSize {
		*warnings = append(*warnings, fmt.Sprintf("segment 0x%x (device %d): block sizes add up to %d, not total_size %d", s.Address, s.Device, total, s.TotalSize))
	}
	next := s.Address
	for _, bl := range s.Blocks {
		if bl.Address != next {
			*warnings = append(*warnings, fmt.Sprintf("segment 0x%x (device %d): block at 0x%x does not follow the previous block (expected 0x%x)", s.Address, s.Device, bl.Address, next))
			break
		}
		next = bl.Address + uint64(bl.Size)
	}
	return s
}

// traces reads device_traces: a list with one list of entries per device.
func (b *builder) traces(s *Snapshot, v pickle.Value) error {
	if b.stream != nil {
		return b.streamTraces(s, v)
	}
	vs := b.vs
	if v.Kind != pickle.KindList && v.Kind != pickle.KindTuple {
		return fmt.Errorf("%w: \"device_traces\" is a %s, not a list", ErrNotSnapshot, v.Kind)
	}
	if n := vs.Len(v); n > MaxDevices {
		return fmt.Errorf("\"device_traces\" lists %d devices, more than the limit of %d", n, MaxDevices)
	}
	// A device's list is taken once: listing one trace as many devices'
	// (2-byte memo references) would copy it once per reference. So is
	// each entry: PyTorch writes one dict per entry, and one dict listed
	// a million times (2 bytes a reference) would replay a million times.
	taken := map[uint64]int{}
	b.traceDone()
	all := b.trace.Build()
	entryTaken := make([]bool, all.Len())
	takeEntry := func(d, i int, n uint64) error {
		if entryTaken[n] {
			return fmt.Errorf("%w: device_traces[%d][%d] repeats a trace entry dict listed before (PyTorch writes each entry once)", ErrNotSnapshot, d, i)
		}
		entryTaken[n] = true
		return nil
	}
	// decoded holds all the entries decoded, for a device whose list is
	// not a run of entries in file order (no PyTorch file): made once,
	// when first needed.
	var decoded []TraceEntry
	for d, dev := range vs.Items(v) {
		if dev.Kind != pickle.KindList && dev.Kind != pickle.KindTuple {
			return fmt.Errorf("%w: device_traces[%d] is a %s, not a list", ErrNotSnapshot, d, dev.Kind)
		}
		if first, ok := taken[dev.N]; ok && vs.Len(dev) > 0 {
			return fmt.Errorf("%w: device_traces[%d] is the same list as device_traces[%d] (PyTorch writes one list per device)", ErrNotSnapshot, d, first)
		}
		taken[dev.N] = d
		if tag, first, n, ok := vs.RecordRun(dev); ok && tag == tagEntry {
			for i := range n {
				if err := takeEntry(d, i, first+uint64(i)); err != nil {
					return err
				}
			}
			// The entries of a device's trace decode one after another:
			// the trace is a view of them, not a copy (a copy doubled
			// the peak memory of reading a large trace).
			s.Traces = append(s.Traces, all.view(int(first), n))
			continue
		}
		items := vs.Items(dev)
		var tb TraceBuilder
		for i, it := range items {
			if it.Kind != pickle.KindRecord || it.Tag != tagEntry {
				return fmt.Errorf("%w: device_traces[%d][%d] is not a trace entry dict (with \"action\")", ErrNotSnapshot, d, i)
			}
			if err := takeEntry(d, i, it.N); err != nil {
				return err
			}
			if decoded == nil {
				decoded = all.Entries()
			}
			tb.Append(decoded[it.N])
		}
		s.Traces = append(s.Traces, tb.Build())
	}
	return nil
}

// recorder reads the "memstat" key of a file memstat record wrote. Its
// texts are cut to a line's length: they come from the file, which may be
// anyone's.
func recorder(vs *pickle.Values, d pickle.Value) *Recorder {
	r := &Recorder{}
	text := func(k string) string {
		v, ok := vs.Get(d, k)
		if !ok || v.Kind != pickle.KindString {
			return ""
		}
		t := vs.Text(v)
		if len(t) > 500 {
			t = t[:500]
		}
		return t
	}
	r.Tool, r.Workload, r.TimeModel = text("tool"), text("workload"), text("time_model")
	return r
}

func settings(vs *pickle.Values, d pickle.Value) *AllocatorSettings {
	st := &AllocatorSettings{MaxSplitSize: -1}
	items := vs.Items(d)
	// A key is read once (the first time, as pickle.Values.Get does): a
	// repeated key with a large value would otherwise cost the value's
	// size once per 4-byte repetition.
	seen := map[pickle.Value]bool{}
	for i := 0; i+1 < len(items); i += 2 {
		if seen[items[i]] {
			continue
		}
		seen[items[i]] = true
		key := vs.Text(items[i])
		val := items[i+1]
		switch key {
		case "PYTORCH_CUDA_ALLOC_CONF":
			st.AllocConf = vs.Text(val)
		case "max_split_size":
			if x, ok := val.AsInt(); ok {
				st.MaxSplitSize = x
			} else if u, ok := vs.Uint64(val); ok {
				// SIZE_MAX written unsigned means unlimited too.
				if u > 1<<62 {
					st.MaxSplitSize = -1
				}
			}
		case "garbage_collection_threshold":
			st.GarbageCollectionThreshold, _ = val.AsFloat()
		case "expandable_segments":
			st.ExpandableSegments, _ = val.AsBool()
		case "release_lock_on_cudamalloc":
			st.ReleaseLockOnCudaMalloc, _ = val.AsBool()
		case "roundup_power2_divisions":
			rd := vs.Items(val)
			for j := 0; j+1 < len(rd); j += 2 {
				var mib int64
				// Keys are small numbers; a long one is not parsed (its
				// text may be shared by every key, megabytes each).
				if t := vs.Text(rd[j]); len(t) > 20 {
					continue
				} else if _, err := fmt.Sscan(t, &mib); err != nil || mib <= 0 {
					continue
				}
				idx := 0
				for m := mib; m > 1; m >>= 1 {
					idx++
				}
				if idx < 16 {
					st.RoundupPower2Divisions[idx], _ = rd[j+1].AsInt()
				}
			}
		default:
			st.Other = append(st.Other, KeyValue{Key: key, Value: display(vs, val)})
		}
	}
	return st
}

// display renders a small value as Python would print it.
func display(vs *pickle.Values, v pickle.Value) string {
	switch v.Kind {
	case pickle.KindNone:
		return "None"
	case pickle.KindBool:
		if v.N != 0 {
			return "True"
		}
		return "False"
	case pickle.KindInt:
		return fmt.Sprint(int64(v.N))
	case pickle.KindBigInt:
		b := vs.BigInt(v)
		if b.BitLen() > 256 {
			return fmt.Sprintf("<%d-bit int>", b.BitLen()) // up to 8192 bits
		}
		return b.String()
	case pickle.KindFloat:
		f, _ := v.AsFloat()
		return fmt.Sprint(f)
	case pickle.KindString:
		return vs.Text(v)
	}
	return "<" + v.Kind.String() + ">"
}

func annotations(vs *pickle.Values, v pickle.Value) []Annotation {
	var out []Annotation
	// One dict listed many times is read once: reading it scans all its
	// items, and a reference costs 1 byte.
	done := map[uint64]Annotation{}
	for _, it := range vs.Items(v) {
		if it.Kind != pickle.KindDict {
			continue
		}
		if a, ok := done[it.N]; ok {
			out = append(out, a)
			continue
		}
		var a Annotation
		if x, ok := vs.Get(it, "device"); ok {
			d, _ := x.AsInt()
			a.Device = int(d)
		}
		if x, ok := vs.Get(it, "time_us"); ok {
			a.TimeUS, _ = x.AsInt()
		}
		if x, ok := vs.Get(it, "name"); ok {
			a.Name = vs.Text(x)
		}
		if x, ok := vs.Get(it, "stage"); ok {
			a.Stage = vs.Text(x)
		}
		done[it.N] = a
		out = append(out, a)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].TimeUS < out[j].TimeUS })
	return out
}

// quote returns file text for an error message: quoted and cut to its first
// bytes, so that a message stays one short line however long the text is.
func quote(s string) string {
	const keep = 32
	if len(s) <= keep {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(s[:keep]), len(s))
}
