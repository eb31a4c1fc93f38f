//go:build !linux

package pickle

// spanArena is Go's heap here: the spans' pages are made as they are
// needed.
type spanArena struct{}

func newSpanArena(int) *spanArena { return nil }

func (*spanArena) page() []skimSpan { return nil }

func (*spanArena) release() {}
