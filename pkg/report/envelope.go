package report

// SchemaVersion is the version of the JSON every command writes with
// --json (documented in README.md, "JSON output", and in schema.json).
// Adding a field keeps it; removing, renaming or retyping one, or changing
// the envelope, bumps it (and schema.json's const with it).
const SchemaVersion = 1

// Envelope is the top level of every command's --json: which version of
// the shape, which command, what it was given, and its results per file
// and per device. Scripts read `.results[].devices[]` whatever the command.
type Envelope struct {
	SchemaVersion int    `json:"schema_version"`
	Command       string `json:"command"`
	Inputs        Inputs `json:"inputs"`
	// Results holds one entry per input file (for diff, per pair), in the
	// order given.
	Results []FileResult `json:"results"`
	// Summary holds what is about all files together (stats' rank spread,
	// check's totals, advise's ranking note); omitted when there is none.
	Summary any `json:"summary,omitempty"`
}

// Inputs are what the command was given: the snapshot files in the order
// named, and the flags set on the command line (as typed; defaults are
// not listed; --json and --format are left out).
type Inputs struct {
	Files   []string          `json:"files"`
	Options map[string]string `json:"options"`
}

// FileResult is one file's results: Devices is the command's list of
// per-device records, each an object with at least "device" (an int).
type FileResult struct {
	File string `json:"file"`
	// Before is diff's baseline snapshot (File is the one compared with
	// it).
	Before string `json:"before,omitempty"`
	// Note says why Devices is empty when it is (no device has a trace).
	Note    string `json:"note,omitempty"`
	Devices any    `json:"devices"`
}

// JSONLHeader is the first line of a JSON Lines output (trace --json):
// the envelope without its results, with Record "header". Each line after
// it is one object with "record" naming what it is and "file" and
// "device" saying whose it is (see README.md, "JSON Lines").
type JSONLHeader struct {
	Record        string `json:"record"`
	SchemaVersion int    `json:"schema_version"`
	Command       string `json:"command"`
	Inputs        Inputs `json:"inputs"`
}
