//go:build linux

package pickle

import (
	"io"
	"syscall"
)

// mapForSkim maps the first size bytes of src, if it is a file, for the
// split skim's walks to read in place: a read copies every byte from the
// page cache into a walk's buffer (some 15% of a split skim's CPU), a
// mapping only maps the pages. nil if src is not a file or does not map.
// A page the file no longer has (truncated meanwhile) faults: the walks
// over it run with debug.SetPanicOnFault and say ErrSkim (isFault).
func mapForSkim(src io.ReaderAt, size int64) []byte {
	f, ok := src.(interface{ Fd() uintptr })
	if !ok || size <= 0 || size > skimMapMax {
		return nil
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil
	}
	return mem
}

// dropMapped lets the pages of mem from start to end (those wholly in it)
// go: they count in the process's resident memory while mapped, and a
// walk that reads them again maps them again from the page cache.
func dropMapped(mem []byte, start, end int64) {
	const page = 4096
	start = (start + page - 1) &^ (page - 1)
	end &^= page - 1
	if start < end && end <= int64(len(mem)) {
		_ = syscall.Madvise(mem[start:end], syscall.MADV_DONTNEED)
	}
}

// unmapForSkim unmaps what mapForSkim mapped (nil does nothing).
func unmapForSkim(mem []byte) {
	if mem != nil {
		_ = syscall.Munmap(mem)
	}
}
