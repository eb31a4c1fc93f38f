package realdata

import (
	"slices"
	"testing"
)

// TestFilesIfPresentListsWhatFilesDoes: the fuzz targets' seeds are the
// real snapshots the other tests read.
func TestFilesIfPresentListsWhatFilesDoes(t *testing.T) {
	want := Files(t)
	if got := FilesIfPresent(); !slices.Equal(got, want) {
		t.Errorf("FilesIfPresent() = %d files, Files = %d:\n%v\n%v", len(got), len(want), got, want)
	}
}
