package command

import "github.com/spf13/cobra"

// AddRuntimeSettingsFlag registers --runtime-settings on a command whose
// figures come from a follow replay (replay.Options.RuntimeSettings): the
// user says the program switched allocator settings at runtime, which a
// recording does not always show.
func AddRuntimeSettingsFlag(cmd *cobra.Command, on *bool) {
	cmd.Flags().BoolVar(on, "runtime-settings", false, "the program called torch.cuda.memory._set_allocator_settings: print the figures a change the recording does not show could alter as bounds (expandable_segments, max_split_size_mb and roundup_power2_divisions changed at runtime: block sizes, oversize counts, max_split_size)")
}
