package replay

import (
	"testing"

	"github.com/memstat/memstat/internal/realdata"
	"github.com/memstat/memstat/pkg/snapshot"
)

// TestGuessVersionRangeOfRealSnapshots: each published snapshot is read
// back as the narrowest range of releases its keys allow (GuessVersionRange;
// the MANIFEST of shared/testdata/real dates the files independently).
func TestGuessVersionRangeOfRealSnapshots(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"Yiyi-philosophy", "2.0"},                                    // blocks with history
		{"Maphsge4__select_n__snapshot.pickle_at_1f2f548", "2.1"},     // entries without time_us
		{"Maphsge4__select_n__snapshot.pickle_at_dec166a", "2.1-2.2"}, // no entries
		{"JasperSolt", "2.2"},
		{"Da1sypetals", "2.3-2.4"},
		{"HugePandaCoder", "2.5-2.7"},
		{"kkaitlyn111", "2.5-2.8"}, // no entries: compile_context cannot show
		{"ZidongLiu", "2.9"},
		{"MAGMA27", "2.10"},
		{"drisspg", "2.10"}, // re-serialized without external_annotations: the newest key wins
	} {
		s, err := snapshot.Load(realdata.File(t, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		if got := GuessVersionRange(s).String(); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.file, got, tc.want)
		}
	}
}
