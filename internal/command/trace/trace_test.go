package trace

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/memstat/memstat/internal/cmdtest"
	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/internal/golden"
	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/snapshot"
)

func execTrace(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return cmdtest.Run(t, func(f *command.Factory) *cobra.Command { return NewCmdTrace(f, nil) }, args...)
}

type traceEvent struct {
	Record    string  `json:"record"`
	File      string  `json:"file"`
	Device    *int    `json:"device"`
	Index     int     `json:"index"`
	Seconds   float64 `json:"seconds"`
	Action    string  `json:"action"`
	Name      string  `json:"name"`
	Size      int64   `json:"size"`
	Addr      uint64  `json:"addr"`
	Segment   uint64  `json:"segment"`
	Offset    int64   `json:"offset"`
	Located   bool    `json:"located"`
	Allocated int64   `json:"allocated_bytes"`
	Where     string  `json:"where"`
}

type traceDevice struct {
	Device  int `json:"device"`
	Entries int `json:"trace_entries"`
	Shown   int `json:"shown"`
	Events  []traceEvent
	Final   struct {
		Allocated int64 `json:"allocated_bytes"`
	} `json:"final"`
	PeakAllocated struct {
		Index     int   `json:"index"`
		Allocated int64 `json:"allocated_bytes"`
	} `json:"peak_allocated"`
	summarized bool
}

type traceJSON struct {
	Header struct {
		SchemaVersion int    `json:"schema_version"`
		Command       string `json:"command"`
		Inputs        struct {
			Files   []string          `json:"files"`
			Options map[string]string `json:"options"`
		} `json:"inputs"`
	}
	Note    string
	Devices []*traceDevice
}

// parse reads trace's JSON Lines: a header first, then per device a
// device record, its events and a summary, each naming file and device.
func parse(t *testing.T, out string) traceJSON {
	t.Helper()
	var got traceJSON
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if err := json.Unmarshal([]byte(lines[0]), &got.Header); err != nil || !strings.Contains(lines[0], `"record":"header"`) {
		t.Fatalf("first line is not the header: %q (%v)", lines[0], err)
	}
	if got.Header.SchemaVersion != 1 || got.Header.Command != "trace" || len(got.Header.Inputs.Files) != 1 {
		t.Fatalf("header %+v", got.Header)
	}
	var cur *traceDevice
	for n, line := range lines[1:] {
		var rec traceEvent
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %d is not one JSON object: %v: %q", n+2, err, line)
		}
		if rec.File != got.Header.Inputs.Files[0] {
			t.Fatalf("line %d: file %q", n+2, rec.File)
		}
		if rec.Record != "note" && (rec.Device == nil || cur != nil && rec.Record != "device" && *rec.Device != cur.Device) {
			t.Fatalf("line %d: device %v", n+2, rec.Device)
		}
		switch rec.Record {
		case "note":
			var note struct{ Note string }
			json.Unmarshal([]byte(line), &note)
			got.Note = note.Note
		case "device":
			if cur != nil && !cur.summarized {
				t.Fatalf("line %d: device %d has no summary", n+2, cur.Device)
			}
			cur = &traceDevice{}
			json.Unmarshal([]byte(line), cur)
			got.Devices = append(got.Devices, cur)
		case "event":
			if cur == nil || cur.summarized {
				t.Fatalf("line %d: an event outside a device", n+2)
			}
			cur.Events = append(cur.Events, rec)
		case "summary":
			json.Unmarshal([]byte(line), cur)
			cur.summarized = true
			if cur.Shown != len(cur.Events) {
				t.Fatalf("device %d: summary says %d shown, %d listed", cur.Device, cur.Shown, len(cur.Events))
			}
		default:
			t.Fatalf("line %d: record %q", n+2, rec.Record)
		}
	}
	if cur != nil && !cur.summarized {
		t.Fatalf("device %d has no summary", cur.Device)
	}
	return got
}

// TestEveryRealSnapshot: every entry is listed once, in order; the
// running total after the last entry and the peak are memory_stats';
// every alloc has a name its frees share while the block lives; every
// alloc is located inside its segment.
func TestEveryRealSnapshot(t *testing.T) {
	for _, fn := range realdata.Files(t) {
		t.Run(filepath.Base(fn), func(t *testing.T) {
			s, err := snapshot.Load(fn)
			if err != nil {
				t.Fatal(err)
			}
			text, _, err := execTrace(t, fn)
			if err != nil {
				t.Fatal(err)
			}
			out, _, err := execTrace(t, "--json", fn)
			if err != nil {
				t.Fatal(err)
			}
			got := parse(t, out)
			withTrace := 0
			for d := range s.Traces {
				if s.Traces[d].Len() > 0 {
					withTrace++
				}
			}
			if len(got.Devices) != withTrace {
				t.Fatalf("%d devices listed, %d have a trace", len(got.Devices), withTrace)
			}
			if withTrace == 0 {
				if got.Note == "" || !strings.Contains(text, "no trace") {
					t.Errorf("a file without a trace does not say so: %q", text)
				}
				return
			}
			for _, d := range got.Devices {
				if len(d.Events) != s.Trace(d.Device).Len() || d.Entries != len(d.Events) {
					t.Fatalf("device %d: %d events of %d entries", d.Device, len(d.Events), s.Trace(d.Device).Len())
				}
				rp, err := analysis.Replay(s, d.Device)
				if err != nil {
					t.Fatal(err)
				}
				names := map[uint64]string{}
				for i, ev := range d.Events {
					if ev.Index != i || ev.Action != s.Trace(d.Device).At(i).Action.String() {
						t.Fatalf("event %d is entry %d (%s)", i, ev.Index, ev.Action)
					}
					switch ev.Action {
					case "alloc":
						if ev.Name == "" || !ev.Located || ev.Addr != ev.Segment+uint64(ev.Offset) || !strings.HasPrefix(ev.Where, "seg 0x") {
							t.Fatalf("alloc %d: name %q, located %v at %#x+%#x for %#x", i, ev.Name, ev.Located, ev.Segment, ev.Offset, ev.Addr)
						}
						for a, n := range names {
							if n == ev.Name && a != ev.Addr {
								t.Fatalf("alloc %d: name %q is still in use by %#x", i, n, a)
							}
						}
						names[ev.Addr] = ev.Name
					case "free_requested", "free_completed":
						if n, ok := names[ev.Addr]; ok && n != ev.Name {
							t.Fatalf("%s %d: name %q, its alloc was %q", ev.Action, i, ev.Name, n)
						}
						if ev.Action == "free_completed" {
							delete(names, ev.Addr)
						}
					}
				}
				if want := rp.MomentAt(rp.Result.PeakAllocated.Index); d.PeakAllocated.Index != want.Index || d.PeakAllocated.Allocated != want.Allocated {
					t.Errorf("device %d: peak allocated %+v, the replay's is %+v", d.Device, d.PeakAllocated, want)
				}
				last := d.Events[len(d.Events)-1]
				if last.Allocated != d.Final.Allocated || d.PeakAllocated.Allocated != rp.Result.Stat("allocated_bytes.all.peak") {
					t.Errorf("device %d: final %d (last event %d), peak %d vs %d", d.Device, d.Final.Allocated, last.Allocated,
						d.PeakAllocated.Allocated, rp.Result.Stat("allocated_bytes.all.peak"))
				}
			}
			if !strings.Contains(text, "entries shown; after the last entry") {
				t.Errorf("text lacks the totals line")
			}
		})
	}
}

// TestFilters: bounds by index and time, actions, sizes and addresses.
func TestFilters(t *testing.T) {
	fn := realdata.File(t, "silmont2000")
	all := parse(t, must(execTrace(t, "--json", fn))).Devices[0].Events
	sel := func(args ...string) []int {
		t.Helper()
		var idx []int
		for _, ev := range parse(t, must(execTrace(t, append([]string{"--json"}, append(args, fn)...)...))).Devices[0].Events {
			idx = append(idx, ev.Index)
		}
		return idx
	}
	if got := sel("--from", "10", "--to", "12"); len(got) != 3 || got[0] != 10 {
		t.Errorf("--from 10 --to 12: %v", got)
	}
	rel := strconv.FormatFloat(all[20].Seconds, 'f', 6, 64)
	if got := sel("--from", "+"+rel+"s"); len(got) == 0 || got[0] > 20 || all[got[0]].Seconds < all[20].Seconds {
		t.Errorf("--from +%ss: %v", rel, got)
	}
	for _, idx := range sel("--action", "segment_alloc", "--min-size", "100MiB") {
		if ev := all[idx]; ev.Action != "segment_alloc" || ev.Size < 100<<20 {
			t.Errorf("entry %d %s %d passed the filter", idx, ev.Action, ev.Size)
		}
	}
	a := all[5].Addr
	for _, idx := range sel("--addr", "0x"+strconv.FormatUint(a+4096, 16)) {
		if ev := all[idx]; a+4096 < ev.Addr || a+4096 >= ev.Addr+uint64(ev.Size) {
			t.Errorf("entry %d at %#x (%d bytes) does not contain %#x", idx, ev.Addr, ev.Size, a+4096)
		}
	}
	if got := sel("--addr", strconv.FormatUint(a, 10)); len(got) < 2 {
		t.Errorf("--addr %d (decimal): %v", a, got)
	}
}

func must(out, _ string, err error) string {
	if err != nil {
		panic(err)
	}
	return out
}

func TestGolden(t *testing.T) {
	check := func(t *testing.T, name, fn string, formats []string, extra ...string) {
		for _, format := range formats {
			out, errOut, err := execTrace(t, append(append([]string{"--format", format}, extra...), fn)...)
			if err != nil {
				t.Fatal(err)
			}
			if errOut != "" {
				t.Errorf("stderr: %s", errOut)
			}
			golden.Check(t, name+"."+format, []byte(out))
		}
	}
	t.Run("nesta-oom", func(t *testing.T) {
		check(t, "nesta-oom", realdata.File(t, "Nesta-gitU"), []string{"text", "json", "markdown"}, "--from", "1100", "--to", "1125")
	})
	t.Run("yiyi-2.0", func(t *testing.T) {
		check(t, "yiyi-2.0", realdata.File(t, "Yiyi-philosophy"), []string{"text", "json"})
	})
	t.Run("bcrafton-training", func(t *testing.T) {
		check(t, "bcrafton-training", realdata.File(t, "bcrafton"), []string{"text"}, "--from", "+0.0253s", "--to", "+0.0254s")
	})
	t.Run("sidsoc12-large", func(t *testing.T) {
		check(t, "sidsoc12-large", realdata.File(t, "sidsoc12"), []string{"text"}, "--action", "alloc,segment_alloc", "--min-size", "98MiB", "--to", "6100")
	})
	t.Run("kkaitlyn-notrace", func(t *testing.T) {
		check(t, "kkaitlyn-notrace", realdata.File(t, "kkaitlyn111"), []string{"text", "json"})
	})
	t.Run("recorded-expandable", func(t *testing.T) {
		fn, _ := fixture.Expandable(t)
		check(t, "recorded-expandable", fn, []string{"text", "json"})
	})
}

func TestFlags(t *testing.T) {
	for _, c := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"a.pickle"}, ""},
		{[]string{"--from", "+1.5s", "--to", "1773270053.8s", "--action", "alloc,oom", "--min-size", "1MiB", "--addr", "0x7f00", "a.pickle"}, ""},
		{[]string{"--from", "soon", "a.pickle"}, "--from"},
		{[]string{"--to", "-3", "a.pickle"}, "--to"},
		{[]string{"--action", "malloc", "a.pickle"}, "unknown action"},
		{[]string{"--addr", "0xzz", "a.pickle"}, "--addr"},
		{[]string{"--min-size", "x", "a.pickle"}, "--min-size"},
		{[]string{}, "want one snapshot"},
	} {
		got, err := cmdtest.Parse(t, NewCmdTrace, c.args...)
		if c.wantErr != "" {
			if !cmdtest.IsFlagError(err, c.wantErr) {
				t.Errorf("%v: error %v, want a flag error saying %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil || got.File != "a.pickle" {
			t.Errorf("%v: %v", c.args, err)
		}
	}
	if _, _, err := execTrace(t, "--device", "0", realdata.File(t, "kkaitlyn111")); err == nil || !strings.Contains(err.Error(), "no trace") {
		t.Errorf("--device without a trace: %v", err)
	}
}
