package root

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/internal/schemacheck"
	"github.com/memstat/memstat/internal/testsnap"
	"github.com/memstat/memstat/pkg/report"
	"github.com/memstat/memstat/pkg/snapshot"
)

// schemaFile is the documented schema of every command's --json.
const schemaFile = "../../../docs/output.schema.json"

// jsonRuns are the runs of each command whose --json the schema must
// hold: key is the command, each run the arguments after it (FILE and
// OTHER stand for two snapshots).
var jsonRuns = map[string][][]string{
	"stats":    {{"FILE"}, {"FILE", "OTHER"}, {"--summary", "FILE", "OTHER"}, {"--runtime-settings", "FILE"}, {"--captures", "FILE"}},
	"peak":     {{"FILE"}, {"--by", "file", "--stacks", "FILE"}},
	"oom":      {{"FILE"}, {"--stacks", "FILE"}},
	"segments": {{"FILE"}, {"--at", "peak", "FILE"}},
	"trace":    {{"FILE"}, {"--action", "alloc", "--all-frames", "FILE"}, {"--stream", "FILE"}, {"--stream", "--action", "alloc", "FILE"}},
	"diff":     {{"FILE", "OTHER"}, {"--stacks", "FILE", "OTHER", "OTHER", "FILE"}, {"--runtime-settings", "FILE", "OTHER"}, {"--captures", "FILE", "OTHER"}},
	"replay":   {{"FILE"}, {"--alloc-conf", "expandable_segments:True", "FILE"}, {"--runtime-settings", "FILE"}, {"--captures", "FILE"}},
	"advise":   {{"FILE"}},
	"check":    {{"--max", "ooms=0", "FILE"}, {"--max", "peak_reserved=1GB", "FILE", "OTHER"}, {"--runtime-settings", "--max", "peak_allocated=1GB", "FILE"}, {"--captures", "--max", "ooms=0", "FILE"}},
}

// TestEveryJSONCommandHasASchemaTest: each command with --json is in
// jsonRuns, so a new command cannot skip the schema.
func TestEveryJSONCommandHasASchemaTest(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	root := NewCmdRoot(&command.Factory{IO: ios, Getenv: func(string) string { return "" }})
	var missing []string
	for _, c := range root.Commands() {
		if c.Flags().Lookup("json") != nil && jsonRuns[c.Name()] == nil {
			missing = append(missing, c.Name())
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("commands with --json but no schema test in jsonRuns: %s", strings.Join(missing, ", "))
	}
}

// TestJSONMatchesSchema: every command's --json, on the recorded test
// snapshot and on a published one, validates against
// docs/output.schema.json, names the command and the schema version,
// and lists the files it was given as inputs.
func TestJSONMatchesSchema(t *testing.T) {
	sch, err := schemacheck.Load(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	recorded := filepath.Join(dir, "recorded.pickle")
	if err := snapshot.WriteFile(recorded, testsnap.Build(t).Snapshot); err != nil {
		t.Fatal(err)
	}
	// Recordings with private pools: at 2.8 the trace leaves some
	// segments' pool open (the pools' peaks are bounds); an OOM while a
	// graph's pool holds free memory.
	graphs, _ := fixture.RecordFile(t, "cuda_graphs.mem", "graphs.pickle", "--torch-version", "2.8")
	poolOOM, _ := fixture.RecordFile(t, "pool_oom.mem", "pool_oom.pickle", "--device-memory", "1GiB")
	// A cache hit whose split decision depends on expandable_segments:
	// the figures' assumption (without --runtime-settings) or bounds.
	split, _ := fixture.RecordFile(t, "split_setting.mem", "split.pickle")
	pairs := [][2]string{{recorded, recorded}, {graphs, poolOOM}, {poolOOM, graphs}, {split, recorded}}
	if files := realdata.FilesIfPresent(); len(files) > 0 {
		for _, f := range files {
			if strings.Contains(f, "Nesta-gitU") {
				pairs = append(pairs, [2]string{f, recorded})
			}
		}
	} else {
		t.Log("published snapshots absent (../shared/testdata/real): schema checked on the recorded snapshot only")
	}
	names := make([]string, 0, len(jsonRuns))
	for name := range jsonRuns {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			for _, files := range pairs {
				for _, run := range jsonRuns[name] {
					args := []string{name, "--json"}
					for _, a := range run {
						switch a {
						case "FILE":
							a = files[0]
						case "OTHER":
							a = files[1]
						}
						args = append(args, a)
					}
					code, out, errOut := runMain(args...)
					if code != 0 && !(name == "check" && code == 1) {
						t.Fatalf("%v: exit %d: %s", args, code, errOut)
					}
					if name == "trace" {
						checkLines(t, sch, args, out)
						continue
					}
					if err := sch.Validate([]byte(out), ""); err != nil {
						t.Errorf("%v: %v", args, err)
					}
					if !strings.Contains(out, `"command": "`+name+`"`) || !strings.Contains(out, `"schema_version": 1`) {
						t.Errorf("%v: envelope does not name the command and version:\n%.300s", args, out)
					}
					// The assumptions are carried where they are made (the
					// split recording: no runtime switch; the hand-built
					// one's oom: no capture underway), not with the option
					// that drops them.
					if files[0] == split || files[0] == recorded {
						assumes := (files[0] == split && !slices.Contains(run, "--runtime-settings") ||
							(files[0] == recorded || name == "diff" && files[1] == recorded) && !slices.Contains(run, "--captures")) &&
							slices.Contains([]string{"stats", "replay", "check", "diff"}, name) && !slices.Contains(run, "--summary")
						if assumes != strings.Contains(out, `"assumptions`) {
							t.Errorf("%v: assumptions in the output %v, want %v", args, !assumes, assumes)
						}
					}
				}
			}
		})
	}
}

// TestSchemaCatchesWrongShapes: the schema (and its checker) fail a
// document with a field of the wrong type, one missing, or an envelope
// that is not this version's.
func TestSchemaCatchesWrongShapes(t *testing.T) {
	sch, err := schemacheck.Load(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	good := `{"schema_version":1,"command":"peak","inputs":{"files":["a"],"options":{}},"results":[{"file":"a","devices":[` +
		`{"device":0,"torch_version":"2.5","coverage":"full","peak_allocated":{"index":1,"allocated_bytes":1,"reserved_bytes":2},` +
		`"peak_reserved":{"index":1,"allocated_bytes":1,"reserved_bytes":2},"live_bytes":1,"by":"stack","groups":[]}]}]}`
	if err := sch.Validate([]byte(good), ""); err != nil {
		t.Fatalf("good document: %v", err)
	}
	for _, bad := range []struct{ from, to string }{
		{`"schema_version":1`, `"schema_version":2`},
		{`"live_bytes":1`, `"live_bytes":"1"`},
		{`"live_bytes":1,`, ``},
		{`"by":"stack"`, `"by":"nothing"`},
		{`"command":"peak"`, `"command":"peek"`},
		{`"results":[`, `"pairs":[],"results":[`},
		{`"device":0`, `"device":-1`},
	} {
		doc := strings.Replace(good, bad.from, bad.to, 1)
		if err := sch.Validate([]byte(doc), ""); err == nil {
			t.Errorf("%s -> %s: validates", bad.from, bad.to)
		}
	}
}

// TestSchemaVersionMatchesTheCode: the schema file's version is the one
// the code writes (report.SchemaVersion): changing one without the other
// fails here.
func TestSchemaVersionMatchesTheCode(t *testing.T) {
	data, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Properties struct {
			SchemaVersion struct {
				Const int `json:"const"`
			} `json:"schema_version"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Properties.SchemaVersion.Const != report.SchemaVersion {
		t.Errorf("%s says schema_version %d, the code writes %d", schemaFile, doc.Properties.SchemaVersion.Const, report.SchemaVersion)
	}
}

// checkLines checks trace's JSON Lines: each line valid against the
// schema's jsonl_line; a header first naming the command; then per device
// a device line, its events and a summary that counts them (or one note).
func checkLines(t *testing.T, sch *schemacheck.Schema, args []string, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var records []string
	events := 0
	for i, l := range lines {
		if err := sch.Validate([]byte(l), "#/$defs/jsonl_line"); err != nil {
			t.Errorf("%v: line %d: %v\n%.300s", args, i+1, err, l)
		}
		var rec struct {
			Record  string `json:"record"`
			Command string `json:"command"`
			Shown   int    `json:"shown"`
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("%v: line %d: %v", args, i+1, err)
		}
		switch rec.Record {
		case "event":
			events++
			if len(records) == 0 || records[len(records)-1] != "event" {
				records = append(records, "event")
			}
			continue
		case "header":
			if rec.Command != args[0] {
				t.Errorf("%v: header names command %q", args, rec.Command)
			}
		case "summary":
			if rec.Shown != events {
				t.Errorf("%v: summary says %d shown, %d event lines", args, rec.Shown, events)
			}
			events = 0
		}
		records = append(records, rec.Record)
	}
	seq := strings.Join(records, " ")
	if slices.Contains(args, "--stream") {
		// What needs the whole file comes in one line at the end.
		var ended bool
		if seq, ended = strings.CutSuffix(seq, " end"); !ended && seq != "header note" {
			t.Errorf("%v: records in the order %s, want an end line last", args, seq)
		}
	}
	ok := seq == "header note"
	if rest, found := strings.CutPrefix(seq, "header "); found && !ok {
		ok = strings.Trim(strings.ReplaceAll(strings.ReplaceAll(rest, "device event summary", ""), "device summary", ""), " ") == ""
	}
	if !ok {
		t.Errorf("%v: records in the order %s, want header, then per device: device, events, summary", args, seq)
	}
}
