// Package analysis explains a snapshot's memory: the peak and what was live
// then, the state at each out-of-memory error and why it failed, the map of
// segments and their fragmentation, a readable trace, and the difference
// between two snapshots. Like pprof's internal/graph, it consumes the model
// (pkg/snapshot) and the allocator replay (pkg/allocator) and returns typed
// results; pkg/report and the commands turn them into output.
//
// Stack frames are classified here (ClassifyFrame, Frames) so that every
// command attributes memory the same way: to the innermost frame of the
// user's own code, with PyTorch's internals hidden unless asked for.
package analysis
