package trace

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/memstat/memstat/pkg/report"
)

// appendEvent appends an event record as encoding/json writes jsonEvent
// (same fields, order and escaping, newline included), without its
// reflection: encoding/json took a fifth of a JSON listing's time.
// TestEventJSON checks the two agree on every event of the published
// snapshots, so a field added to analysis.TraceEvent fails it until it is
// written here too.
func appendEvent(b []byte, je *jsonEvent) []byte {
	ev := &je.TraceEvent
	b = append(b, `{"record":`...)
	b = appendString(b, je.Record)
	b = append(b, `,"file":`...)
	if je.fileJSON != nil {
		b = append(b, je.fileJSON...)
	} else {
		b = appendString(b, je.File)
	}
	if je.Device != nil {
		b = append(b, `,"device":`...)
		b = strconv.AppendInt(b, int64(*je.Device), 10)
	}
	b = append(b, `,"index":`...)
	b = strconv.AppendInt(b, int64(ev.Index), 10)
	if ev.TimeUS != 0 {
		b = append(b, `,"time_us":`...)
		b = strconv.AppendInt(b, ev.TimeUS, 10)
	}
	b = append(b, `,"seconds":`...)
	b = appendFloat(b, ev.Seconds)
	b = append(b, `,"action":`...)
	b = appendString(b, ev.Action)
	b = append(b, `,"addr":`...)
	b = strconv.AppendUint(b, ev.Addr, 10)
	b = append(b, `,"size":`...)
	b = strconv.AppendInt(b, ev.Size, 10)
	b = append(b, `,"stream":`...)
	b = strconv.AppendInt(b, ev.Stream, 10)
	if ev.NameNo > 0 {
		// A walk's name, a-z only: nothing to escape.
		b = append(b, `,"name":"`...)
		b = ev.AppendName(b)
		b = append(b, '"')
	} else if ev.Name != "" {
		b = append(b, `,"name":`...)
		b = appendString(b, ev.Name)
	}
	if ev.Segment != 0 {
		b = append(b, `,"segment":`...)
		b = strconv.AppendUint(b, ev.Segment, 10)
	}
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, ev.Offset, 10)
	b = append(b, `,"located":`...)
	b = strconv.AppendBool(b, ev.Located)
	if ev.DeviceFree != 0 {
		b = append(b, `,"device_free":`...)
		b = strconv.AppendInt(b, ev.DeviceFree, 10)
	}
	b = append(b, `,"allocated_bytes":`...)
	b = strconv.AppendInt(b, ev.Allocated, 10)
	b = append(b, `,"reserved_bytes":`...)
	b = strconv.AppendInt(b, ev.Reserved, 10)
	if ev.SiteOfAlloc {
		b = append(b, `,"site_of_alloc":true`...)
	}
	if ev.Phase != "" {
		b = append(b, `,"phase":`...)
		b = appendString(b, ev.Phase)
	}
	b = append(b, `,"where":`...)
	if je.where != nil {
		b = appendString(b, je.where)
	} else {
		b = appendString(b, je.Where)
	}
	b = append(b, `,"frame":`...)
	switch f := je.Frame; {
	case f == nil:
		b = append(b, "null"...)
	case je.frameJSON != nil:
		b = append(b, je.frameJSON...)
	default:
		b = appendFrame(b, f)
	}
	return append(b, "}\n"...)
}

func appendFrame(b []byte, f *report.FrameJSON) []byte {
	b = append(b, `{"function":`...)
	b = appendString(b, f.Function)
	b = append(b, `,"file":`...)
	b = appendString(b, f.File)
	b = append(b, `,"line":`...)
	b = strconv.AppendInt(b, f.Line, 10)
	b = append(b, `,"kind":`...)
	b = appendString(b, f.Kind)
	return append(b, '}')
}

// appendString quotes s as encoding/json does with HTML escaping off:
// plain printable ASCII as it is, anything else through encoding/json.
func appendString[S ~string | ~[]byte](b []byte, s S) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			var q bytes.Buffer
			enc := json.NewEncoder(&q)
			enc.SetEscapeHTML(false)
			enc.Encode(string(s)) // a string always encodes
			return append(b, bytes.TrimSuffix(q.Bytes(), []byte("\n"))...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendFloat writes a float64 as encoding/json does.
func appendFloat(b []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// 1e-07, not 1e-7: encoding/json trims the exponent's zero.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}
