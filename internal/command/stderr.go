package command

import (
	"bytes"
	"io"
	"sync"
)

// HeldStderr holds what a command writes to stderr (its warnings) until
// the command returns, so that when it fails, root.Main prints the one
// error line first and the warnings after it: the error is never below
// the warnings, however many files or devices warned.
//
// A command that talks to the user while it runs (view's address,
// record's progress) calls ReleaseStderr first. What is held past
// maxHeldStderr is released too: warnings are summarised (see
// SummarizeWarnings), so only hundreds of files come near it.
type HeldStderr struct {
	mu       sync.Mutex
	w        io.Writer
	buf      bytes.Buffer
	released bool
}

const maxHeldStderr = 256 << 10

// HoldStderr returns a writer that holds what is written to w.
func HoldStderr(w io.Writer) *HeldStderr { return &HeldStderr{w: w} }

func (h *HeldStderr) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return h.w.Write(p)
	}
	h.buf.Write(p)
	if h.buf.Len() > maxHeldStderr {
		return len(p), h.releaseLocked()
	}
	return len(p), nil
}

// Underlying returns the writer held lines go to, for the error line.
func (h *HeldStderr) Underlying() io.Writer { return h.w }

// Release writes what is held and lets later writes through.
func (h *HeldStderr) Release() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.releaseLocked()
}

func (h *HeldStderr) releaseLocked() error {
	h.released = true
	_, err := h.w.Write(h.buf.Bytes())
	h.buf = bytes.Buffer{}
	return err
}

// ReleaseStderr releases w if it is a HeldStderr: for output the user must
// see while the command runs.
func ReleaseStderr(w io.Writer) {
	if h, ok := w.(*HeldStderr); ok {
		h.Release()
	}
}
