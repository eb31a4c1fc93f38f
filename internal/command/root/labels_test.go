package root

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/memstat/memstat/internal/realdata"
)

// machineryMarks are pieces of the names of allocator and interpreter
// frames (written here apart from analysis.IsMachinery, which decides
// what labels leave out): none may show in a default label.
var machineryMarks = []string{"CUDACachingAllocator", "c10::cuda::", "at::detail::empty", "PyEval", "_PyObject", "PyObject_",
	"_PyFunction", "ceval", "pybind11", "Engine::thread", "execute_native_thread_routine", "__libc_start", "c10::impl::",
	"c10::Dispatcher", "wrap_kernel_functor", "<frozen"}

// tableLabels runs peak or diff with --json and returns each device's
// labels by group key.
func tableLabels(t *testing.T, args ...string) []map[string]string {
	t.Helper()
	code, out, errOut := runMain(append(args, "--json")...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errOut)
	}
	var env struct {
		Results []struct {
			Devices []struct {
				Groups []struct{ Key, Label string } `json:"groups"`
				Stacks []struct{ Key, Label string } `json:"stacks"`
			} `json:"devices"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &env); err != nil {
		t.Fatal(err)
	}
	var tables []map[string]string
	for _, r := range env.Results {
		for _, d := range r.Devices {
			m := map[string]string{}
			seen := map[string]string{}
			for _, g := range append(d.Groups, d.Stacks...) {
				if other, dup := seen[g.Label]; dup {
					t.Errorf("%v: label %q names %q and %q", args, g.Label, other, g.Key)
				}
				seen[g.Label] = g.Key
				m[g.Key] = g.Label
				if n := utf8.RuneCountInString(g.Label); n > 120 || n == 0 {
					t.Errorf("%v: label of %d characters: %q", args, n, g.Label)
				}
			}
			tables = append(tables, m)
		}
	}
	return tables
}

// TestLabelsOfEveryPublishedSnapshot: in every peak and diff table of the
// published snapshots, labels are unique, at most 120 characters, the
// same whether 5 or 50 groups are listed, and name no allocator or
// interpreter frame unless --all-frames is given.
func TestLabelsOfEveryPublishedSnapshot(t *testing.T) {
	files := realdata.Files(t)
	for i, fn := range files {
		other := files[(i+1)%len(files)]
		t.Run(filepath.Base(fn), func(t *testing.T) {
			for _, all := range []bool{false, true} {
				for _, cmd := range [][]string{{"peak", fn}, {"diff", other, fn}} {
					if all {
						cmd = append(cmd, "--all-frames")
					}
					few := tableLabels(t, append(cmd, "--top", "5")...)
					many := tableLabels(t, append(cmd, "--top", "50")...)
					if len(few) != len(many) {
						t.Fatalf("%v: %d devices with --top 5, %d with --top 50", cmd, len(few), len(many))
					}
					for d := range few {
						for key, l := range few[d] {
							if m, ok := many[d][key]; ok && m != l {
								t.Errorf("%v: %q is %q with --top 5, %q with --top 50", cmd, key, l, m)
							}
						}
						if all {
							continue
						}
						for _, l := range many[d] {
							for _, mark := range machineryMarks {
								if strings.Contains(l, mark) {
									t.Errorf("%v: label %q names an allocator or interpreter frame (%s)", cmd, l, mark)
								}
							}
						}
					}
				}
			}
		})
	}
}
