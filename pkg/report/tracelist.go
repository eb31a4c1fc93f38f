package report

import (
	"fmt"
	"strconv"

	"github.com/memstat/memstat/pkg/analysis"
)

// Where locates a trace event's block in its segment: "seg
// 0x7f3a00000000+0x200000", or the device's free memory for an oom.
func Where(ev analysis.TraceEvent) string {
	switch {
	case ev.Action == "oom":
		return "device free " + Size(ev.DeviceFree)
	case ev.Action == "snapshot":
		return "active " + Size(ev.Size)
	case !ev.Located:
		if ev.Addr == 0 {
			return ""
		}
		return "0x" + strconv.FormatUint(ev.Addr, 16)
	}
	return fmt.Sprintf("seg 0x%x+0x%x", ev.Segment, ev.Offset)
}

// TraceTable lists trace events: index, time since the first entry,
// action, allocation name, size, stream, where the block lives, the
// allocated memory after the event and the allocation site.
func TraceTable(events []analysis.TraceEvent, withTime bool) *Table {
	t := &Table{}
	t.Columns = append(t.Columns, Column{Name: "#", Key: "index", Align: Right})
	if withTime {
		t.Columns = append(t.Columns, Column{Name: "Time", Key: "seconds", Align: Right})
	}
	t.Columns = append(t.Columns,
		Column{Name: "Action", Key: "action"},
		Column{Name: "Name", Key: "name"},
		Column{Name: "Size", Key: "size", Align: Right},
		Column{Name: "Stream", Key: "stream"},
		Column{Name: "Where", Key: "where"},
		Column{Name: "Allocated after", Key: "allocated", Align: Right},
		Column{Name: "Frame", Key: "frame"},
	)
	for _, ev := range events {
		cells := []Cell{Int(int64(ev.Index))}
		if withTime {
			cells = append(cells, Cell{Raw: ev.Seconds, Text: Seconds(ev.Seconds)})
		}
		name := ev.Name
		if name == "" && (ev.Action == "free_requested" || ev.Action == "free_completed" || ev.Action == "free") {
			name = "-"
		}
		frame := analysis.FrameString(ev.Site)
		if ev.Site == analysis.NoStackFrame {
			frame = ""
		} else if ev.SiteOfAlloc {
			frame = "(allocated at) " + frame
		}
		cells = append(cells, Str(ev.Action), Str(name), Bytes(ev.Size), Stream(ev.Stream), Str(Where(ev)),
			Bytes(ev.Allocated), Str(frame))
		t.Add(cells...)
	}
	return t
}
