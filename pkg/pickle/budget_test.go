package pickle

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/chunkread"
)

// TestBudgetStopsDecodingEarly: the budget sees the footprint grow with
// the containers decoded, every budgetStep bytes, and its error stops the
// decoder before the rest of the input is read.
func TestBudgetStopsDecodingEarly(t *testing.T) {
	data := []byte("\x80\x02" + strings.Repeat("]", 4<<20) + ".")
	errBudget := errors.New("over budget")
	for _, streamed := range []bool{false, true} {
		var d *Decoder
		if streamed {
			d = NewDecoder(chunkread.New(data), nil, nil)
		} else {
			d = NewDecoder(bytes.NewReader(data), nil, nil)
		}
		var last, calls int64
		d.SetBudget(func(held int64) error {
			calls++
			if held < last {
				t.Errorf("footprint shrank from %d to %d", last, held)
			}
			last = held
			if held > 8<<20 {
				return errBudget
			}
			return nil
		})
		_, err := d.Decode()
		if !errors.Is(err, errBudget) {
			t.Fatalf("streamed=%v: got %v, want the budget's error", streamed, err)
		}
		// An EMPTY_LIST holds a 32-byte container and a 16-byte stack
		// slot: 8 MiB is past after some 175,000 of them, checked every
		// budgetStep bytes.
		if off := d.Offset(); off > 1<<20 {
			t.Errorf("streamed=%v: stopped at offset %d, long after 8 MiB were held", streamed, off)
		}
		if calls < 2 {
			t.Errorf("streamed=%v: budget called %d times", streamed, calls)
		}
	}
}
