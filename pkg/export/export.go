// Package export writes a snapshot as flat tables for data tools (pandas,
// DuckDB, spreadsheets): its trace events, the blocks of its final state,
// or its segments, as CSV, a JSON array or JSON Lines. Rows are written as
// they are produced, so a trace of millions of events never becomes one
// big string.
package export

import (
	"errors"
	"fmt"
	"io"

	"github.com/memstat/memstat/internal/rowpipe"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/snapshot"
)

// Table names what to export.
type Table string

// Tables.
const (
	Events   Table = "events"
	Blocks   Table = "blocks"
	Segments Table = "segments"
	// Stacks resolves the other tables' stack_id: one row per frame of
	// each stack.
	Stacks Table = "stacks"
)

// ParseTable reads a table name.
func ParseTable(s string) (Table, error) {
	switch t := Table(s); t {
	case Events, Blocks, Segments, Stacks:
		return t, nil
	}
	return "", fmt.Errorf("%q is not a table: choose events, blocks, segments or stacks", s)
}

// Columns of each table, in order.
var (
	EventColumns = []string{"device", "index", "time_us", "action", "addr", "size", "stream",
		"segment", "offset", "device_free", "stack_id", "top_function", "top_file", "top_line"}
	BlockColumns = []string{"device", "segment", "address", "offset", "size", "requested_size", "state",
		"stream", "pool", "expandable", "stack_id", "top_function", "top_file", "top_line"}
	SegmentColumns = []string{"device", "address", "total_size", "allocated_size", "active_size",
		"requested_size", "stream", "pool", "pool_id", "expandable", "blocks", "stack_id",
		"top_function", "top_file", "top_line"}
	// StackColumns: depth 0 is the innermost frame; kind is user, library
	// or internal (analysis.ClassifyFrame); shown says whether peak, oom,
	// diff and pprof show the frame without --all-frames.
	StackColumns = []string{"stack_id", "depth", "function", "file", "line", "kind", "shown"}
)

// Options select the rows.
type Options struct {
	Table  Table
	Format Format
	// Device limits the rows to one device; -1 exports every device.
	Device int
	// StartScan is the start rebuild's pass made while the snapshot was
	// read (replay.Options.StartScan): the events' replay of the device
	// whose trace it scanned takes it.
	StartScan *replay.StartScan
}

// Write writes one table and returns its number of rows.
func Write(w io.Writer, s *snapshot.Snapshot, o Options) (int, error) {
	switch o.Table {
	case Events:
		return writeEvents(w, s, o)
	case Blocks:
		return writeBlocks(w, s, o)
	case Segments:
		return writeSegments(w, s, o)
	case Stacks:
		return writeStacks(w, s, o)
	}
	return 0, fmt.Errorf("export: unknown table %q", o.Table)
}

// topFrame describes a stack by its id and the frame that names the
// allocation site (analysis.Frames.Site: the innermost frame of the
// program's own code, when there is one).
type topFrame struct {
	fr    *analysis.Frames
	cache map[snapshot.StackID][4]Value
}

func (t *topFrame) cells(id snapshot.StackID) [4]Value {
	if c, ok := t.cache[id]; ok {
		return c
	}
	c := [4]Value{Null, Null, Null, Null}
	if id != snapshot.NoStack {
		c[0] = I(int64(id))
		if f := t.fr.Site(id); f != analysis.NoStackFrame {
			c[1], c[2], c[3] = S(f.Name), S(f.Filename), I(f.Line)
		}
	}
	t.cache[id] = c
	return c
}

func newTopFrame(s *snapshot.Snapshot) *topFrame {
	return &topFrame{fr: analysis.NewFrames(s.Stacks, false), cache: map[snapshot.StackID][4]Value{}}
}

func wantDevice(o Options, d int) bool { return o.Device < 0 || o.Device == d }

// writeEvents replays each device's trace (follow mode) to place every
// event in its segment: the segment (cudaMalloc'd range, or expandable
// segment's reservation) holding the address right after the event. The
// replay and the writing of the rows run on two goroutines (rowpipe):
// the replay hands each event's figures over, the writer formats them.
func writeEvents(w io.Writer, s *snapshot.Snapshot, o Options) (int, error) {
	rw := newRowWriter(w, o.Format, EventColumns)
	top := newTopFrame(s)
	for d := range s.Devices() {
		if !wantDevice(o, d) || s.Trace(d).Len() == 0 {
			continue
		}
		err := rowpipe.Run(func(add func(*eventRow) error) error {
			var row eventRow
			var stopped error
			r, err := replay.New(s, replay.Options{Device: d, StartScan: o.StartScan, OnEvent: func(i int, e snapshot.TraceEntry, a *allocator.Allocator) {
				if stopped != nil {
					return
				}
				row = eventRow{index: i, timeUS: e.TimeUS, action: e.Action, addr: e.Addr, size: e.Size,
					stream: s.Stream(&e), stack: e.Stack}
				switch e.Action {
				case snapshot.ActionOOM:
					row.free = e.DeviceFree()
				case snapshot.ActionSnapshot, snapshot.ActionUserDefined, snapshot.ActionAnnotate, snapshot.ActionUnknown:
				default:
					if seg, _, ok := a.Locate(e.Addr); ok {
						row.seg, row.off, row.located = seg, int64(e.Addr-seg), true
					} else if e.Action == snapshot.ActionSegmentFree || e.Action == snapshot.ActionSegmentUnmap {
						// Released by the event itself.
						row.seg, row.off, row.located = e.Addr, 0, true
					}
				}
				stopped = add(&row)
			}})
			if err != nil {
				return fmt.Errorf("device %d: %w", d, err)
			}
			for stopped == nil {
				if err := r.Step(); err != nil {
					if errors.Is(err, io.EOF) {
						break
					}
					return fmt.Errorf("device %d: %w", d, err)
				}
			}
			return stopped
		}, func(row *eventRow) error {
			seg, off, addr, free := Null, Null, U(row.addr), Null
			if row.action == snapshot.ActionOOM {
				addr, free = Null, I(row.free)
			}
			if row.located {
				seg, off = U(row.seg), I(row.off)
			}
			tf := top.cells(row.stack)
			t := Null
			if row.timeUS != 0 {
				t = I(row.timeUS)
			}
			rw.row(I(int64(d)), I(int64(row.index)), t, S(row.action.String()), addr, I(row.size), I(row.stream),
				seg, off, free, tf[0], tf[1], tf[2], tf[3])
			return rw.err
		}, nil)
		if err != nil {
			return rw.rows, err
		}
	}
	return rw.rows, rw.close()
}

// eventRow is what the replay hands the writer for an event row.
type eventRow struct {
	index                     int
	timeUS, size, stream, off int64
	free                      int64
	addr, seg                 uint64
	stack                     snapshot.StackID
	action                    snapshot.Action
	located                   bool
}

func writeBlocks(w io.Writer, s *snapshot.Snapshot, o Options) (int, error) {
	rw := newRowWriter(w, o.Format, BlockColumns)
	top := newTopFrame(s)
	for i := range s.Segments {
		seg := &s.Segments[i]
		if !wantDevice(o, seg.Device) {
			continue
		}
		for _, b := range seg.Blocks {
			tf := top.cells(b.Stack)
			rw.row(I(int64(seg.Device)), U(seg.Address), U(b.Address), I(int64(b.Address-seg.Address)), I(b.Size),
				I(b.RequestedSize), S(b.State.String()), I(seg.Stream), S(seg.Pool.String()), B(seg.Expandable),
				tf[0], tf[1], tf[2], tf[3])
		}
		if rw.err != nil {
			return rw.rows, rw.err
		}
	}
	return rw.rows, rw.close()
}

func writeSegments(w io.Writer, s *snapshot.Snapshot, o Options) (int, error) {
	rw := newRowWriter(w, o.Format, SegmentColumns)
	top := newTopFrame(s)
	for i := range s.Segments {
		seg := &s.Segments[i]
		if !wantDevice(o, seg.Device) {
			continue
		}
		tf := top.cells(seg.Stack)
		rw.row(I(int64(seg.Device)), U(seg.Address), I(seg.TotalSize), I(seg.AllocatedSize), I(seg.ActiveSize),
			I(seg.RequestedSize), I(seg.Stream), S(seg.Pool.String()), S(fmt.Sprintf("%d,%d", seg.PoolID[0], seg.PoolID[1])),
			B(seg.Expandable), I(int64(len(seg.Blocks))), tf[0], tf[1], tf[2], tf[3])
		if rw.err != nil {
			return rw.rows, rw.err
		}
	}
	return rw.rows, rw.close()
}

// writeStacks lists every stack of the file (the ids the other tables'
// stack_id gives; the empty stack has none), frame by frame, innermost
// first. Stacks belong to the file, not to a device: Device is ignored.
func writeStacks(w io.Writer, s *snapshot.Snapshot, o Options) (int, error) {
	rw := newRowWriter(w, o.Format, StackColumns)
	fr := analysis.NewFrames(s.Stacks, false)
	for id := snapshot.StackID(1); int(id) < s.Stacks.NumStacks(); id++ {
		shown, _ := fr.Shown(id)
		isShown := make(map[snapshot.Frame]bool, len(shown))
		for _, f := range shown {
			isShown[f] = true
		}
		for depth, f := range s.Stacks.Frames(id) {
			rw.row(I(int64(id)), I(int64(depth)), S(f.Name), S(f.Filename), I(f.Line), S(analysis.ClassifyFrame(f).String()), B(isShown[f]))
		}
		if rw.err != nil {
			return rw.rows, rw.err
		}
	}
	return rw.rows, rw.close()
}
