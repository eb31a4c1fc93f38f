//go:build unix

package replay

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/memstat/memstat/pkg/snapshot"
)

// cpuTime is the process's user and system CPU time so far: on a machine
// shared with other work, a benchmark's CPU per operation varies less than
// its wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFollow replays device 0 of the snapshot MEMSTAT_BENCH_FILE
// names (skipped without one), as stats does: New (the start state
// rebuilt and seeded) and Run (the step loop and the result), the file
// decoded once outside the timing; new-ns/op and run-ns/op are the wall
// time of each. Profile it with
//
//	MEMSTAT_BENCH_FILE=bench/out/torch-100MB.pickle go test -run '^$' \
//	  -bench Follow -cpuprofile cpu.out ./pkg/replay
func BenchmarkFollow(b *testing.B) {
	s := benchSnapshot(b)
	b.ReportAllocs()
	start := cpuTime()
	var inNew, inRun time.Duration
	for b.Loop() {
		t0 := time.Now()
		r, err := New(s, Options{})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := r.Run(); err != nil {
			b.Fatal(err)
		}
		inNew, inRun = inNew+t1.Sub(t0), inRun+time.Since(t1)
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
	// The wall time of each phase, to tell which one a change moved.
	b.ReportMetric(float64(inNew)/float64(b.N), "new-ns/op")
	b.ReportMetric(float64(inRun)/float64(b.N), "run-ns/op")
}

// BenchmarkWhatIf replays device 0 of MEMSTAT_BENCH_FILE under its own
// settings from a follow replay's recording, as `memstat replay`'s second
// replay does (the follow replay run once, outside the timing): New (the
// starting state allocated in the simulator) and Run.
func BenchmarkWhatIf(b *testing.B) {
	s := benchSnapshot(b)
	fr, err := New(s, Options{KeepStart: true})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := fr.Run(); err != nil {
		b.Fatal(err)
	}
	rec, err := fr.Recording()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		r, err := New(s, Options{Mode: WhatIf, Recording: rec})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Run(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// benchSnapshot is the snapshot MEMSTAT_BENCH_FILE names, decoded once
// outside the timing (the benchmark is skipped without one).
func benchSnapshot(b *testing.B) *snapshot.Snapshot {
	b.Helper()
	file := os.Getenv("MEMSTAT_BENCH_FILE")
	if file == "" {
		b.Skip("MEMSTAT_BENCH_FILE is not set: it names the snapshot to replay")
	}
	s, err := snapshot.Load(file)
	if err != nil {
		b.Fatal(err)
	}
	return s
}
