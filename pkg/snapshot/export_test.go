package snapshot

import "io"

// ReadWithoutFlatDicts reads as Read does with the decoder's flat-dict path
// off, for the differential tests of external test packages.
func ReadWithoutFlatDicts(r io.Reader, size int64) (*Snapshot, error) {
	return readFlat(r, size, nil, false)
}
