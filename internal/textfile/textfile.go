// Package textfile reads the small text files a user hands memstat besides
// snapshots (workload files, rules files) within a size cap, and quotes
// their text for one-line error messages.
//
// A FIFO would block the read forever and /dev/zero would grow it without
// end, so anything but a regular file is refused before it is opened, and
// a file larger than the cap is refused after reading one byte past it.
package textfile

import (
	"fmt"
	"io"
	"os"
	"strconv"
)

// Read returns the contents of the regular file at path, at most max
// bytes; what it refuses is an error naming the file and the limit.
func Read(path, what string, max int64) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s: not a regular file (a %s is read from a regular file, not a %s)", path, what, kind(fi.Mode()))
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(b)) > max {
		return "", fmt.Errorf("%s: larger than %d bytes, the limit for a %s", path, max, what)
	}
	return string(b), nil
}

func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "folder"
	case m&os.ModeNamedPipe != 0:
		return "FIFO"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// Quote returns text from a file for an error message: quoted, and cut to
// its first bytes, so that a message stays one short line however long
// the offending text is.
func Quote(s string) string {
	const keep = 32
	if len(s) <= keep {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(s[:keep]), len(s))
}

// Cut is Quote without the quotes, for text that is already quoted or
// reads better bare (an expression, a token as written).
func Cut(s string) string {
	const keep = 32
	if len(s) <= keep {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:keep], len(s))
}
