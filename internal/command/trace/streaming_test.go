package trace

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/internal/golden"
	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/analysis"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/report"
	"github.com/memstat/memstat/pkg/snapshot"
)

// streamFigures are the replay's figures after an allocator call, and the
// call's last entry: a call's entries share one state (segment_alloc then
// alloc), so a change since the first entry is compared at the call's end.
type streamFigures struct {
	last                int
	requested, reserved int64
}

// replayFigures replays device d of fn in follow mode and returns the
// requested and reserved memory before the first entry and after each
// call.
func replayFigures(t *testing.T, s *snapshot.Snapshot, d int) (startReq, startRes int64, calls []streamFigures, unapplied bool) {
	t.Helper()
	var cur []int
	r, err := replay.New(s, replay.Options{Device: d, OnEvent: func(i int, _ snapshot.TraceEntry, _ *allocator.Allocator) {
		cur = append(cur, i)
	}})
	if err != nil {
		t.Fatal(err)
	}
	st := r.Allocator().Stats()
	startReq, startRes = st.RequestedBytes[allocator.PoolAll].Current, st.ReservedBytes[allocator.PoolAll].Current
	for {
		cur = cur[:0]
		if err := r.Step(); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if len(cur) == 0 {
			continue
		}
		st := r.Allocator().Stats()
		calls = append(calls, streamFigures{cur[len(cur)-1], st.RequestedBytes[allocator.PoolAll].Current, st.ReservedBytes[allocator.PoolAll].Current})
	}
	res := r.Result()
	return startReq, startRes, calls, res.Fidelity.Unapplied > 0
}

// streamedEvents lists fn's trace with --stream, keeping every event.
func streamedEvents(t *testing.T, fn string) map[int][]analysis.StreamEvent {
	t.Helper()
	ts := analysis.NewTraceStream(analysis.TraceQuery{}, false)
	got := map[int][]analysis.StreamEvent{}
	if _, err := snapshot.Stream(fn, func(se *snapshot.StreamedEntry) error {
		return ts.Entry(se, func(ev *analysis.StreamEvent) error {
			got[se.Device] = append(got[se.Device], *ev)
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// streamFiles are the snapshots the streaming listing is checked on: the
// published ones and recordings (a training run, segments allocated and
// freed in the trace, expandable segments, several streams).
func streamFiles(t *testing.T) []string {
	files := realdata.FilesIfPresent()
	if len(files) == 0 {
		t.Log("no published snapshots (../shared/testdata/real): checking the recordings only")
	}
	train, _ := fixture.RecordArgs(t, "train.pickle", "-w", "train", "--layers", "2", "--hidden", "512", "--heads", "8", "--seq", "256", "--batch", "2", "--steps", "3")
	many, _ := fixture.RecordFile(t, "many_segments.mem", "many.pickle")
	streams, _ := fixture.RecordFile(t, "streams.mem", "streams.pickle")
	expandable, _ := fixture.Expandable(t)
	return append(files, train, many, streams, expandable)
}

// TestStreamMatchesListing: each streamed row's columns are the default
// listing's where the stream shows them (action, size, stream, address,
// name, frame; the segment where the stream places the block), and its
// changes of requested and reserved memory are the replay's figures
// less those before the first entry, at the end of every allocator call,
// on every published snapshot and recording whose replay applies every
// entry.
func TestStreamMatchesListing(t *testing.T) {
	for _, fn := range streamFiles(t) {
		t.Run(filepath.Base(fn), func(t *testing.T) {
			s, err := snapshot.Load(fn)
			if err != nil {
				t.Skipf("not a snapshot memstat reads: %v", err)
			}
			got := streamedEvents(t, fn)
			fr := analysis.NewFrames(s.Stacks, false)
			located, figures := 0, 0
			for d := range s.Devices() {
				n := s.Trace(d).Len()
				if len(got[d]) != n {
					t.Fatalf("device %d: %d rows streamed, the trace has %d entries", d, len(got[d]), n)
				}
				if n == 0 {
					continue
				}
				var want []analysis.TraceEvent
				if _, err := analysis.WalkTrace(s, d, fr, analysis.TraceQuery{}, func(ev *analysis.TraceEvent) error {
					want = append(want, *ev)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				for i := range want {
					g, w := &got[d][i], &want[i]
					gs, ws := report.TraceFrame(&g.TraceEvent), report.TraceFrame(w)
					if g.Index != i || g.Action != w.Action || g.Size != w.Size || g.Stream != w.Stream || g.Addr != w.Addr ||
						report.TraceName(&g.TraceEvent) != report.TraceName(w) || g.Seconds != w.Seconds || g.DeviceFree != w.DeviceFree {
						t.Fatalf("device %d entry %d: streamed %+v, listed %+v", d, i, g.TraceEvent, *w)
					}
					// A free of a block from before the trace has no frame
					// in the stream; every other frame is the listing's.
					if gs != ws && !(gs == "" && w.SiteOfAlloc && report.TraceName(w) == "-") {
						t.Fatalf("device %d entry %d: frame %q streamed, %q listed", d, i, gs, ws)
					}
					if g.Located {
						located++
						if !w.Located || g.Segment != w.Segment || g.Offset != w.Offset {
							t.Fatalf("device %d entry %d: streamed at %s, listed at %s", d, i, report.Where(g.TraceEvent), report.Where(*w))
						}
					}
				}
				startReq, startRes, calls, unapplied := replayFigures(t, s, d)
				if unapplied {
					t.Logf("device %d: the replay left entries unapplied; its figures are not compared", d)
					continue
				}
				for _, c := range calls {
					g := &got[d][c.last]
					if g.RequestedChange != c.requested-startReq || g.ReservedChange != c.reserved-startRes {
						t.Fatalf("device %d entry %d (%s): changes %d requested, %d reserved streamed; the replay's %d, %d",
							d, c.last, g.Action, g.RequestedChange, g.ReservedChange, c.requested-startReq, c.reserved-startRes)
					}
					figures++
				}
			}
			t.Logf("%d rows placed in a segment, %d calls' figures compared", located, figures)
		})
	}
}

func TestStreamGolden(t *testing.T) {
	check := func(t *testing.T, name, fn string, formats []string, extra ...string) {
		for _, format := range formats {
			out, errOut, err := execTrace(t, append(append([]string{"--stream", "--format", format}, extra...), fn)...)
			if err != nil {
				t.Fatal(err)
			}
			if errOut != "" {
				t.Errorf("stderr: %s", errOut)
			}
			golden.Check(t, name+"."+format, []byte(out))
		}
	}
	t.Run("stream-many-segments", func(t *testing.T) {
		fn, _ := fixture.RecordFile(t, "many_segments.mem", "many.pickle")
		check(t, "stream-many-segments", fn, []string{"text", "json"}, "--to", "12")
		check(t, "stream-many-segments-frees", fn, []string{"text"}, "--from", "6650", "--action", "free_completed,segment_free")
	})
	t.Run("stream-expandable", func(t *testing.T) {
		fn, _ := fixture.Expandable(t)
		check(t, "stream-expandable", fn, []string{"text"}, "--action", "alloc,segment_map,oom", "--min-size", "1MiB")
	})
	t.Run("stream-nesta-oom", func(t *testing.T) {
		check(t, "stream-nesta-oom", realdata.File(t, "Nesta-gitU"), []string{"text", "markdown", "json"}, "--from", "1100", "--to", "1125")
	})
	t.Run("stream-kkaitlyn-notrace", func(t *testing.T) {
		check(t, "stream-kkaitlyn-notrace", realdata.File(t, "kkaitlyn111"), []string{"text", "json"})
	})
}

// TestStreamFirstLines: the first rows are written when only the first
// entries are decoded, in text and in JSON Lines; the listing still ends
// with every entry.
func TestStreamFirstLines(t *testing.T) {
	fn := longTrace(t, 20000)
	for _, f := range []report.Format{report.Text, report.JSON} {
		t.Run(string(f), func(t *testing.T) {
			out := &probe{}
			opts := newOptions(out, fn, f)
			opts.Stream = true
			firstAt := -1
			out.at = func(n int) error {
				if firstAt < 0 && strings.Contains(out.String(), "alloc") {
					firstAt = int(opts.streamed.Load())
				}
				return nil
			}
			if err := runTrace(opts); err != nil {
				t.Fatal(err)
			}
			entries := int(opts.streamed.Load())
			if entries < 40000 {
				t.Fatalf("%d entries streamed", entries)
			}
			if firstAt < 0 || firstAt > entries/10 {
				t.Errorf("the first rows came after %d of %d entries: the listing does not stream", firstAt, entries)
			}
			if lines := strings.Count(out.String(), "\n"); lines < entries {
				t.Errorf("%d lines for %d entries", lines, entries)
			}
		})
	}
}

// TestStreamClosedPipe: a write error stops the decoding at once and is
// returned as it is (root.Main makes EPIPE a quiet exit 0).
func TestStreamClosedPipe(t *testing.T) {
	fn := longTrace(t, 20000)
	for _, f := range []report.Format{report.Text, report.Markdown, report.JSON} {
		out := &probe{}
		opts := newOptions(out, fn, f)
		opts.Stream = true
		out.at = func(n int) error {
			if n > 0 {
				return syscall.EPIPE
			}
			return nil
		}
		err := runTrace(opts)
		if !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("%s: error %v, want EPIPE", f, err)
		}
		if int(opts.streamed.Load()) > 10000 {
			t.Errorf("%s: the decoding went on to entry %d of 40000 after the pipe closed", f, int(opts.streamed.Load()))
		}
	}
}

// TestStreamBadFile: a file that ends in the middle of its trace keeps the
// rows decoded before, then the one-line error naming the file.
func TestStreamBadFile(t *testing.T) {
	fn := longTrace(t, 20000)
	data, err := os.ReadFile(fn)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut.pickle")
	if err := os.WriteFile(cut, data[:len(data)*2/3], 0o644); err != nil {
		t.Fatal(err)
	}
	out := &probe{}
	opts := newOptions(out, cut, report.Text)
	opts.Stream = true
	out.at = func(int) error { return nil }
	err = runTrace(opts)
	var ie *snapshot.InputError
	if !errors.As(err, &ie) || ie.File != cut || strings.Contains(err.Error(), "\n") {
		t.Fatalf("error %v, want one line naming %s", err, cut)
	}
	if rows := strings.Count(out.String(), " alloc "); rows < 1000 {
		t.Errorf("%d alloc rows printed before the error", rows)
	}
}

// TestStreamBoundedMemory: streaming a long trace holds the live state,
// not the trace: the heap in use while the rows are written (sampled
// after a collection at every MiB of output) grows by less than 8 bytes
// an entry from the first sample to the last (the pickle's memo keeps 4
// bytes a memoized object, and every entry dict is one), and stays under
// what the loaded snapshot alone takes (some 17 bytes an entry).
func TestStreamBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: records and streams a trace of 200,000 entries")
	}
	fn := longTrace(t, 100000)
	for _, f := range []report.Format{report.Text, report.JSON} {
		opts, h := listingHeap(t, fn, f, true)
		loaded, first, peak, samples := h.loaded, h.first, h.peak, h.samples
		if int(opts.streamed.Load()) < 200000 {
			t.Fatalf("%d entries streamed", int(opts.streamed.Load()))
		}
		t.Logf("%s: loaded snapshot %.1f MB; while streaming: first %.1f MB, peak %.1f MB (%d samples, %.0f MB written)",
			f, float64(loaded)/1e6, float64(first)/1e6, float64(peak)/1e6, samples, float64(h.written)/1e6)
		if samples < 10 {
			t.Errorf("%s: %d samples: the listing was not written as it went", f, samples)
		}
		if grew := peak - first; grew > 8*opts.streamed.Load() {
			t.Errorf("%s: the heap grew by %.1f MB while streaming %d entries, over 8 bytes an entry", f, float64(grew)/1e6, int(opts.streamed.Load()))
		}
		if peak > loaded {
			t.Errorf("%s: heap %.1f MB while streaming, the loaded snapshot takes %.1f MB", f, float64(peak)/1e6, float64(loaded)/1e6)
		}
	}
}

// TestStreamFirstLinesFiltered: a filter that keeps few entries (fewer
// than the rows a table holds to size its columns) still has its first
// rows written some 8,000 entries after the first, not at the end.
func TestStreamFirstLinesFiltered(t *testing.T) {
	fn := longTrace(t, 20000)
	out := &probe{}
	opts := newOptions(out, fn, report.Text)
	opts.Stream = true
	opts.query.Actions = []snapshot.Action{snapshot.ActionAlloc}
	opts.query.MinSize = 512 + 96*4096 // one alloc in 97
	opts.query.To = &analysis.TraceBound{Kind: analysis.BoundIndex, Index: 30000}
	// The entries decoded when each write began, by the bytes written
	// before it.
	type write struct{ at, streamed int }
	var writes []write
	out.at = func(n int) error {
		writes = append(writes, write{n, int(opts.streamed.Load())})
		return nil
	}
	if err := runTrace(opts); err != nil {
		t.Fatal(err)
	}
	firstAt, firstRow := -1, strings.Index(out.String(), " alloc ")
	for _, w := range writes {
		if w.at <= firstRow {
			firstAt = w.streamed
		}
	}
	if rows := strings.Count(out.String(), " alloc "); rows < 100 || rows > report.DefaultHold {
		t.Fatalf("%d rows: the test wants fewer than a table holds", rows)
	}
	if firstAt < 0 || firstAt > int(opts.streamed.Load())/2 {
		t.Errorf("the first rows came after %d of %d entries", firstAt, int(opts.streamed.Load()))
	}
}
