package view

import "github.com/memstat/memstat/pkg/series"

// column scans entries lo..hi of allocated memory a: the first entry
// where it is highest and its lowest value. It is generic over the two
// representations so that the loop of the whole-trace window, millions of
// entries, reads the array directly.
func column[A uint32 | int64](a []A, lo, hi int) (best int, amin A) {
	best, amin = lo, a[lo]
	top := a[lo]
	for i := lo + 1; i <= hi; i++ {
		v := a[i]
		if v > top {
			best, top = i, v
		}
		amin = min(amin, v)
	}
	return best, amin
}

// columnOf is column on the model's figures, in bytes.
func columnOf(a *series.Bytes, lo, hi int) (best int, amin int64) {
	if u, shift := a.Units(); u != nil {
		b, x := column(u, lo, hi)
		return b, int64(x) << shift
	}
	return column(a.Wide(), lo, hi)
}
