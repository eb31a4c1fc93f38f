package snapshot

import (
	"bytes"
	"strings"
	"testing"
)

// memstat record's "memstat" key reads back as written; a snapshot
// without it has no Recorder.
func TestRecorderRoundTrip(t *testing.T) {
	for name, s := range handBuilt() {
		want := &Recorder{Tool: "memstat record", Workload: "train", TimeModel: "modelled: " + name}
		s.Recorder = want
		var buf bytes.Buffer
		if err := Write(&buf, s); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		back, err := Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if back.Recorder == nil || *back.Recorder != *want {
			t.Errorf("%s: Recorder reads back as %+v, want %+v", name, back.Recorder, want)
		}
		s.Recorder = nil
		buf.Reset()
		if err := Write(&buf, s); err != nil {
			t.Fatal(err)
		}
		if back, _ := Read(bytes.NewReader(buf.Bytes()), int64(buf.Len())); back == nil || back.Recorder != nil {
			t.Errorf("%s: a file without the key reads back with Recorder %+v", name, back)
		}
	}
}

// A hostile "memstat" key: texts are cut, other kinds ignored.
func TestRecorderHostile(t *testing.T) {
	s := handBuilt()["empty"]
	s.Recorder = &Recorder{Tool: strings.Repeat("x", 100000), Workload: "w", TimeModel: "t"}
	var buf bytes.Buffer
	if err := Write(&buf, s); err != nil {
		t.Fatal(err)
	}
	back, err := Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if back.Recorder == nil || len(back.Recorder.Tool) != 500 || back.Recorder.Workload != "w" {
		t.Errorf("Recorder %+v: want Tool cut to 500 bytes", back.Recorder)
	}
}
