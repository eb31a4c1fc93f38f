package command

import "github.com/spf13/cobra"

// AddRuntimeSettingsFlag registers --runtime-settings on a command whose
// figures come from a follow replay (replay.Options.RuntimeSettings): the
// user says the program switched allocator settings at runtime, which a
// recording does not always show.
func AddRuntimeSettingsFlag(cmd *cobra.Command, on *bool) {
	cmd.Flags().BoolVar(on, "runtime-settings", false, "the program called torch.cuda.memory._set_allocator_settings: print the figures a switch the recording does not show could change as bounds (covers expandable_segments switched at runtime; max_split_size_mb or roundup_power2_divisions changed at runtime are not modelled)")
}
