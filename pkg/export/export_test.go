package export

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/internal/testsnap"
	"github.com/memstat/memstat/pkg/snapshot"
)

func readCSV(t *testing.T, data []byte, cols []string) []map[string]string {
	t.Helper()
	recs, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err != nil {
		t.Fatalf("CSV does not parse: %v", err)
	}
	if len(recs) == 0 {
		t.Fatal("no header")
	}
	for i, c := range cols {
		if recs[0][i] != c {
			t.Fatalf("header %v, want %v", recs[0], cols)
		}
	}
	var out []map[string]string
	for _, r := range recs[1:] {
		m := map[string]string{}
		for i, c := range cols {
			m[c] = r[i]
		}
		out = append(out, m)
	}
	return out
}

func export(t *testing.T, s *snapshot.Snapshot, o Options) ([]byte, int) {
	t.Helper()
	var buf bytes.Buffer
	n, err := Write(&buf, s, o)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), n
}

func TestFixtureEvents(t *testing.T) {
	fx := testsnap.Build(t)
	trace := fx.Snapshot.Traces[0].Entries()
	data, n := export(t, fx.Snapshot, Options{Table: Events, Format: CSV, Device: -1})
	rows := readCSV(t, data, EventColumns)
	if n != len(trace) || len(rows) != len(trace) {
		t.Fatalf("%d rows (reported %d), want one per trace entry (%d)", len(rows), n, len(trace))
	}
	for i, r := range rows {
		if r["index"] != strconv.Itoa(i) || r["action"] != trace[i].Action.String() || r["size"] != strconv.FormatInt(trace[i].Size, 10) {
			t.Fatalf("row %d: %v, entry %+v", i, r, trace[i])
		}
		if r["time_us"] != strconv.FormatInt(trace[i].TimeUS, 10) {
			t.Fatalf("row %d: time_us %s, want %d", i, r["time_us"], trace[i].TimeUS)
		}
	}
	// The spike is a 1 GiB block: a segment of its own. Its top frame is
	// the program's (model.py), not PyTorch's matmul.
	spike := rows[fx.PeakIndex]
	if spike["action"] != "alloc" || spike["size"] != strconv.FormatInt(testsnap.Spike, 10) ||
		spike["segment"] != spike["addr"] || spike["offset"] != "0" || spike["top_function"] != "attention" ||
		spike["top_file"] != "model.py" || spike["top_line"] != "50" ||
		spike["stack_id"] != strconv.Itoa(int(fx.SpikeStack)) {
		t.Errorf("spike row %v", spike)
	}
	// The second bias block sits 1 KiB into the first one's segment.
	var bias []map[string]string
	for _, r := range rows {
		if r["action"] == "alloc" && r["top_function"] == "__init__" && r["top_line"] == "13" {
			bias = append(bias, r)
		}
	}
	if len(bias) != testsnap.BiasCount || bias[1]["segment"] != bias[0]["segment"] ||
		bias[0]["offset"] != "0" || bias[1]["offset"] != "1024" {
		t.Errorf("bias rows %v", bias)
	}
	oom := rows[fx.OOMIndex]
	if oom["action"] != "oom" || oom["addr"] != "" || oom["device_free"] == "" || oom["segment"] != "" {
		t.Errorf("oom row %v", oom)
	}
}

func TestFormatsAgree(t *testing.T) {
	fx := testsnap.Build(t)
	for _, table := range []Table{Events, Blocks, Segments} {
		csvData, nc := export(t, fx.Snapshot, Options{Table: table, Format: CSV, Device: -1})
		jsonData, nj := export(t, fx.Snapshot, Options{Table: table, Format: JSON, Device: -1})
		jsonlData, nl := export(t, fx.Snapshot, Options{Table: table, Format: JSONL, Device: -1})
		var arr []map[string]any
		if err := json.Unmarshal(jsonData, &arr); err != nil {
			t.Fatalf("%s: JSON does not parse: %v", table, err)
		}
		var lines []map[string]any
		sc := bufio.NewScanner(bytes.NewReader(jsonlData))
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("%s: JSON line does not parse: %v", table, err)
			}
			lines = append(lines, m)
		}
		recs, _ := csv.NewReader(bytes.NewReader(csvData)).ReadAll()
		if nc == 0 || nc != nj || nj != nl || len(arr) != nj || len(lines) != nl || len(recs)-1 != nc {
			t.Errorf("%s: csv %d rows, json %d (%d parsed), jsonl %d (%d parsed)", table, nc, nj, len(arr), nl, len(lines))
			continue
		}
		for i := range arr {
			for j, col := range recs[0] {
				cell := recs[i+1][j]
				v := arr[i][col]
				var s string
				switch v := v.(type) {
				case nil:
				case string:
					s = v
				case float64:
					s = strconv.FormatFloat(v, 'f', -1, 64)
				case bool:
					s = strconv.FormatBool(v)
				}
				if s != cell {
					t.Fatalf("%s row %d %s: json %v, csv %q", table, i, col, v, cell)
				}
			}
		}
	}
}

func TestFixtureBlocksAndSegments(t *testing.T) {
	fx := testsnap.Build(t)
	var blocks, allocated int
	for _, seg := range fx.Snapshot.Segments {
		blocks += len(seg.Blocks)
	}
	data, _ := export(t, fx.Snapshot, Options{Table: Blocks, Format: CSV, Device: -1})
	rows := readCSV(t, data, BlockColumns)
	if len(rows) != blocks {
		t.Fatalf("%d block rows, want %d", len(rows), blocks)
	}
	var bytesAllocated int64
	for _, r := range rows {
		if r["state"] == "active_allocated" {
			allocated++
			n, _ := strconv.ParseInt(r["size"], 10, 64)
			bytesAllocated += n
		}
	}
	if allocated != testsnap.WeightCount+testsnap.BiasCount || bytesAllocated != testsnap.FinalAllocated {
		t.Errorf("%d allocated blocks of %d bytes, want %d of %d", allocated, bytesAllocated, testsnap.WeightCount+testsnap.BiasCount, testsnap.FinalAllocated)
	}
	data, _ = export(t, fx.Snapshot, Options{Table: Segments, Format: CSV, Device: -1})
	if segs := readCSV(t, data, SegmentColumns); len(segs) != len(fx.Snapshot.Segments) {
		t.Errorf("%d segment rows, want %d", len(segs), len(fx.Snapshot.Segments))
	}
	// Another device has nothing.
	if _, n := export(t, fx.Snapshot, Options{Table: Blocks, Format: CSV, Device: 3}); n != 0 {
		t.Errorf("device 3 has %d blocks", n)
	}
}

// TestRealRoundTrip: every real snapshot exports one event row per trace
// entry and one block row per block, and the CSV parses back.
func TestRealRoundTrip(t *testing.T) {
	for _, f := range realdata.Files(t) {
		s, err := snapshot.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		var entries, blocks int
		for _, tr := range s.Traces {
			entries += tr.Len()
		}
		for _, seg := range s.Segments {
			blocks += len(seg.Blocks)
		}
		data, n := export(t, s, Options{Table: Events, Format: CSV, Device: -1})
		if rows := readCSV(t, data, EventColumns); len(rows) != entries || n != entries {
			t.Errorf("%s: %d event rows, want %d", f, len(rows), entries)
		}
		data, _ = export(t, s, Options{Table: Blocks, Format: CSV, Device: -1})
		if rows := readCSV(t, data, BlockColumns); len(rows) != blocks {
			t.Errorf("%s: %d block rows, want %d", f, len(rows), blocks)
		}
	}
}

// failingWriter fails after n bytes.
type failingWriter struct{ n int }

var errFull = errors.New("disk full")

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n -= len(p); w.n < 0 {
		return 0, errFull
	}
	return len(p), nil
}

func TestWriteErrorStops(t *testing.T) {
	fx := testsnap.Build(t)
	for _, f := range []Format{CSV, JSON, JSONL} {
		_, err := Write(&failingWriter{n: 300}, fx.Snapshot, Options{Table: Events, Format: f, Device: -1})
		if !errors.Is(err, errFull) {
			t.Errorf("%s: err = %v, want the writer's error", f, err)
		}
	}
}

// TestEventsTakeStartScan: the events of a snapshot read with the start
// rebuild's pass beside the reading, their replay taking it
// (Options.StartScan), are the events of a snapshot read without, byte
// for byte, on every published file.
func TestEventsTakeStartScan(t *testing.T) {
	for _, f := range realdata.Files(t) {
		plain, err := snapshot.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		s, scan := fixture.LoadScanned(t, f)
		var want, got bytes.Buffer
		if _, err := Write(&want, plain, Options{Table: Events, Format: CSV, Device: -1}); err != nil {
			t.Fatal(err)
		}
		if _, err := Write(&got, s, Options{Table: Events, Format: CSV, Device: -1, StartScan: scan}); err != nil {
			t.Fatal(err)
		}
		scan.Stop()
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Errorf("%s: the events with the scan taken differ", filepath.Base(f))
		}
	}
}
