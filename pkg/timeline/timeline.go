// Package timeline samples a device's memory over the time of its trace:
// allocated, reserved and active bytes (optionally per pool) after every
// trace entry of a follow-mode replay, decimated to a few thousand points
// per series with the minimum and maximum of each bucket kept, so that a
// picture of a million events still shows every spike. It also places the
// peak, the out-of-memory errors and the annotated phases
// (external_annotations START/END pairs) on the same axis.
//
// The axis is seconds since the first trace entry when the file records
// time_us, and the trace entry index otherwise.
package timeline

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/memstat/memstat/pkg/allocator"
	"github.com/memstat/memstat/pkg/replay"
	"github.com/memstat/memstat/pkg/snapshot"
)

// DefaultMaxPoints is the number of points a series keeps by default: a
// min and a max for each of 2000 buckets, more than a picture's width in
// pixels.
const DefaultMaxPoints = 4000

// Options select what Build samples.
type Options struct {
	Device int
	// Pools adds allocated and reserved series per pool (small, large).
	Pools bool
	// MaxPoints bounds the points of each series (DefaultMaxPoints when
	// 0); at least 2.
	MaxPoints int
	// From and To bound the window of trace entries sampled (zero values:
	// the whole trace).
	From, To Bound
}

// Series is one quantity over time.
type Series struct {
	// Key names the quantity ("allocated", "reserved", "active",
	// "allocated_large", ...); Name is its legend label.
	Key    string
	Name   string
	Points []Point
}

// Point is a series' value after one trace entry.
type Point struct {
	Index int
	X     float64
	Bytes int64
}

// Mark is one trace entry worth pointing at.
type Mark struct {
	Index int
	X     float64
	// Bytes is the marked value: the peak's allocated bytes, or the
	// memory reserved when an out-of-memory error happened.
	Bytes int64
	// Requested and DeviceFree describe an out-of-memory error: the
	// rounded request that failed and the free device memory CUDA
	// reported.
	Requested  int64
	DeviceFree int64
}

// Phase is an annotated span of the run (a record_function range).
type Phase struct {
	Name       string
	Start, End float64
}

// Timeline is the memory of one device over (a window of) its trace.
type Timeline struct {
	Device int
	// Entries is the length of the device's trace; From and To the first
	// and last entries sampled (To < From when nothing was).
	Entries  int
	From, To int
	// TimeBased says X is seconds since the first trace entry (StartUS);
	// otherwise it is the trace entry index.
	TimeBased bool
	// SimulatedTimes says memstat record made the times (snapshot.Recorder):
	// the axis says so.
	SimulatedTimes bool
	StartUS        int64
	// Series: allocated, reserved, active, then the memory reserved in
	// private pools (key "reserved_private", only when the trace has
	// any), then the per-pool ones.
	Series []Series
	// PrivateBound is set, when the private-pool series is shown, where
	// the trace does not determine which pool some memory was in: the
	// series is then what the replay placed in private pools, and the
	// private pools' peak is this bound (replay.PrivatePoolReserved).
	PrivateBound *replay.Bound
	// Peak is where allocated memory was highest in the window (first
	// reached); PeakReserved the same for reserved memory. Index is -1
	// when the window is empty.
	Peak, PeakReserved Mark
	OOMs               []Mark
	Phases             []Phase
	// Notes say what could not be shown (annotations without a time axis,
	// ...).
	Notes []string
}

// SetPrivateBound takes the private pools' bound from the result of the
// replay the timeline sampled (a Builder's caller calls it).
func (t *Timeline) SetPrivateBound(res *replay.Result) {
	if b, ok := res.Bounds[replay.PrivatePoolReserved]; ok {
		t.PrivateBound = &b
	}
}

// Find returns the series with a key, or nil.
func (t *Timeline) Find(key string) *Series {
	for i := range t.Series {
		if t.Series[i].Key == key {
			return &t.Series[i]
		}
	}
	return nil
}

// XLabel names the X axis.
func (t *Timeline) XLabel() string {
	if t.TimeBased && t.SimulatedTimes {
		return "seconds since the first trace entry (simulated by memstat record)"
	}
	if t.TimeBased {
		return "seconds since the first trace entry"
	}
	return "trace entry"
}

// Bound is one end of a window: a trace entry index, or a time since the
// first entry.
type Bound struct {
	Set    bool
	ByTime bool
	Index  int
	Since  time.Duration
}

// ParseBound reads a window end: a bare integer is a trace entry index
// ("1200"); a number with a unit is a time since the first entry ("1.5s",
// "250ms", "800us", "2m"). "" is no bound.
func ParseBound(s string) (Bound, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Bound{}, nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 0 {
			return Bound{}, fmt.Errorf("negative trace entry index %d", n)
		}
		return Bound{Set: true, Index: n}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return Bound{}, fmt.Errorf("%q is neither a trace entry index (1200) nor a time since the first entry (1.5s, 250ms)", s)
	}
	if d < 0 {
		return Bound{}, fmt.Errorf("negative time %s", s)
	}
	return Bound{Set: true, ByTime: true, Since: d}, nil
}

func (b Bound) String() string {
	if b.ByTime {
		return b.Since.String()
	}
	return strconv.Itoa(b.Index)
}

// window resolves From and To to entry indices [from, to].
func window(trace *snapshot.Trace, timeBased bool, from, to Bound) (int, int, error) {
	lo, hi := 0, trace.Len()-1
	resolve := func(b Bound, upper bool) (int, error) {
		if !b.ByTime {
			return b.Index, nil
		}
		if !timeBased {
			return 0, fmt.Errorf("the trace has no time_us, so --from/--to take trace entry indices, not %s", b.Since)
		}
		at := trace.First().TimeUS + b.Since.Microseconds()
		// The first entry at or after the time (from), or the last one at
		// or before it (to).
		for i, e := range trace.All() {
			if upper && e.TimeUS > at {
				return i - 1, nil
			}
			if !upper && e.TimeUS >= at {
				return i, nil
			}
		}
		if upper {
			return trace.Len() - 1, nil
		}
		return trace.Len(), nil
	}
	var err error
	if from.Set {
		if lo, err = resolve(from, false); err != nil {
			return 0, 0, err
		}
	}
	if to.Set {
		if hi, err = resolve(to, true); err != nil {
			return 0, 0, err
		}
		hi = min(hi, trace.Len()-1)
	}
	if lo > hi {
		return 0, 0, fmt.Errorf("the window from %s to %s holds no trace entry (the trace has %d)", from, to, trace.Len())
	}
	return lo, hi, nil
}

// Build replays the device's trace (follow mode, the recorded settings)
// and samples it.
func Build(s *snapshot.Snapshot, o Options) (*Timeline, error) {
	b, err := NewBuilder(s, o)
	if err != nil {
		return nil, err
	}
	r, err := replay.New(s, replay.Options{Device: o.Device, OnEvent: b.Observe})
	if err != nil {
		return nil, err
	}
	for r.Pos() <= b.t.To {
		if err := r.Step(); err != nil {
			if !errors.Is(err, io.EOF) {
				return nil, err
			}
			break
		}
	}
	t := b.Finish()
	if t.Find(PrivateKey) != nil {
		// Only recordings with pools pay for the rest of the replay.
		t.SetPrivateBound(r.Result())
	}
	return t, nil
}

// Builder samples a follow-mode replay of the device that someone else
// runs, so that a command that replays the trace anyway (report) does not
// replay it again for its timeline: Observe is the replay's OnEvent;
// Finish, once the replay is past the window, returns the timeline.
type Builder struct {
	s      *snapshot.Snapshot
	o      Options
	t      *Timeline
	qs     []quantity
	decs   []decimator
	lastUS int64
	// private: some sampled entry had memory in private pools.
	private bool
}

func privateReserved(a *allocator.Allocator) int64 {
	r, _ := a.PrivatePoolStats()
	return r.Current
}

type quantity struct {
	key, name string
	// at is the quantity's index in the figures Observe reads after each
	// entry (nowAllocated...); nowPrivate for PrivateKey, which the
	// allocator keeps apart (PrivatePoolStats).
	at int
}

// The figures Observe reads after each entry, by index (quantity.at):
// current allocated, reserved and active bytes of every pool.
const (
	nowAllocated = iota
	nowReserved
	nowActive
	nowAllocatedLarge
	nowReservedLarge
	nowAllocatedSmall
	nowReservedSmall
	nowPrivate
	nowFigures
)

// PrivateKey is the key of the series of memory reserved in private
// pools (CUDA graphs, torch.cuda.MemPool).
const PrivateKey = "reserved_private"

// NewBuilder checks the device's trace and the window and prepares the
// sampling.
func NewBuilder(s *snapshot.Snapshot, o Options) (*Builder, error) {
	trace := s.Trace(o.Device)
	if trace.Len() == 0 {
		return nil, fmt.Errorf("device %d has no trace: there is no history to draw", o.Device)
	}
	t := &Timeline{Device: o.Device, Entries: trace.Len(), StartUS: trace.First().TimeUS}
	t.TimeBased = t.StartUS != 0
	t.SimulatedTimes = s.Recorder != nil
	from, to, err := window(trace, t.TimeBased, o.From, o.To)
	if err != nil {
		return nil, err
	}
	t.From, t.To = from, to

	limit := o.MaxPoints
	if limit == 0 {
		limit = DefaultMaxPoints
	}
	limit = max(limit, 4)
	// Two points per bucket, plus the first and the last of the window.
	half := (limit - 2) / 2
	bucket := max(1, (to-from+1+half-1)/half)
	qs := []quantity{
		{"allocated", "allocated", nowAllocated},
		{"reserved", "reserved", nowReserved},
		{"active", "active", nowActive},
		// Kept only when it is ever nonzero (Finish): files without
		// private pools draw as before.
		{PrivateKey, "reserved in private pools", nowPrivate},
	}
	if o.Pools {
		qs = append(qs,
			quantity{"allocated_large", "allocated, large pool", nowAllocatedLarge},
			quantity{"allocated_small", "allocated, small pool", nowAllocatedSmall},
			quantity{"reserved_large", "reserved, large pool", nowReservedLarge},
			quantity{"reserved_small", "reserved, small pool", nowReservedSmall},
		)
	}
	b := &Builder{s: s, o: o, t: t, qs: qs, decs: make([]decimator, len(qs))}
	t.Series = make([]Series, len(qs))
	for i, q := range qs {
		t.Series[i] = Series{Key: q.key, Name: q.name}
		b.decs[i] = decimator{bucket: bucket, out: &t.Series[i].Points}
	}
	t.Peak.Index, t.PeakReserved.Index = -1, -1
	t.Peak.Bytes, t.PeakReserved.Bytes = -1, -1
	return b, nil
}

func (b *Builder) xOf(i int, e *snapshot.TraceEntry) float64 {
	if !b.t.TimeBased {
		return float64(i)
	}
	// Entries of different threads may be a few microseconds out of
	// order; the axis must not run backwards.
	b.lastUS = max(b.lastUS, e.TimeUS)
	return float64(b.lastUS-b.t.StartUS) / 1e6
}

// Observe samples the state after entry i (replay.Options.OnEvent).
func (b *Builder) Observe(i int, e snapshot.TraceEntry, a *allocator.Allocator) {
	t := b.t
	x := b.xOf(i, &e)
	if i < t.From || i > t.To {
		return
	}
	// The figures by index, not a Stats copy: Observe runs after every
	// entry, and a copy per entry was most of report's allocation.
	var now [nowFigures]int64
	now[nowAllocated], now[nowReserved], now[nowActive] = a.BytesNow(allocator.PoolAll)
	if b.o.Pools {
		now[nowAllocatedLarge], now[nowReservedLarge], _ = a.BytesNow(allocator.PoolLarge)
		now[nowAllocatedSmall], now[nowReservedSmall], _ = a.BytesNow(allocator.PoolSmall)
	}
	if now[nowPrivate] = privateReserved(a); now[nowPrivate] != 0 {
		b.private = true
	}
	for k, q := range b.qs {
		b.decs[k].add(Point{Index: i, X: x, Bytes: now[q.at]})
	}
	alloc, res := now[nowAllocated], now[nowReserved]
	// The segment events of an allocation come before its alloc entry
	// and see the state after it; the peak belongs to the alloc (as in
	// the replay's result).
	if isSegmentEvent(e.Action) && i < t.To {
		return
	}
	if alloc > t.Peak.Bytes {
		t.Peak = Mark{Index: i, X: x, Bytes: alloc}
	}
	if res > t.PeakReserved.Bytes {
		t.PeakReserved = Mark{Index: i, X: x, Bytes: res}
	}
	if e.Action == snapshot.ActionOOM {
		t.OOMs = append(t.OOMs, Mark{Index: i, X: x, Bytes: res, Requested: e.Size, DeviceFree: e.DeviceFree()})
	}
}

// Finish returns the timeline, once the replay has applied the window.
func (b *Builder) Finish() *Timeline {
	for i := range b.decs {
		b.decs[i].finish()
	}
	if !b.private {
		for i := range b.t.Series {
			if b.t.Series[i].Key == PrivateKey {
				b.t.Series = append(b.t.Series[:i], b.t.Series[i+1:]...)
				break
			}
		}
	}
	b.t.Phases, b.t.Notes = phases(b.s, b.o.Device, b.t)
	return b.t
}

func isSegmentEvent(a snapshot.Action) bool {
	switch a {
	case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentMap, snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
		return true
	}
	return false
}

// phases pairs the device's START and END annotations into spans on the
// axis, clipped to the window.
func phases(s *snapshot.Snapshot, device int, t *Timeline) ([]Phase, []string) {
	var anns []snapshot.Annotation
	for _, a := range s.Annotations {
		if a.Device == device && (a.Stage == "START" || a.Stage == "END") {
			anns = append(anns, a)
		}
	}
	if len(anns) == 0 {
		return nil, nil
	}
	if !t.TimeBased {
		return nil, []string{fmt.Sprintf("%d annotations not shown: the trace has no time_us to place them by", len(anns))}
	}
	series := t.Find("allocated")
	if series == nil || len(series.Points) == 0 {
		return nil, nil
	}
	lo, hi := series.Points[0].X, series.Points[len(series.Points)-1].X
	x := func(us int64) float64 { return float64(us-t.StartUS) / 1e6 }
	var out []Phase
	open := map[string][]float64{}
	add := func(name string, a, b float64) {
		a, b = max(a, lo), min(b, hi)
		if a < b {
			out = append(out, Phase{Name: name, Start: a, End: b})
		}
	}
	for _, a := range anns {
		if a.Stage == "START" {
			open[a.Name] = append(open[a.Name], x(a.TimeUS))
			continue
		}
		starts := open[a.Name]
		if len(starts) == 0 {
			add(a.Name, lo, x(a.TimeUS))
			continue
		}
		add(a.Name, starts[len(starts)-1], x(a.TimeUS))
		open[a.Name] = starts[:len(starts)-1]
	}
	for _, a := range anns {
		if starts := open[a.Name]; a.Stage == "START" && len(starts) > 0 {
			add(a.Name, starts[0], hi)
			open[a.Name] = starts[1:]
		}
	}
	return out, nil
}

// decimator keeps, for each bucket of consecutive points, the lowest and
// the highest one, in trace order, and the first and last point of all.
type decimator struct {
	bucket int
	n      int
	lo, hi Point
	last   Point
	out    *[]Point
}

func (d *decimator) add(p Point) {
	if len(*d.out) == 0 && d.n == 0 {
		*d.out = append(*d.out, p)
	}
	d.last = p
	if d.n == 0 {
		d.lo, d.hi = p, p
	} else {
		if p.Bytes < d.lo.Bytes {
			d.lo = p
		}
		if p.Bytes > d.hi.Bytes {
			d.hi = p
		}
	}
	if d.n++; d.n == d.bucket {
		d.flush()
	}
}

func (d *decimator) flush() {
	if d.n == 0 {
		return
	}
	a, b := d.lo, d.hi
	if b.Index < a.Index {
		a, b = b, a
	}
	d.keep(a)
	d.keep(b)
	d.n = 0
}

func (d *decimator) keep(p Point) {
	if n := len(*d.out); n == 0 || (*d.out)[n-1].Index < p.Index {
		*d.out = append(*d.out, p)
	}
}

// finish flushes the last bucket and keeps the window's last point.
func (d *decimator) finish() {
	d.flush()
	if len(*d.out) > 0 {
		d.keep(d.last)
	}
}
