package parallel

import (
	"compress/gzip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
)

func currentLimit() int64 { return debug.SetMemoryLimit(-1) }

// sparseFile makes a file of size bytes that takes no disk: only its size
// matters to the limit.
func sparseFile(t *testing.T, name string, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return p
}

// needOnly is LimitHeapToFile's limit before a file is added.
func needOnly(budget int64) *HeapLimit {
	return &HeapLimit{budget: budget, alone: true, measureHeap: liveHeapNow}
}

// withLive makes h measure a live heap of n bytes after each load, where
// the real one collects and reads the runtime's figure.
func withLive(h *HeapLimit, n int64) { h.measureHeap = func() int64 { return n } }

func TestHeapLimitFollowsTheNeed(t *testing.T) {
	before := currentLimit()
	const gb = 1_000_000_000
	big := sparseFile(t, "big.pickle", gb)

	// While the file loads: aloneLoadShare of its size.
	h := needOnly(64 << 30)
	withLive(h, 192_000_000)
	h.Add(big)
	if got, want := currentLimit(), int64(gb*aloneLoadShare); got != want {
		t.Errorf("limit while a 1 GB file loads: %d, want %d (aloneLoadShare of it)", got, want)
	}
	// torch-1GB's figures: 168 MB live after loading, 8.6 M entries,
	// 1.72 M blocks. The limit is the need and its margin, under half the
	// file's size and over the live peak measured (392 MB) by a tenth.
	withLive(h, 168_000_000)
	h.Loaded(8_600_000, 1_720_000)
	need := int64(168_000_000 + 1_720_000*aloneReplayPerBlock + 8_600_000*aloneReplayPerEntry)
	want := need + int64(float64(need)*aloneMargin)
	if got := currentLimit(); got != want {
		t.Errorf("limit for torch-1GB's replay: %d, want %d", got, want)
	}
	if want >= gb/2 || want <= 392_000_000*11/10 {
		t.Errorf("limit for torch-1GB's replay: %d, want between 1.1x its live peak (392 MB) and 0.5x the file", want)
	}
	withLive(h, 192_000_000)
	// A snapshot whose state outweighs its file (a million blocks, few
	// entries) gets its need, above the file's size.
	withLive(h, 400_000_000)
	h.Loaded(1000, 5_000_000)
	need = 400_000_000 + replayAloneNeed(1000, 5_000_000)
	if got := currentLimit(); got != need+int64(float64(need)*aloneMargin) || got <= gb {
		t.Errorf("limit for a block-heavy snapshot: %d, want %d", got, need+int64(float64(need)*aloneMargin))
	}
	h.Release()
	if got := currentLimit(); got != before {
		t.Errorf("limit after Release: %d, want %d as before", got, before)
	}

	// What the command keeps besides the replay (stats' sparkline on a
	// terminal, 8 bytes an entry) adds to the need.
	h = needOnly(64 << 30)
	withLive(h, 192_000_000)
	h.Add(big)
	h.Keep(8_600_000 * 8)
	h.Loaded(8_600_000, 1_720_000)
	need = int64(192_000_000 + 8_600_000*8 + replayAloneNeed(8_600_000, 1_720_000))
	if got := currentLimit(); got != need+int64(float64(need)*aloneMargin) {
		t.Errorf("limit with a sparkline kept: %d, want %d", got, need+int64(float64(need)*aloneMargin))
	}
	h.Release()

	// diff: the second file loads while the first's snapshot is held; the
	// needs of both replays add up, and the live heap is measured anew.
	h = needOnly(64 << 30)
	withLive(h, 100_000_000)
	h.Add(big)
	h.AddLoaded(1_000_000, 100_000)
	first := replayAloneNeed(1_000_000, 100_000)
	second := sparseFile(t, "second.pickle", 2*gb)
	h.Add(second)
	need = 100_000_000 + first
	if got, want := currentLimit(), 2*gb*aloneLoadShare+need+int64(float64(need)*aloneMargin); got != int64(want) {
		t.Errorf("limit while the second file loads: %d, want %d", got, int64(want))
	}
	withLive(h, 300_000_000)
	h.AddLoaded(2_000_000, 200_000)
	need = 300_000_000 + first + replayAloneNeed(2_000_000, 200_000)
	if got := currentLimit(); got != need+int64(float64(need)*aloneMargin) {
		t.Errorf("limit for both replays: %d, want %d", got, need+int64(float64(need)*aloneMargin))
	}
	h.Release()

	// The budget caps it; small files get the floor, loading and loaded.
	h = LimitHeapToFile(big, 256<<20+1)
	if got := currentLimit(); got != 256<<20+1 {
		t.Errorf("limit under a budget: %d", got)
	}
	h.Release()
	small := filepath.Join(t.TempDir(), "small.pickle")
	os.WriteFile(small, []byte{0x80, 0x04, '.'}, 0o644)
	h = needOnly(64 << 30)
	withLive(h, 1<<20)
	h.Add(small)
	if got := currentLimit(); got != minHeapLimit {
		t.Errorf("limit for a small file: %d, want %d", got, minHeapLimit)
	}
	h.Loaded(10, 10)
	if got := currentLimit(); got != minHeapLimit {
		t.Errorf("limit for a small snapshot: %d, want %d", got, minHeapLimit)
	}
	// A command that knows its heap sets it below the floor (the view's
	// server), within the budget.
	h.SetTo(100 << 20)
	if got := currentLimit(); got != 100<<20 {
		t.Errorf("limit after SetTo(100 MiB): %d", got)
	}
	h.SetTo(1 << 40)
	if got := currentLimit(); got != 64<<30 {
		t.Errorf("SetTo above the budget: %d, want the budget", got)
	}
	h.Release()
	if got := currentLimit(); got != before {
		t.Errorf("limit after Release: %d, want %d as before", got, before)
	}
	h.SetTo(100 << 20) // released: sets nothing
	if got := currentLimit(); got != before {
		t.Errorf("SetTo after Release set %d", got)
	}

	// Compressed or missing files set nothing.
	dir := t.TempDir()
	gz := filepath.Join(dir, "snap.pickle.gz")
	g, _ := os.Create(gz)
	w := gzip.NewWriter(g)
	w.Write([]byte("x"))
	w.Close()
	g.Close()
	for _, p := range []string{gz, filepath.Join(dir, "missing")} {
		h = LimitHeapToFile(p, 64<<30)
		h.Loaded(1, 1)
		if got := currentLimit(); got != before {
			t.Errorf("%s: limit %d set", filepath.Base(p), got)
		}
		h.Release()
	}
}

// TestHeapLimitFileFloor: the commands other than stats (NewHeapLimit)
// keep their files' size as a floor: they hold more than a replay (peak's
// captured states), and a limit at a replay's need made peak 2.2x slower
// on torch-1GB.
func TestHeapLimitFileFloor(t *testing.T) {
	before := currentLimit()
	const gb = 1_000_000_000
	h := NewHeapLimit(64 << 30)
	withLive(h, 192_000_000)
	h.Add(sparseFile(t, "big.pickle", gb))
	if got := currentLimit(); got != gb {
		t.Errorf("limit while a 1 GB file loads: %d, want its size", got)
	}
	h.AddLoaded(8_600_000, 1_720_000)
	if got := currentLimit(); got != gb {
		t.Errorf("limit after loading: %d, want the file's size, above the replay's need", got)
	}
	withLive(h, 900_000_000)
	h.Add(sparseFile(t, "second.pickle", gb/10))
	h.AddLoaded(1_000_000, 5_000_000)
	need := int64(900_000_000 + (8_600_000+1_000_000)*replayPerEntry + (1_720_000+5_000_000)*replayPerBlock)
	if got := currentLimit(); got != need+int64(float64(need)*needMargin) {
		t.Errorf("limit for a need above both files: %d, want %d", got, need+int64(float64(need)*needMargin))
	}
	h.Release()
	if got := currentLimit(); got != before {
		t.Errorf("limit after Release: %d, want %d as before", got, before)
	}
}

// TestHeapLimitHold: a command that says what it keeps besides its
// replays' state (Hold: peak's figures and captured states) gets stats'
// need-based limit with that holding counted, not its files' size; two
// files' needs add up.
func TestHeapLimitHold(t *testing.T) {
	before := currentLimit()
	const gb = 1_000_000_000
	h := NewHeapLimit(64 << 30)
	h.Hold(4, 64)
	withLive(h, 192_000_000)
	h.Add(sparseFile(t, "big.pickle", gb))
	if got, want := currentLimit(), int64(gb*loadShare); got != want {
		t.Errorf("limit while a 1 GB file loads: %d, want %d (loadShare of it, not its size)", got, want)
	}
	h.AddLoaded(8_600_000, 1_720_000)
	need := int64(192_000_000 + 8_600_000*(replayPerEntry+4) + 1_720_000*(replayPerBlock+64))
	want := need + int64(float64(need)*needMargin)
	if got := currentLimit(); got != want {
		t.Errorf("limit after loading: %d, want %d (the need with the holding, and the margin)", got, want)
	}
	// torch-1GB: peak's live heap peaked at 573 MB (gctrace) against
	// stats' 448 MB; the limit leaves it stats' room and stays under the
	// file's size.
	if want < 573_000_000*12/10 || want >= gb {
		t.Errorf("limit for peak on torch-1GB: %d, want between 1.2x its live peak (573 MB) and the file's size", want)
	}
	withLive(h, 400_000_000)
	h.Add(sparseFile(t, "second.pickle", gb/10))
	h.AddLoaded(860_000, 172_000)
	need = 400_000_000 + (8_600_000+860_000)*(replayPerEntry+4) + (1_720_000+172_000)*(replayPerBlock+64)
	if got := currentLimit(); got != need+int64(float64(need)*needMargin) {
		t.Errorf("limit with a second file: %d, want %d", got, need+int64(float64(need)*needMargin))
	}
	h.Release()
	if got := currentLimit(); got != before {
		t.Errorf("limit after Release: %d, want %d as before", got, before)
	}
	// A 100 MB file gets its need too, not stats' 256 MiB floor (under
	// which the heap doubled its live peak): the floor of a command that
	// holds is minHeldLimit, which a small file's load stays under.
	h = NewHeapLimit(64 << 30)
	h.Hold(4, 64)
	withLive(h, 20_000_000)
	h.Add(sparseFile(t, "small.pickle", 100_000_000))
	if got := currentLimit(); got != minHeldLimit {
		t.Errorf("limit while a 100 MB file loads: %d, want the %d floor (its load share is %d)", got, minHeldLimit, int64(100_000_000*loadShare))
	}
	h.AddLoaded(860_000, 172_000)
	need = 20_000_000 + 860_000*(replayPerEntry+4) + 172_000*(replayPerBlock+64)
	if got, want := currentLimit(), need+int64(float64(need)*needMargin); got != want || want >= minHeapLimit {
		t.Errorf("limit for a 100 MB file: %d, want %d (its need and margin, under stats' %d floor)", got, want, minHeapLimit)
	}
	h.Release()
	h = NewHeapLimit(64 << 30)
	h.Hold(4, 64)
	withLive(h, 2_000_000)
	h.Add(sparseFile(t, "tiny.pickle", 1_000_000))
	h.AddLoaded(8_600, 1_720)
	if got := currentLimit(); got != minHeldLimit {
		t.Errorf("limit for a 1 MB file: %d, want the %d floor", got, minHeldLimit)
	}
	h.Release()
}

// TestLiveHeapNow: the measure the limit starts from sees a live
// allocation (it collects first, so garbage does not count).
func TestLiveHeapNow(t *testing.T) {
	base := liveHeapNow()
	keep := make([]byte, 64<<20)
	for i := range keep {
		keep[i] = 1
	}
	if got := liveHeapNow(); got < base+60<<20 {
		t.Errorf("live heap with 64 MiB held: %d, was %d without", got, base)
	}
	runtime.KeepAlive(keep)
}

// TestReplayAloneNeed: a replay's peak is the start rebuild's address sets
// or the simulator with its growth, whichever is larger, not both: the
// sets are garbage before the simulator is seeded.
func TestReplayAloneNeed(t *testing.T) {
	// torch-1GB: the simulator's side.
	if got, want := replayAloneNeed(8_600_000, 1_720_000), int64(1_720_000*aloneReplayPerBlock+8_600_000*aloneReplayPerEntry); got != want {
		t.Errorf("replayAloneNeed(torch-1GB) = %d, want the simulator's %d", got, want)
	}
	// Many entries, few blocks: the rebuild's sets.
	if got, want := replayAloneNeed(10_000_000, 1000), int64(10_000_000*aloneRebuildPerEntry); got != want {
		t.Errorf("replayAloneNeed(10 M entries, 1000 blocks) = %d, want the rebuild's %d", got, want)
	}
}
