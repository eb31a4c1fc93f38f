package root

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The messages issue 18 found wanting: each is one line in the user's
// terms (no Go function names, no empty names, no wrong article), exit 2.
func TestMessages(t *testing.T) {
	dir := t.TempDir()
	snap, _ := goodSnapshot(t, dir)
	// Hand-written pickles (protocol 2): a segment whose block has a size
	// of 2**70, and one whose block state is the int 1.
	seg := func(size, state string) []byte {
		return []byte("\x80\x02}q\x00(X\x08\x00\x00\x00segmentsq\x01]q\x02}q\x03(X\x06\x00\x00\x00deviceK\x00X\x07\x00\x00\x00addressK\x00X\x0a\x00\x00\x00total_sizeJ\x00\x00\x10\x00X\x06\x00\x00\x00streamK\x00X\x06\x00\x00\x00blocks]}(X\x04\x00\x00\x00size" + size + "X\x05\x00\x00\x00state" + state + "uaua" + "X\x0d\x00\x00\x00device_traces]]au.")
	}
	bigSize := filepath.Join(dir, "big.pickle")
	os.WriteFile(bigSize, seg("\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x40", "X\x08\x00\x00\x00inactive"), 0o644)
	intState := filepath.Join(dir, "state.pickle")
	os.WriteFile(intState, seg("J\x00\x00\x10\x00", "K\x01"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stats", bigSize}, `"size" is 1180591620717411303424, out of range (want an int of 64 bits)`},
		{[]string{"stats", intState}, `"state" is an int, not a string such as "active_allocated"`},
		{[]string{"peak", snap, "--top", "abc"}, `invalid argument "abc" for "--top": want a whole number`},
		{[]string{"record", "--checkpointing", "maybe", "-o", filepath.Join(dir, "x.pickle")}, `unexpected argument "maybe": record takes no arguments (a flag with an optional value takes it after =, e.g. --checkpointing=false)`},
		{[]string{"stats", ""}, `memstat: "": an empty file name, not a snapshot file`},
		{[]string{"trace", snap, "--from", "50", "--to", "10"}, `--from 50 is after --to 10: no entry lies between them`},
		{[]string{"trace", snap, "--from", "+9.3e12s"}, `time "+9.3e12s" is out of range`},
	} {
		code, stdout, stderr := runMain(tc.args...)
		first, _, _ := strings.Cut(stderr, "\n")
		if code != 2 || stdout != "" || !strings.Contains(first, tc.want) || strings.Contains(stderr, "strconv") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %s", tc.args, code, stdout, stderr, tc.want)
		}
	}
	// --action's help lists every action its error does.
	_, stdout, _ := runMain("trace", "--help")
	for _, a := range []string{"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map", "segment_unmap", "oom", "snapshot", "annotate"} {
		if !strings.Contains(stdout, a) {
			t.Errorf("trace --help does not list %s", a)
		}
	}
}
