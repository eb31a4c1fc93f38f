package command

import "github.com/spf13/cobra"

// AddCapturesFlag registers --captures on a command whose figures come
// from a follow replay (replay.Options.Captures): the user says the
// program captured CUDA graphs or allocated in a torch.cuda.MemPool,
// which a recording does not always show.
func AddCapturesFlag(cmd *cobra.Command, on *bool) {
	cmd.Flags().BoolVar(on, "captures", false, "the program captured CUDA graphs or used torch.cuda.use_mem_pool: print the figures a capture the recording does not show could alter as bounds (num_alloc_retries and num_sync_all_streams count an oom's retry at the upper end only, as an oom during a capture has none; before 2.9 the private pools' peaks, as a pool released before the snapshot leaves no segment)")
}
