package stats

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
	"github.com/memstat/memstat/internal/testsnap"
	"github.com/memstat/memstat/pkg/snapshot"
)

// TestSparklineOnTerminal: on a terminal, stats draws allocated memory over
// the trace under the headline; in a pipe it does not.
func TestSparklineOnTerminal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fixture.pickle")
	if err := snapshot.WriteFile(path, testsnap.Build(t).Snapshot); err != nil {
		t.Fatal(err)
	}
	for _, tty := range []bool{true, false} {
		ios, _, out, _ := iostreams.Test()
		ios.SetStdoutTTY(tty)
		cmd := NewCmdStats(&command.Factory{IO: ios}, nil)
		cmd.SetArgs([]string{path})
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(out.String(), "\n")
		has := strings.Contains(out.String(), "allocated over the trace")
		if has != tty {
			t.Fatalf("tty %v: sparkline shown %v:\n%s", tty, has, out.String())
		}
		if !tty {
			continue
		}
		// Title, headline, then the sparkline: the spike of the second
		// step is the only full block.
		spark := lines[2]
		if !strings.HasPrefix(spark, "allocated over the trace ") || strings.Count(spark, "█") < 1 || !strings.HasSuffix(spark, "(0 to 1.7 GiB)") {
			t.Errorf("sparkline line %q", spark)
		}
	}
}
