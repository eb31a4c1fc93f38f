package snapshot_test

import (
	"bytes"
	"os"
	"reflect"
	"testing"

	"github.com/memstat/memstat/internal/fixture"
	"github.com/memstat/memstat/pkg/snapshot"
)

// TestFlatDictsSameRecording: recordings `memstat record` writes (memstat's
// own encoder: dicts not memoized, strings memoized as they first come)
// read the same with the decoder's flat-dict path as without.
func TestFlatDictsSameRecording(t *testing.T) {
	plain, _ := fixture.Record(t, "plain.pickle", "--device-memory", "1GiB")
	train, _ := fixture.RecordArgs(t, "train.pickle", "-w", "train", "--steps", "2")
	for _, path := range []string{plain, train} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want, err := snapshot.ReadWithoutFlatDicts(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := snapshot.Read(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		if want.Traces[0].Len() == 0 || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the flat-dict path reads a different snapshot (%d entries)", path, want.Traces[0].Len())
		}
	}
}
