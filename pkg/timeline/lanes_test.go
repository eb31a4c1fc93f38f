package timeline

import (
	"fmt"
	"reflect"
	"testing"
)

func TestLanesNeverOverlap(t *testing.T) {
	boxes := []Box{{0, 10}, {5, 12}, {11, 20}, {12.5, 14}, {30, 31}, {6, 7}}
	lane, n := Lanes(boxes, 1)
	if want := []int{0, 1, 0, 2, 0, 2}; !reflect.DeepEqual(lane, want) || n != 3 {
		t.Fatalf("lanes %v (%d), want %v", lane, n, want)
	}
	for i := range boxes {
		for j := range i {
			if lane[i] == lane[j] && boxes[i].Start < boxes[j].End+1 && boxes[j].Start < boxes[i].End+1 {
				t.Errorf("boxes %d and %d overlap in lane %d", i, j, lane[i])
			}
		}
	}
}

func TestMergeRuns(t *testing.T) {
	var ph []Phase
	for i := 1; i <= 30; i++ {
		x := float64(i)
		ph = append(ph, Phase{Name: fmt.Sprintf("step %d", i), Start: x, End: x + 0.9},
			Phase{Name: "forward", Start: x + 0.1, End: x + 0.4}, Phase{Name: "## optimizer ##", Start: x + 0.5, End: x + 0.6})
	}
	ph = append(ph, Phase{Name: "eval", Start: 40, End: 41}, Phase{Name: "epoch 3", Start: 42, End: 43}, Phase{Name: "epoch 5", Start: 44, End: 45})
	got := MergeRuns(ph)
	want := []Run{
		{Label: "step 1..30", Start: 1, End: 30.9, Count: 30},
		{Label: "forward ×30", Start: 1.1, End: 30.4, Count: 30},
		{Label: "## optimizer ## ×30", Start: 1.5, End: 30.6, Count: 30},
		{Label: "eval", Start: 40, End: 41, Count: 1},
		{Label: "epoch ×2", Start: 42, End: 45, Count: 2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("runs\n%+v\nwant\n%+v", got, want)
	}
}
