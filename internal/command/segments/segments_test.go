package segments

import (
	"encoding/json"
	"path/filepath"
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

func execSegments(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return cmdtest.Run(t, func(f *command.Factory) *cobra.Command { return NewCmdSegments(f, nil) }, args...)
}

type segJSON struct {
	Devices []struct {
		Device int  `json:"device"`
		Final  bool `json:"final"`
		Moment struct {
			Index     int   `json:"index"`
			Allocated int64 `json:"allocated_bytes"`
			Reserved  int64 `json:"reserved_bytes"`
		} `json:"moment"`
		Segments []struct {
			Address   uint64 `json:"address"`
			Size      int64  `json:"size"`
			Pool      string `json:"pool"`
			Allocated int64  `json:"allocated_bytes"`
			Pending   int64  `json:"pending_free_bytes"`
			Free      int64  `json:"free_bytes"`
			Map       string `json:"map"`
			Blocks    []struct {
				Size  int64  `json:"size"`
				State string `json:"state"`
			} `json:"blocks"`
		} `json:"segments"`
		Total struct {
			Size      int64 `json:"size"`
			Allocated int64 `json:"allocated_bytes"`
			Free      int64 `json:"free_bytes"`
		} `json:"total"`
		Omitted int `json:"omitted"`
	} `json:"devices"`
}

func parse(t *testing.T, out string) segJSON {
	t.Helper()
	var got segJSON
	if err := json.Unmarshal([]byte(cmdtest.Result(t, out)), &got); err != nil {
		t.Fatalf("not one JSON object: %v", err)
	}
	return got
}

// TestEveryRealSnapshot: the default map is the snapshot's own segments,
// block for block; the totals add up; the final figures are memory_stats'
// current ones; the map at the peak holds the peak's reserved memory.
func TestEveryRealSnapshot(t *testing.T) {
	for _, fn := range realdata.Files(t) {
		t.Run(filepath.Base(fn), func(t *testing.T) {
			text, _, err := execSegments(t, fn)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"final state", "Address", "total", "map: #"} {
				if !strings.Contains(text, want) {
					t.Errorf("text lacks %q", want)
				}
			}
			s, err := snapshot.Load(fn)
			if err != nil {
				t.Fatal(err)
			}
			out, _, err := execSegments(t, "--json", "--sort", "address", fn)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range parse(t, out).Devices {
				segs := s.DeviceSegments(d.Device)
				if len(d.Segments) != len(segs) || !d.Final {
					t.Fatalf("device %d: %d segments, the file has %d", d.Device, len(d.Segments), len(segs))
				}
				var size, alloc, free int64
				for i, sg := range d.Segments {
					if i > 0 && sg.Address <= d.Segments[i-1].Address {
						t.Errorf("not in address order at %d", i)
					}
					var sum int64
					for _, b := range sg.Blocks {
						sum += b.Size
					}
					if sum != sg.Size || sg.Allocated+sg.Pending+sg.Free != sg.Size || len(sg.Map) != 34 {
						t.Errorf("segment %#x: blocks %d, parts %d+%d+%d, size %d, map %q", sg.Address, sum, sg.Allocated, sg.Pending, sg.Free, sg.Size, sg.Map)
					}
					size += sg.Size
					alloc += sg.Allocated
					free += sg.Free
				}
				if d.Total.Size != size || d.Total.Allocated != alloc || d.Total.Free != free {
					t.Errorf("device %d: total %+v, segments add up to %d/%d/%d", d.Device, d.Total, size, alloc, free)
				}
				rp, err := analysis.Replay(s, d.Device)
				if err != nil {
					t.Fatal(err)
				}
				if cur := rp.Result.Stat("reserved_bytes.all.current"); size != cur || alloc != rp.Result.Stat("allocated_bytes.all.current") {
					t.Errorf("device %d: %d reserved, %d allocated; memory_stats says %d, %d", d.Device, size, alloc, cur, rp.Result.Stat("allocated_bytes.all.current"))
				}
			}
			out, _, err = execSegments(t, "--json", "--at", "peak", fn)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range parse(t, out).Devices {
				rp, err := analysis.Replay(s, d.Device)
				if err != nil {
					t.Fatal(err)
				}
				if want := rp.Result.Stat("reserved_bytes.all.peak"); d.Total.Size != want {
					t.Errorf("device %d at the peak: %d reserved, reserved_bytes.all.peak %d", d.Device, d.Total.Size, want)
				}
			}
		})
	}
}

// TestFilters: --pool, --min-size and --stream keep what they say and
// count the rest; --at N rebuilds an earlier state.
func TestFilters(t *testing.T) {
	fn := realdata.File(t, "Nesta-gitU")
	out, _, err := execSegments(t, "--json", "--pool", "large", "--min-size", "20MiB", "--sort", "fragmentation", fn)
	if err != nil {
		t.Fatal(err)
	}
	d := parse(t, out).Devices[0]
	all, _, _ := execSegments(t, "--json", fn)
	if n := len(parse(t, all).Devices[0].Segments); len(d.Segments)+d.Omitted != n || d.Omitted == 0 {
		t.Errorf("%d kept + %d omitted != %d", len(d.Segments), d.Omitted, n)
	}
	for _, s := range d.Segments {
		if s.Pool != "large" || s.Size < 20<<20 {
			t.Errorf("segment %+v passed the filter", s)
		}
	}
	out, _, _ = execSegments(t, "--json", "--stream", "0x1", fn)
	if d := parse(t, out).Devices[0]; len(d.Segments) != 0 {
		t.Errorf("stream 1 has %d segments", len(d.Segments))
	}
	out, _, err = execSegments(t, "--json", "--at", "10", fn)
	if err != nil {
		t.Fatal(err)
	}
	if d := parse(t, out).Devices[0]; d.Final || d.Moment.Index != 10 || len(d.Segments) == 0 {
		t.Errorf("--at 10: %+v", d.Moment)
	}
	if _, _, err := execSegments(t, "--at", "5000", fn); err == nil || !strings.Contains(err.Error(), "no trace entry 5000") {
		t.Errorf("--at past the trace: %v", err)
	}
}

func TestGolden(t *testing.T) {
	check := func(t *testing.T, name, fn string, formats []string, extra ...string) {
		for _, format := range formats {
			out, errOut, err := execSegments(t, append(append([]string{"--format", format}, extra...), fn)...)
			if err != nil {
				t.Fatal(err)
			}
			if errOut != "" {
				t.Errorf("stderr: %s", errOut)
			}
			golden.Check(t, name+"."+format, []byte(out))
		}
	}
	all := []string{"text", "json", "markdown"}
	t.Run("nesta-oom", func(t *testing.T) {
		fn := realdata.File(t, "Nesta-gitU")
		check(t, "nesta-oom", fn, []string{"text", "markdown"}, "--sort", "fragmentation", "--min-size", "20MiB")
		check(t, "nesta-oom-large", fn, []string{"json"}, "--min-size", "200MiB")
	})
	t.Run("yiyi-2.0", func(t *testing.T) {
		fn := realdata.File(t, "Yiyi-philosophy")
		check(t, "yiyi-2.0", fn, []string{"text", "markdown"}, "--pool", "large", "--min-size", "30MiB")
		check(t, "yiyi-2.0-large", fn, []string{"json"}, "--min-size", "100MiB")
	})
	t.Run("bcrafton-training", func(t *testing.T) {
		check(t, "bcrafton-training", realdata.File(t, "bcrafton"), []string{"text"})
	})
	t.Run("sidsoc12-peak", func(t *testing.T) {
		check(t, "sidsoc12-peak", realdata.File(t, "sidsoc12"), []string{"text"}, "--at", "peak", "--sort", "fragmentation", "--top", "15")
	})
	t.Run("kkaitlyn-notrace", func(t *testing.T) {
		check(t, "kkaitlyn-notrace", realdata.File(t, "kkaitlyn111"), []string{"text", "markdown"}, "--min-size", "250MiB", "--width", "20")
		check(t, "kkaitlyn-notrace-top", realdata.File(t, "kkaitlyn111"), []string{"json"}, "--sort", "free", "--top", "3")
	})
	t.Run("recorded-expandable", func(t *testing.T) {
		fn, _ := fixture.Expandable(t)
		check(t, "recorded-expandable", fn, all)
		check(t, "recorded-expandable-at-24", fn, []string{"text"}, "--at", "24")
	})
}

func TestFlags(t *testing.T) {
	for _, c := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"a.pickle"}, ""},
		{[]string{"--sort", "free", "--pool", "small", "--min-size", "2MiB", "--stream", "0x7f00", "--at", "peak", "a.pickle"}, ""},
		{[]string{"--sort", "name", "a.pickle"}, "invalid sort"},
		{[]string{"--pool", "medium", "a.pickle"}, "invalid pool"},
		{[]string{"--min-size", "lots", "a.pickle"}, "--min-size"},
		{[]string{"--stream", "s1", "a.pickle"}, "--stream"},
		{[]string{"--at", "start", "a.pickle"}, "--at"},
		{[]string{"--width", "0", "a.pickle"}, "--width"},
		{[]string{"--top", "-2", "a.pickle"}, "--top"},
		{[]string{}, "want one snapshot"},
	} {
		got, err := cmdtest.Parse(t, NewCmdSegments, c.args...)
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
}
