// Package parallel runs per-file work (load a snapshot, replay it, keep a
// small result) over many files at once, within a memory budget, and hands
// back the results in the order of the files: `memstat stats rank*.pickle`
// on the snapshots of a distributed job.
//
// Files start in order. Each takes its estimated memory from the budget
// before it starts and gives it back when its work returns, so at most the
// budget's worth of decoded snapshots exists at a time; a file larger than
// the whole budget runs alone. The work function should keep only what it
// needs from a file (its result), so that the file's snapshot is garbage
// as soon as it returns.
package parallel

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// Options tune Map.
type Options struct {
	// Jobs caps how many files are worked on at once; 0 means one per CPU.
	Jobs int
	// Budget is the memory, in bytes, that the files worked on at once may
	// take; 0 means DefaultBudget().
	Budget int64
	// Cost estimates the memory one file's work takes; nil means
	// EstimateCost.
	Cost func(file string) int64
}

// Map calls fn for every file, up to opts.Jobs at once within opts.Budget,
// and returns the results in the order of files. When calls fail it
// returns the error of the first failing file in that order (the error a
// run one file after another would have stopped at) with the results of
// the files before it: files after a failed one are not started, files
// before it still run.
func Map[T any](files []string, opts Options, fn func(i int, file string) (T, error)) ([]T, error) {
	jobs := opts.Jobs
	if jobs <= 0 {
		jobs = runtime.GOMAXPROCS(0)
	}
	jobs = min(jobs, len(files))
	budget := opts.Budget
	if budget <= 0 {
		budget = DefaultBudget()
	}
	cost := opts.Cost
	if cost == nil {
		cost = EstimateCost
	}
	results := make([]T, len(files))
	errs := make([]error, len(files))
	if len(files) == 0 {
		return results, nil
	}

	mem := newSemaphore(budget)
	slots := make(chan struct{}, jobs)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr = len(files) // index of the first failed file so far
	)
	for i, f := range files {
		mu.Lock()
		stop := i > firstErr
		mu.Unlock()
		if stop {
			break
		}
		need := cost(f)
		slots <- struct{}{}
		got := mem.acquire(need)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { mem.release(got); <-slots }()
			mu.Lock()
			skip := i > firstErr
			mu.Unlock()
			if skip {
				return
			}
			r, err := call(fn, i, f)
			if err != nil {
				mu.Lock()
				firstErr = min(firstErr, i)
				mu.Unlock()
				errs[i] = err
				return
			}
			results[i] = r
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return results[:i], err
		}
	}
	return results, nil
}

// call runs fn, turning a panic into an error for that file, so that a
// worker's panic never unwinds into a zero result that the caller prints.
func call[T any](fn func(i int, file string) (T, error), i int, file string) (r T, err error) {
	defer func() {
		if p := Recovered(recover()); p != nil {
			err = &FileError{File: file, Err: p}
		}
	}()
	return fn(i, file)
}

// FileError names the file whose work panicked.
type FileError struct {
	File string
	Err  error
}

func (e *FileError) Error() string { return e.File + ": " + e.Err.Error() }
func (e *FileError) Unwrap() error { return e.Err }

// semaphore is a weighted semaphore: acquire blocks until n of the total
// is free. Callers acquire in file order from one goroutine, so files
// start in order and none waits forever behind later ones.
type semaphore struct {
	mu    sync.Mutex
	cond  *sync.Cond
	free  int64
	total int64
}

func newSemaphore(total int64) *semaphore {
	s := &semaphore{free: total, total: total}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// acquire takes n (at most the total: a file larger than the budget waits
// for all of it and then runs alone) and returns what it took.
func (s *semaphore) acquire(n int64) int64 {
	n = max(min(n, s.total), 0)
	s.mu.Lock()
	for s.free < n {
		s.cond.Wait()
	}
	s.free -= n
	s.mu.Unlock()
	return n
}

func (s *semaphore) release(n int64) {
	s.mu.Lock()
	s.free += n
	s.mu.Unlock()
	s.cond.Broadcast()
}

// Memory a file's work is assumed to take: decoding a snapshot and
// replaying its trace peaks at about 2.5 times the pickle's size (measured
// on generated 100 MB to 1 GB snapshots; see BENCHMARKS.md), so 3 times
// plus a base is a safe estimate. A gzip file is assumed to expand
// gzipExpansion times.
const (
	costPerByte   = 3
	costBase      = 32 << 20
	gzipExpansion = 10
)

// EstimateCost estimates the memory that loading and replaying a snapshot
// file takes, from its size. Standard input ("-") and files it cannot
// stat cost the whole budget: they run alone.
func EstimateCost(file string) int64 {
	if file == "-" {
		return 1 << 62
	}
	st, err := os.Stat(file)
	if err != nil || !st.Mode().IsRegular() {
		return 1 << 62
	}
	size := st.Size()
	if isGzip(file) {
		size *= gzipExpansion
	}
	return costBase + costPerByte*size
}

func isGzip(file string) bool {
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [2]byte
	n, _ := f.Read(magic[:])
	return n == 2 && magic == [2]byte{0x1f, 0x8b}
}

// DefaultBudget is three quarters of the memory available to the process:
// MemAvailable from /proc/meminfo, or the cgroup's limit when that is
// lower; 4 GiB when neither can be read.
func DefaultBudget() int64 {
	avail := AvailableMemory()
	if avail <= 0 {
		return 4 << 30
	}
	return avail / 4 * 3
}

// AvailableMemory returns the memory the process can still use, in bytes,
// or 0 when it cannot tell (not Linux).
func AvailableMemory() int64 {
	avail := meminfoAvailable()
	if limit, used := cgroupMemory(); limit > 0 {
		if left := limit - used; avail <= 0 || left < avail {
			avail = max(left, 0)
		}
	}
	return avail
}

func meminfoAvailable() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// MemAvailable:   23061284 kB
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// cgroupMemory returns the cgroup v2 memory limit and usage (0, 0 when
// there is no limit or no cgroup v2).
func cgroupMemory() (limit, used int64) {
	read := func(name string) int64 {
		data, err := os.ReadFile("/sys/fs/cgroup/" + name)
		if err != nil {
			return 0
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			return 0 // "max": no limit
		}
		return n
	}
	limit = read("memory.max")
	if limit <= 0 {
		return 0, 0
	}
	return limit, read("memory.current")
}
