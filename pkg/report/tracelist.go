package report

import (
	"strconv"

	"github.com/memstat/memstat/pkg/analysis"
)

// Where locates a trace event's block in its segment: "seg
// 0x7f3a00000000+0x200000", or the device's free memory for an oom.
func Where(ev analysis.TraceEvent) string {
	var b [64]byte
	return string(AppendWhere(b[:0], &ev))
}

// AppendWhere appends Where(*ev) to b: a trace listing formats one a line.
func AppendWhere(b []byte, ev *analysis.TraceEvent) []byte {
	switch {
	case ev.Action == "oom":
		return AppendSize(append(b, "device free "...), ev.DeviceFree)
	case ev.Action == "snapshot":
		return AppendSize(append(b, "active "...), ev.Size)
	case !ev.Located:
		if ev.Addr == 0 {
			return b
		}
		return strconv.AppendUint(append(b, "0x"...), ev.Addr, 16)
	}
	b = strconv.AppendUint(append(b, "seg 0x"...), ev.Segment, 16)
	// The offset as fmt's "0x%x" writes it ("0x-10" when negative, which
	// a located block never is).
	return strconv.AppendInt(append(b, "+0x"...), ev.Offset, 16)
}

// TraceColumns are the columns of a trace listing: index, time since the
// first entry (withTime), action, allocation name, size, stream, where the
// block lives, the allocated memory after the event and the allocation
// site.
func TraceColumns(withTime bool) []Column {
	cols := []Column{{Name: "#", Key: "index", Align: Right}}
	if withTime {
		cols = append(cols, Column{Name: "Time", Key: "seconds", Align: Right})
	}
	return append(cols,
		Column{Name: "Action", Key: "action"},
		Column{Name: "Name", Key: "name"},
		Column{Name: "Size", Key: "size", Align: Right},
		Column{Name: "Stream", Key: "stream"},
		Column{Name: "Where", Key: "where"},
		Column{Name: "Allocated after", Key: "allocated", Align: Right},
		Column{Name: "Frame", Key: "frame"},
	)
}

// TraceName is an event's allocation name, "-" for a free of a block
// allocated before the trace began.
func TraceName(ev *analysis.TraceEvent) string { return string(AppendTraceName(nil, ev)) }

// AppendTraceName appends TraceName(ev) to b.
func AppendTraceName(b []byte, ev *analysis.TraceEvent) []byte {
	if !ev.HasName() && (ev.Action == "free_requested" || ev.Action == "free_completed" || ev.Action == "free") {
		return append(b, '-')
	}
	return ev.AppendName(b)
}

// TraceFrame is an event's allocation site as the listing shows it.
func TraceFrame(ev *analysis.TraceEvent) string {
	switch {
	case ev.Site == analysis.NoStackFrame:
		return ""
	case ev.SiteOfAlloc:
		return "(allocated at) " + analysis.FrameString(ev.Site)
	}
	return analysis.FrameString(ev.Site)
}

// TraceTable lists trace events (see TraceColumns).
func TraceTable(events []analysis.TraceEvent, withTime bool) *Table {
	t := &Table{Columns: TraceColumns(withTime)}
	for i := range events {
		ev := &events[i]
		cells := []Cell{Int(int64(ev.Index))}
		if withTime {
			cells = append(cells, Cell{Raw: ev.Seconds, Text: Seconds(ev.Seconds)})
		}
		cells = append(cells, Str(ev.Action), Str(TraceName(ev)), Bytes(ev.Size), Stream(ev.Stream), Str(Where(*ev)),
			Bytes(ev.Allocated), Str(TraceFrame(ev)))
		t.Add(cells...)
	}
	return t
}
