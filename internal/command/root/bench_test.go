package root

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/command"
	"github.com/memstat/memstat/internal/iostreams"
)

// benchCommands are the commands BenchmarkCommand runs on a snapshot, as
// memstat is run (output discarded). Profile one with
//
//	MEMSTAT_BENCH_FILE=bench/out/torch-100MB.pickle go test -run '^$' \
//	  -bench 'Command/trace$' -cpuprofile cpu.out -memprofile mem.out ./internal/command/root
var benchCommands = [][]string{
	{"stats"},
	{"peak"},
	{"oom"},
	{"segments"},
	{"trace"},
	{"trace", "--json"},
	{"trace", "--stream"},
	{"replay"},
	{"diff", "FILE"},
	{"report", "-o", "OUT/report.html"},
	{"plot", "-o", "OUT/plot.png"},
	{"pprof", "-o", "OUT/profile.pb.gz"},
	{"export", "-o", "OUT/events.csv"},
	{"advise"},
	{"check", "--max", "peak_allocated=1000TiB"},
}

// BenchmarkCommand runs each command on the snapshot MEMSTAT_BENCH_FILE
// names (skipped without one), through Main as the binary does.
func BenchmarkCommand(b *testing.B) {
	file := os.Getenv("MEMSTAT_BENCH_FILE")
	if file == "" {
		b.Skip("MEMSTAT_BENCH_FILE is not set: it names the snapshot the commands run on")
	}
	out := b.TempDir()
	for _, c := range benchCommands {
		name := strings.Join(c, " ")
		b.Run(name, func(b *testing.B) {
			args := []string{c[0]}
			for _, a := range c[1:] {
				a = strings.ReplaceAll(a, "OUT/", out+string(filepath.Separator))
				if a == "FILE" {
					a = file
				}
				args = append(args, a)
			}
			args = append(args, file)
			b.ReportAllocs()
			for b.Loop() {
				ios := &iostreams.IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: io.Discard}
				if code := Main(&command.Factory{IO: ios, Getenv: func(string) string { return "" }}, args); code != command.ExitOK {
					b.Fatalf("memstat %s: exit %d", strings.Join(args, " "), code)
				}
			}
		})
	}
}
