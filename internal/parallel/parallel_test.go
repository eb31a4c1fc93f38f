package parallel

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestMapKeepsOrderWithinBudgetAndJobs: results come back in file order;
// the files worked on at once never exceed the jobs or the budget (a file
// larger than the budget runs alone).
func TestMapKeepsOrderWithinBudgetAndJobs(t *testing.T) {
	costs := []int64{30, 50, 20, 100, 250, 10, 40, 40, 40, 90, 5, 60}
	files := make([]string, len(costs))
	for i := range files {
		files[i] = strconv.Itoa(i)
	}
	for _, jobs := range []int{1, 2, 3, 8} {
		t.Run(fmt.Sprintf("jobs=%d", jobs), func(t *testing.T) {
			var mu sync.Mutex
			running, inUse, maxRunning := 0, int64(0), 0
			var overBudget []string
			const budget = 100
			opts := Options{Jobs: jobs, Budget: budget, Cost: func(f string) int64 {
				i, _ := strconv.Atoi(f)
				return costs[i]
			}}
			got, err := Map(files, opts, func(i int, f string) (string, error) {
				c := min(costs[i], budget)
				mu.Lock()
				running++
				inUse += c
				maxRunning = max(maxRunning, running)
				if inUse > budget {
					overBudget = append(overBudget, f)
				}
				mu.Unlock()
				// Vary the finishing order.
				time.Sleep(time.Duration((i*7)%5) * time.Millisecond)
				mu.Lock()
				running--
				inUse -= c
				mu.Unlock()
				return "r" + f, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range got {
				if r != "r"+files[i] {
					t.Fatalf("result %d is %q", i, r)
				}
			}
			if maxRunning > jobs {
				t.Errorf("%d files at once with %d jobs", maxRunning, jobs)
			}
			if len(overBudget) > 0 {
				t.Errorf("over the budget while working on %v", overBudget)
			}
		})
	}
}

// TestMapReportsTheFirstFailingFile: the error is that of the first file
// in order that fails, whatever order the failures happen in; one file at
// a time, the files after a failed one do not run.
func TestMapReportsTheFirstFailingFile(t *testing.T) {
	files := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, jobs := range []int{1, 3} {
		var mu sync.Mutex
		var ran []string
		got, err := Map(files, Options{Jobs: jobs, Budget: 1 << 30, Cost: func(string) int64 { return 1 }}, func(i int, f string) (int, error) {
			mu.Lock()
			ran = append(ran, f)
			mu.Unlock()
			switch f {
			case "c":
				time.Sleep(20 * time.Millisecond) // usually fails after d
				return 0, errors.New("c failed")
			case "d":
				return 0, errors.New("d failed")
			}
			return i, nil
		})
		if err == nil || err.Error() != "c failed" {
			t.Fatalf("jobs=%d: error %v, want c's", jobs, err)
		}
		if fmt.Sprint(got) != "[0 1]" {
			t.Errorf("jobs=%d: results %v, want those of a and b", jobs, got)
		}
		if jobs == 1 && fmt.Sprint(ran) != "[a b c]" {
			t.Errorf("one at a time, ran %v, want [a b c]", ran)
		}
	}
}

func TestMapNoFiles(t *testing.T) {
	got, err := Map(nil, Options{}, func(int, string) (int, error) { return 1, nil })
	if err != nil || len(got) != 0 {
		t.Fatalf("%v %v", got, err)
	}
}

func TestEstimateCost(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "a.pickle")
	gz := filepath.Join(dir, "a.pickle.gz")
	if err := os.WriteFile(plain, make([]byte, 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gz, append([]byte{0x1f, 0x8b}, make([]byte, 998)...), 0o644); err != nil {
		t.Fatal(err)
	}
	if c := EstimateCost(plain); c != costBase+costPerByte*1000 {
		t.Errorf("plain: %d", c)
	}
	if c := EstimateCost(gz); c != costBase+costPerByte*gzipExpansion*1000 {
		t.Errorf("gzip: %d", c)
	}
	if c := EstimateCost("-"); c < 1<<60 {
		t.Errorf("stdin: %d, want the whole budget", c)
	}
	if c := EstimateCost(filepath.Join(dir, "missing")); c < 1<<60 {
		t.Errorf("missing: %d, want the whole budget", c)
	}
	if _, err := os.Stat("/proc/meminfo"); err == nil && AvailableMemory() <= 0 {
		t.Errorf("no available memory read from /proc/meminfo")
	}
	if DefaultBudget() <= 0 {
		t.Errorf("budget %d", DefaultBudget())
	}
}
