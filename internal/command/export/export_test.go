package export

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/internal/testsnap"
	"github.com/memstat/memstat/pkg/snapshot"
)

func execExport(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ios, _, out, errOut := iostreams.Test()
	cmd := NewCmdExport(&command.Factory{IO: ios}, nil)
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

func fixture(t *testing.T) (string, *snapshot.Snapshot) {
	t.Helper()
	s := testsnap.Build(t).Snapshot
	path := filepath.Join(t.TempDir(), "fixture.pickle")
	if err := snapshot.WriteFile(path, s); err != nil {
		t.Fatal(err)
	}
	// What the file reads back as is what the command sees.
	back, err := snapshot.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, back
}

func TestFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"a.pickle", "--format", "xml"}, "--format"},
		{[]string{"a.pickle", "--what", "frames"}, "--what"},
		{[]string{}, "want one snapshot"},
	} {
		ios, _, _, _ := iostreams.Test()
		cmd := NewCmdExport(&command.Factory{IO: ios}, func(*Options) error { return nil })
		cmd.SetArgs(c.args)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetOut(io.Discard)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

func TestStdoutAndFile(t *testing.T) {
	in, s := fixture(t)
	stdout, _, err := execExport(t, in)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs)-1 != s.Traces[0].Len() || recs[0][0] != "device" {
		t.Errorf("%d CSV rows for %d trace entries; header %v", len(recs)-1, s.Traces[0].Len(), recs[0])
	}
	out := filepath.Join(t.TempDir(), "blocks.json")
	if stdout, _, err := execExport(t, in, "--what", "blocks", "--format", "json", "-o", out); err != nil || stdout != "" {
		t.Fatalf("err %v, stdout %q", err, stdout)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(data, &rows); err != nil {
		t.Fatal(err)
	}
	var blocks int
	for _, seg := range s.Segments {
		blocks += len(seg.Blocks)
	}
	if len(rows) != blocks {
		t.Errorf("%d block rows, want %d", len(rows), blocks)
	}
	if _, _, err := execExport(t, in, "--device", "7"); err == nil || !strings.Contains(err.Error(), "device 7") {
		t.Errorf("--device 7: %v", err)
	}
}

// TestRealEvents: a real training trace exports one CSV row per entry as
// JSON Lines too, and both agree on the row count.
func TestRealEvents(t *testing.T) {
	in := realdata.File(t, "sidsoc12")
	s, err := snapshot.Load(in)
	if err != nil {
		t.Fatal(err)
	}
	stdout, _, err := execExport(t, in, "--format", "jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace([]byte(stdout)), []byte("\n"))
	if len(lines) != s.Traces[0].Len() {
		t.Fatalf("%d JSON lines, want %d", len(lines), s.Traces[0].Len())
	}
	var first map[string]any
	if err := json.Unmarshal(lines[0], &first); err != nil || first["action"] != "alloc" || first["segment"] == nil {
		t.Errorf("first line %s: %v", lines[0], err)
	}
}

// TestStacksResolveStackIDs: every stack_id of the events and blocks
// tables has its frames in --what stacks, depths 0, 1, ... in order, and
// the event's top_function is one of them, shown by default (a frame of
// the stack peak names it by). Run on the fixture and on a published
// snapshot recorded with C++ frames.
func TestStacksResolveStackIDs(t *testing.T) {
	fx, _ := fixture(t)
	files := []string{fx}
	if fs := realdata.FilesIfPresent(); len(fs) > 0 {
		files = append(files, realdata.File(t, "silmont2000"))
	} else {
		t.Log("published snapshots absent (../shared/testdata/real): stacks checked on the fixture only")
	}
	for _, in := range files {
		out, _, err := execExport(t, in, "--what", "stacks")
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil || len(rows) < 2 || strings.Join(rows[0], ",") != "stack_id,depth,function,file,line,kind,shown" {
			t.Fatalf("%s: %v\n%.500s", in, err, out)
		}
		type frame struct{ function, shown string }
		stacks := map[string][]frame{}
		for _, r := range rows[1:] {
			if want := len(stacks[r[0]]); r[1] != itoa(want) {
				t.Fatalf("%s: stack %s: depth %s after %d frames", in, r[0], r[1], want)
			}
			stacks[r[0]] = append(stacks[r[0]], frame{r[2], r[6]})
		}
		for _, what := range []string{"events", "blocks"} {
			out, _, err := execExport(t, in, "--what", what)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			col := map[string]int{}
			for i, c := range rows[0] {
				col[c] = i
			}
			for _, r := range rows[1:] {
				id, top := r[col["stack_id"]], r[col["top_function"]]
				if id == "" {
					continue
				}
				fs, ok := stacks[id]
				if !ok {
					t.Fatalf("%s: %s: stack_id %s is not in --what stacks", in, what, id)
				}
				found := top == ""
				for _, f := range fs {
					found = found || (f.function == top && f.shown == "true")
				}
				if !found {
					t.Fatalf("%s: %s: top_function %q is not a shown frame of stack %s", in, what, top, id)
				}
			}
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
