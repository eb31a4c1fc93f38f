package trace

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/report"
	"github.com/memstat/memstat/pkg/snapshot"
)

// TestEventJSON: appendEvent writes what encoding/json writes for every
// event of every published snapshot, and for events with odd strings
// (quotes, control characters, HTML, non-ASCII, invalid UTF-8) and floats.
func TestEventJSON(t *testing.T) {
	var ref bytes.Buffer
	enc := json.NewEncoder(&ref)
	enc.SetEscapeHTML(false)
	dev := 3
	check := func(je *jsonEvent) {
		t.Helper()
		ref.Reset()
		// A walk leaves the name's spelling to the printer (NameNo):
		// encoding/json writes the spelled Name.
		spelled := *je
		spelled.SpellName()
		if err := enc.Encode(&spelled); err != nil {
			t.Fatal(err)
		}
		if got := appendEvent(nil, je); !bytes.Equal(got, ref.Bytes()) {
			t.Fatalf("appendEvent:\n got %s\nwant %s", got, ref.Bytes())
		}
		// With the parts jsonLines encodes once.
		once := *je
		once.fileJSON, once.where = appendString([]byte{}, je.File), []byte(je.Where)
		if je.Frame != nil {
			once.frameJSON = appendFrame(nil, je.Frame)
		}
		if got := appendEvent(nil, &once); !bytes.Equal(got, ref.Bytes()) {
			t.Fatalf("appendEvent, parts encoded once:\n got %s\nwant %s", got, ref.Bytes())
		}
	}
	n := 0
	for _, fn := range realdata.Files(t) {
		s, err := snapshot.Load(fn)
		if err != nil {
			t.Fatal(err)
		}
		fr := analysis.NewFrames(s.Stacks, false)
		for d := range s.Traces {
			if s.Traces[d].Len() == 0 {
				continue
			}
			_, err := analysis.WalkTrace(s, d, fr, analysis.TraceQuery{}, func(ev *analysis.TraceEvent) error {
				je := &jsonEvent{jsonRecord: jsonRecord{Record: "event", File: fn, Device: &d}, TraceEvent: *ev, Where: report.Where(*ev)}
				if ev.Site != analysis.NoStackFrame {
					f := report.FrameRecord(ev.Site)
					je.Frame = &f
				}
				check(je)
				n++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	rng := rand.New(rand.NewSource(1))
	odd := []string{"", "a\"b", `back\slash`, "tab\there", "nl\n", "\x01\x1f", "<module> & >", "ü文字", "\xff\xfe", "\u2028\u2029", `\u003c`}
	for i := range 2000 {
		f := &report.FrameJSON{Function: odd[rng.Intn(len(odd))], File: odd[rng.Intn(len(odd))], Line: rng.Int63(), Kind: "user"}
		je := &jsonEvent{jsonRecord: jsonRecord{Record: "event", File: odd[rng.Intn(len(odd))], Device: &dev},
			TraceEvent: analysis.TraceEvent{
				Index: rng.Int(), TimeUS: rng.Int63() * int64(i%2), Seconds: rng.Float64() * float64(int64(1)<<rng.Intn(80)) / float64(int64(1)<<rng.Intn(60)),
				Action: odd[rng.Intn(len(odd))], Addr: rng.Uint64(), Size: rng.Int63() - rng.Int63(), Stream: -rng.Int63(),
				Name: odd[rng.Intn(len(odd))], Segment: rng.Uint64() * uint64(i%2), Offset: rng.Int63(), Located: i%3 == 0,
				DeviceFree: rng.Int63() * int64(i%2), Allocated: rng.Int63(), Reserved: rng.Int63(), SiteOfAlloc: i%5 == 0, Phase: odd[rng.Intn(len(odd))],
			},
			Where: odd[rng.Intn(len(odd))]}
		if i%4 != 0 {
			je.Frame = f
		}
		if i%7 == 0 {
			je.Device = nil
		}
		if i%3 == 1 {
			// A name left to the printer: the first names, and the
			// lengths around each power of 26.
			je.Name, je.NameNo = "", int32(1+rng.Intn(30))
			if i%2 == 0 {
				je.NameNo = int32(1 + rng.Intn(26*26*26*26))
			}
		}
		check(je)
	}
	t.Logf("%d events of the published snapshots and 2000 made-up ones", n)
}
