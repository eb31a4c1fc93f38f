// Package atomicfile writes output files so that a reader never sees a
// half-written one: the content goes to a temporary file beside the target,
// which is synced and then renamed over it. A failed write leaves the old
// file (if any) untouched and no temporary file behind, and so does SIGINT
// or SIGTERM during a write (the process then exits with 130 or 143).
//
// The rename replaces the name: when path is a symbolic link, the link is
// replaced by the new file and its target is left as it was.
package atomicfile

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write creates or replaces path with what write produces. The writer
// given to write is buffered; an error from write, or from any step of
// writing the file, removes the temporary file and is returned as
// "writing PATH: ...". An existing file keeps its permissions.
func Write(path string, write func(w io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	perm := os.FileMode(0o644)
	if st, serr := os.Stat(path); serr == nil {
		if !st.Mode().IsRegular() {
			return fmt.Errorf("writing %s: not a regular file", path)
		}
		perm = st.Mode().Perm()
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	register(tmp)
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			err = fmt.Errorf("writing %s: %w", path, err)
		}
		unregister(tmp)
	}()
	bw := bufio.NewWriterSize(f, 256<<10)
	if err = write(bw); err != nil {
		return err
	}
	if err = bw.Flush(); err != nil {
		return err
	}
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	// Make the rename itself durable; not every system can sync a folder.
	if d, derr := os.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
