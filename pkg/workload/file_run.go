package workload

import (
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/memstat/memstat/internal/textfile"
	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/report"
)

// The workload budget: what one file may make memstat do, so that a typo
// like `repeat 10**12` (or a 40-byte hostile file) fails with a message
// naming the limit instead of hanging or filling the memory and the disk.
// Variables so that tests can lower them.
var (
	// maxStatements bounds the statements executed and loop iterations
	// run (an empty loop counts too).
	maxStatements = 20_000_000
	// maxAllocatorCalls bounds the allocations, frees and other allocator
	// calls: each adds up to three trace entries to the recording (an alloc
	// that rebinds a name frees the old tensor), measured at about 150
	// bytes of written snapshot and 500 bytes of memory per call.
	maxAllocatorCalls = 1_000_000
	// maxPrintBytes bounds what print() writes.
	maxPrintBytes = 64 << 20
)

// Check runs the file without a device: every name, expression and call
// argument is checked, so that a mistake anywhere is reported (as a
// *FileError) before anything runs or prints.
func (f *File) Check() error {
	r := &runner{f: f, vars: map[string]int64{}, tensors: map[string]Tensor{}, pools: map[string]Pool{}}
	return r.run(f.body)
}

// Run runs the file on the device. It checks the file first; an error
// stops the workload before anything happens.
func (f *File) Run(e *Env) {
	if err := f.Check(); err != nil {
		e.Fail(err)
		return
	}
	defer e.Call(f.frameFile(), "<module>", 1)()
	r := &runner{f: f, e: e, vars: map[string]int64{}, tensors: map[string]Tensor{}, pools: map[string]Pool{}}
	if err := r.run(f.body); err != nil {
		e.Fail(err)
	}
}

// runner executes statements; without an Env (e == nil) it only checks
// them: names are tracked, nothing is allocated or printed.
type runner struct {
	f       *File
	e       *Env
	vars    map[string]int64
	tensors map[string]Tensor
	// pools maps graph and MemPool names to their pools (the zero Pool
	// while only checking).
	pools   map[string]Pool
	ops     int
	calls   int
	printed int
}

// step counts one statement or loop iteration against maxStatements.
func (r *runner) step(s stmt) error {
	if r.ops++; r.ops > maxStatements {
		return r.errorf(s, "more than %d statements and loop iterations executed (the workload budget); is a repeat count too large?", maxStatements)
	}
	return nil
}

// allocatorCall counts one call on the allocator against
// maxAllocatorCalls.
func (r *runner) allocatorCall(s stmt) error {
	if r.calls++; r.calls > maxAllocatorCalls {
		return r.errorf(s, "more than %d allocator calls (alloc, free, torch.cuda.*) executed (the workload budget); is a repeat count too large?", maxAllocatorCalls)
	}
	return nil
}

// output writes printed text within maxPrintBytes.
func (r *runner) output(s stmt, text string) error {
	if err := r.countOutput(s, len(text)+1); err != nil {
		return err
	}
	if r.e != nil {
		fmt.Fprintln(r.e.Out(), text)
	}
	return nil
}

func (r *runner) countOutput(s stmt, n int) error {
	if r.printed += n; r.printed > maxPrintBytes {
		return r.errorf(s, "more than %d bytes printed (the workload budget)", maxPrintBytes)
	}
	return nil
}

func (r *runner) errorf(s stmt, format string, args ...any) error {
	return &FileError{Path: r.f.Path, Line: s.lineNo(), Msg: fmt.Sprintf(format, args...)}
}

func (r *runner) stopped() bool { return r.e != nil && r.e.Stopped() }

func (r *runner) run(body []stmt) error {
	for _, s := range body {
		if r.stopped() {
			return nil
		}
		if err := r.step(s); err != nil {
			return err
		}
		if r.e != nil {
			r.e.Line(int64(s.lineNo()))
		}
		if err := r.exec(s); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) eval(s stmt, x expr) (int64, error) {
	v, err := x.eval(r.vars)
	if err != nil {
		return 0, r.errorf(s, "%v", err)
	}
	return v, nil
}

func (r *runner) name(s stmt, n name) (string, error) {
	out := n.lit[0]
	for i, x := range n.exprs {
		v, err := r.eval(s, x)
		if err != nil {
			return "", err
		}
		out += strconv.FormatInt(v, 10) + n.lit[i+1]
	}
	return out, nil
}

// tensor finds a live tensor by name.
func (r *runner) tensor(s stmt, n name) (string, Tensor, error) {
	key, err := r.name(s, n)
	if err != nil {
		return "", Tensor{}, err
	}
	t, ok := r.tensors[key]
	if !ok {
		return "", Tensor{}, r.errorf(s, "unknown tensor %s", textfile.Quote(key))
	}
	return key, t, nil
}

func (r *runner) exec(s stmt) error {
	e := r.e
	switch s := s.(type) {
	case *letStmt:
		v, err := r.eval(s, s.val)
		r.vars[s.name] = v
		return err
	case *allocStmt:
		if err := r.allocatorCall(s); err != nil {
			return err
		}
		key, err := r.name(s, s.name)
		if err != nil {
			return err
		}
		size, err := r.size(s)
		if err != nil {
			return err
		}
		old, rebound := r.tensors[key]
		var t Tensor
		if e != nil {
			t = e.Alloc(size)
			if e.Stopped() {
				return nil
			}
			if rebound {
				e.Free(old) // the name now refers to the new tensor
			}
		}
		r.tensors[key] = t
	case *freeStmt:
		for _, n := range s.names {
			if err := r.allocatorCall(s); err != nil {
				return err
			}
			key, t, err := r.tensor(s, n)
			if err != nil {
				return err
			}
			if e != nil {
				e.Free(t)
			}
			delete(r.tensors, key)
		}
	case *repeatStmt:
		n, err := r.eval(s, s.count)
		if err != nil {
			return err
		}
		if n < 0 {
			return r.errorf(s, "repeat count %d is negative", n)
		}
		for i := range n {
			if i > 0 {
				if err := r.step(s); err != nil {
					return err
				}
			}
			if s.ivar != "" {
				r.vars[s.ivar] = i
			}
			if err := r.run(s.body); err != nil || r.stopped() {
				return err
			}
		}
	case *phaseStmt:
		if e == nil {
			return r.run(s.body)
		}
		end := e.Annotate(s.name)
		pop := e.Call(r.f.frameFile(), s.name, int64(s.line))
		err := r.run(s.body)
		pop()
		end()
		return err
	case *streamStmt:
		st, err := r.eval(s, s.stream)
		if err != nil {
			return err
		}
		if st < 0 {
			return r.errorf(s, "stream %d is negative", st)
		}
		if e == nil {
			return r.run(s.body)
		}
		old := e.SetStream(st)
		err = r.run(s.body)
		e.SetStream(old)
		return err
	case *graphStmt:
		if _, ok := r.pools[s.name]; ok {
			return r.errorf(s, "graph %s is already captured; release it first", textfile.Quote(s.name))
		}
		var p Pool
		if s.share != "" {
			sp, ok := r.pools[s.share]
			if !ok {
				return r.errorf(s, "unknown graph or pool %s", textfile.Quote(s.share))
			}
			p = sp
		} else if e != nil {
			p = e.NewGraphPool()
		}
		if e == nil {
			r.pools[s.name] = p
			return r.run(s.body)
		}
		var err error
		e.Capture(p, func() { err = r.run(s.body) })
		r.pools[s.name] = p
		return err
	case *poolStmt:
		p, ok := r.pools[s.name]
		if !ok {
			if e != nil {
				p = e.NewMemPool()
			}
			r.pools[s.name] = p
		}
		if e == nil {
			return r.run(s.body)
		}
		var err error
		e.UseMemPool(p, func() { err = r.run(s.body) })
		return err
	case *releaseStmt:
		for _, n := range s.names {
			p, ok := r.pools[n]
			if !ok {
				return r.errorf(s, "unknown graph or pool %s", textfile.Quote(n))
			}
			if e != nil {
				e.ReleasePool(p)
			}
			delete(r.pools, n)
		}
	case *elapseStmt:
		if e != nil {
			e.Elapse(s.us)
		}
	case *recordStreamStmt:
		if err := r.allocatorCall(s); err != nil {
			return err
		}
		_, t, err := r.tensor(s, s.name)
		if err != nil {
			return err
		}
		st, err := r.eval(s, s.stream)
		if err != nil {
			return err
		}
		if e != nil {
			e.RecordStream(t, st)
		}
	case *callStmt:
		if err := r.allocatorCall(s); err != nil {
			return err
		}
		return r.call(s)
	case *printStmt:
		return r.print(s)
	default:
		return r.errorf(s, "internal error: unknown statement %T", s)
	}
	return nil
}

// size is the byte size an alloc asks for.
func (r *runner) size(s *allocStmt) (int64, error) {
	if s.dims == nil {
		n, err := r.eval(s, s.size)
		if err == nil && n < 0 {
			err = r.errorf(s, "size %d is negative", n)
		}
		return n, err
	}
	n := s.dtype.Size
	for _, d := range s.dims {
		v, err := r.eval(s, d)
		if err != nil {
			return 0, err
		}
		if v < 0 {
			return 0, r.errorf(s, "negative dimension %d", v)
		}
		if v > 0 && n > (1<<62)/v {
			return 0, r.errorf(s, "tensor size overflows")
		}
		n *= v
	}
	return n, nil
}

// argument lookup helpers: each returns the default when the call does
// not pass the argument.

func (r *runner) intArg(c *callStmt, key string, def int64) (int64, error) {
	for _, a := range c.args {
		if a.key != key {
			continue
		}
		if a.val.kind == vNone {
			return def, nil
		}
		if a.val.kind != vInt {
			return 0, r.errorf(c, "%s(): %s must be an integer, not %s", c.fn, key, a.val.token)
		}
		return r.eval(c, a.val.e)
	}
	return def, nil
}

func (r *runner) strArg(c *callStmt, key string, def string, allowed ...string) (string, bool, error) {
	for _, a := range c.args {
		if a.key != key {
			continue
		}
		if a.val.kind == vNone {
			return "", true, nil
		}
		if a.val.kind != vString || !slices.Contains(allowed, a.val.str) {
			return "", false, r.errorf(c, "%s(): %s must be None or one of %q, not %s", c.fn, key, allowed, a.val.token)
		}
		return a.val.str, false, nil
	}
	return def, false, nil
}

func (r *runner) boolArg(c *callStmt, key string) (bool, error) {
	for _, a := range c.args {
		if a.key == key {
			if a.val.kind != vBool {
				return false, r.errorf(c, "%s(): %s must be True or False, not %s", c.fn, key, a.val.token)
			}
			return a.val.b, nil
		}
	}
	return false, nil
}

// device checks the device argument: only device 0 is simulated.
func (r *runner) device(c *callStmt) error {
	d, err := r.intArg(c, "device", 0)
	if err == nil && d != 0 {
		err = r.errorf(c, "%s(): only device 0 is simulated", c.fn)
	}
	return err
}

func (r *runner) call(c *callStmt) error {
	if err := r.device(c); err != nil {
		return err
	}
	e := r.e
	switch c.fn {
	case "empty_cache":
		if e != nil {
			e.EmptyCache()
		}
	case "synchronize":
		if e != nil {
			e.Synchronize()
		}
	case "reset_peak_memory_stats", "reset_max_memory_allocated":
		if e != nil {
			e.Allocator().ResetPeakStats()
		}
	case "reset_accumulated_memory_stats":
		if e != nil {
			e.Allocator().ResetAccumulatedStats()
		}
	case "set_per_process_memory_fraction":
		var f float64
		var found bool
		for _, a := range c.args {
			if a.key != "fraction" {
				continue
			}
			found = true
			switch a.val.kind {
			case vFloat:
				f = a.val.f
			case vInt:
				n, err := r.eval(c, a.val.e)
				if err != nil {
					return err
				}
				f = float64(n)
			default:
				return r.errorf(c, "set_per_process_memory_fraction(): fraction must be a number, not %s", a.val.token)
			}
		}
		if !found {
			return r.errorf(c, "set_per_process_memory_fraction() missing required argument: 'fraction'")
		}
		if !(f >= 0 && f <= 1) {
			return r.errorf(c, "Invalid fraction value: %v. Allowed range: 0~1", f)
		}
		if e != nil {
			if err := e.Allocator().SetMemoryFraction(f); err != nil {
				return r.errorf(c, "%v", err)
			}
		}
	case "_record_memory_history":
		return r.recordHistory(c)
	case "_set_allocator_settings":
		var conf string
		for _, a := range c.args {
			if a.val.kind != vString {
				return r.errorf(c, "_set_allocator_settings(): want a string, not %s", a.val.token)
			}
			conf = a.val.str
		}
		if e != nil {
			if err := e.Allocator().SetAllocatorSettings(conf); err != nil {
				return r.errorf(c, "%v", err)
			}
		}
	}
	return nil
}

// recordHistory is _record_memory_history(enabled="all", context="all",
// stacks="all", max_entries=sys.maxsize, clear_history=False).
func (r *runner) recordHistory(c *callStmt) error {
	for _, a := range c.args {
		if a.key == "enabled" && a.val.kind == vBool {
			return r.errorf(c, "_record_memory_history(): the legacy boolean form is not supported; use enabled=\"all\", \"state\" or None")
		}
	}
	enabled, off, err := r.strArg(c, "enabled", "all", "state", "all")
	if err != nil {
		return err
	}
	ctx, noCtx, err := r.strArg(c, "context", "all", "state", "alloc", "all")
	if err != nil {
		return err
	}
	if _, _, err := r.strArg(c, "stacks", "all", "python", "all"); err != nil {
		return err
	}
	maxEntries, err := r.intArg(c, "max_entries", 0)
	if err != nil {
		return err
	}
	if maxEntries < 0 {
		return r.errorf(c, "_record_memory_history(): max_entries must not be negative")
	}
	clear, err := r.boolArg(c, "clear_history")
	if err != nil {
		return err
	}
	o := allocator.HistoryOptions{Enabled: allocator.HistoryAll, MaxEntries: int(maxEntries), ClearHistory: clear}
	switch {
	case off:
		o.Enabled = allocator.HistoryOff
	case enabled == "state":
		o.Enabled = allocator.HistoryState
	}
	switch {
	case noCtx:
		o.Context = allocator.ContextNever
	case ctx == "state":
		o.Context = allocator.ContextState
	case ctx == "alloc":
		o.Context = allocator.ContextAlloc
	default:
		o.Context = allocator.ContextAll
	}
	if r.e != nil {
		if err := r.e.RecordHistory(o); err != nil {
			return r.errorf(c, "%v", err)
		}
	}
	return nil
}

func (r *runner) print(p *printStmt) error {
	if p.call == nil {
		return r.output(p, p.text)
	}
	c := p.call
	if err := r.device(c); err != nil {
		return err
	}
	abbreviated, err := r.boolArg(c, "abbreviated")
	if err != nil {
		return err
	}
	if r.e == nil {
		// Checking: count a summary's worth of output, so that the
		// budget fails before anything runs.
		return r.countOutput(p, 4096)
	}
	stats := r.e.Allocator().MemoryStats()
	values := make(map[string]int64, len(stats))
	keys := make([]string, len(stats))
	for i, kv := range stats {
		values[kv.Key] = kv.Value
		keys[i] = kv.Key
	}
	sort.Strings(keys)
	get := func(k string) int64 { return values[k] }
	var out string
	switch c.fn {
	case "memory_allocated":
		out = strconv.FormatInt(get("allocated_bytes.all.current"), 10)
	case "memory_reserved":
		out = strconv.FormatInt(get("reserved_bytes.all.current"), 10)
	case "max_memory_allocated":
		out = strconv.FormatInt(get("allocated_bytes.all.peak"), 10)
	case "max_memory_reserved":
		out = strconv.FormatInt(get("reserved_bytes.all.peak"), 10)
	case "memory_stats":
		out = report.TorchMemoryStats(keys, get)
	case "memory_summary":
		out = report.TorchMemorySummary(get, r.e.Allocator().Device().Index(), abbreviated)
	}
	return r.output(p, out)
}
