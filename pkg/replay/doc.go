// Package replay follows a recorded PyTorch CUDA memory trace through the
// allocator simulation (pkg/allocator): it rebuilds the state a trace
// starts from (start.go), applies the trace entry by entry, keeping the
// simulated state equal to the recording where the simulator would decide
// otherwise (replay.go), compares the final state with the snapshot's
// segments (agree.go), and says which memory_stats figures the recording
// does not determine (bounds.go). What-if mode replays the recorded
// requests under other settings instead.
//
// Typical use:
//
//	r, err := replay.New(snap, replay.Options{Device: 0})
//	res, err := r.Run()
//	fmt.Println(res.MemoryStats, res.Bounds)
//
// The simulator stays a pure model of PyTorch's allocator; everything that
// interprets a recording lives here.
package replay
