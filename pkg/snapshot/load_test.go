package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/realdata"
)

// modelText prints a snapshot like testdata/model.py.
func modelText(s *Snapshot) string {
	var b strings.Builder
	hash := func(id StackID) string {
		frames := s.Stacks.Frames(id)
		if len(frames) == 0 {
			return ""
		}
		var lines []string
		for _, f := range frames {
			lines = append(lines, fmt.Sprintf("%s\t%s\t%d", f.Name, f.Filename, f.Line))
		}
		h := sha256.Sum256([]byte(strings.Join(lines, "\n")))
		return hex.EncodeToString(h[:])[:16]
	}
	title := func(x bool) string {
		if x {
			return "True"
		}
		return "False"
	}
	for _, sg := range s.Segments {
		fmt.Fprintf(&b, "seg|%d|%d|%d|%d|%d|%d|%d|%s|%d,%d|%s|%s\n", sg.Device, sg.Address, sg.TotalSize,
			sg.AllocatedSize, sg.ActiveSize, sg.RequestedSize, sg.Stream, sg.Pool, sg.PoolID[0], sg.PoolID[1],
			title(sg.Expandable), hash(sg.Stack))
		for _, bl := range sg.Blocks {
			fmt.Fprintf(&b, "blk|%d|%d|%d|%s|%s\n", bl.Address, bl.Size, bl.RequestedSize, bl.State, hash(bl.Stack))
		}
	}
	for dev, tr := range s.Traces {
		for _, e := range tr.All() {
			fmt.Fprintf(&b, "ev|%d|%s|%d|%d|%d|%d|%s|%s|%s\n", dev, e.Action, e.Addr, e.Size, s.Stream(&e), e.TimeUS,
				hash(e.Stack), s.String(s.Context(&e).CompileContext), s.String(s.Context(&e).UserMetadata))
		}
	}
	return b.String()
}

// TestModelAgreesWithPythonOnRealSnapshots loads every real snapshot and
// compares the whole model (segments, blocks, trace entries, stacks) with
// what an independent Python reading of the same file gives.
func TestModelAgreesWithPythonOnRealSnapshots(t *testing.T) {
	files := realdata.Files(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s, err := Load(f)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			out, err := exec.Command(py, "testdata/model.py", f).Output()
			if err != nil {
				t.Fatalf("model.py: %v", err)
			}
			got, want := strings.Split(modelText(s), "\n"), strings.Split(string(out), "\n")
			for i := 0; i < len(got) && i < len(want); i++ {
				if got[i] != want[i] {
					t.Fatalf("line %d differs:\n got: %s\nwant: %s", i+1, got[i], want[i])
				}
			}
			if len(got) != len(want) {
				t.Fatalf("%d lines, python gives %d", len(got), len(want))
			}
			if len(s.Warnings) > 0 {
				t.Logf("warnings: %v", s.Warnings)
			}
		})
	}
}
