//go:build !linux

package pickle

import "io"

// mapForSkim maps nothing here: the skim reads its input.
func mapForSkim(io.ReaderAt, int64) []byte { return nil }

func dropMapped([]byte, int64, int64) {}

func unmapForSkim([]byte) {}
