package pickle

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sort"
	"strconv"
	"strings"
)

// Canonical returns v in the canonical text form of testdata/canon.py:
// N None, T/F bools, i<decimal> ints, f<16 hex digits> floats (IEEE bits),
// s<hex utf-8> str, b<hex> bytes, [..] lists, (..) tuples, {k:v,..} dicts
// in insertion order, <..> sets sorted by their items' text. Two decoders
// (or CPython) agree on a pickle when they give the same text.
func Canonical(vs *Values, v Value) string {
	var b strings.Builder
	canonicalTo(vs, v, &b)
	return b.String()
}

func canonicalTo(vs *Values, v Value, b *strings.Builder) {
	v = vs.Resolve(v)
	switch v.Kind {
	case KindNone:
		b.WriteByte('N')
	case KindBool:
		if v.N != 0 {
			b.WriteByte('T')
		} else {
			b.WriteByte('F')
		}
	case KindInt:
		b.WriteByte('i')
		b.WriteString(strconv.FormatInt(int64(v.N), 10))
	case KindBigInt:
		b.WriteByte('i')
		b.WriteString(vs.BigInt(v).String())
	case KindFloat:
		var w [8]byte
		binary.BigEndian.PutUint64(w[:], v.N)
		b.WriteByte('f')
		b.WriteString(hex.EncodeToString(w[:]))
	case KindString:
		b.WriteByte('s')
		b.WriteString(hex.EncodeToString([]byte(vs.Text(v))))
	case KindBytes:
		b.WriteByte('b')
		b.WriteString(hex.EncodeToString([]byte(vs.Text(v))))
	case KindList, KindTuple:
		open, close := byte('['), byte(']')
		if v.Kind == KindTuple {
			open, close = '(', ')'
		}
		b.WriteByte(open)
		for i, x := range vs.Items(v) {
			if i > 0 {
				b.WriteByte(',')
			}
			canonicalTo(vs, x, b)
		}
		b.WriteByte(close)
	case KindDict:
		b.WriteByte('{')
		items := vs.Items(v)
		for i := 0; i+1 < len(items); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			canonicalTo(vs, items[i], b)
			b.WriteByte(':')
			canonicalTo(vs, items[i+1], b)
		}
		b.WriteByte('}')
	case KindSet:
		var parts []string
		for _, x := range vs.Items(v) {
			parts = append(parts, Canonical(vs, x))
		}
		sort.Strings(parts)
		b.WriteString("<" + strings.Join(parts, ",") + ">")
	default:
		b.WriteString("?" + v.Kind.String())
	}
}

// Digest returns the sha256 (hex) of v as testdata/canon.py --digest
// computes it: scalars hash their canonical text, containers the digests of
// their items, so a container shared through the memo is hashed once. It
// compares large decoded values (whole snapshots) across decoders cheaply.
// Records a compactor made have no digest of their own ("?record").
func Digest(vs *Values, v Value) string {
	return digestCached(vs, v, make(map[uint64]string))
}

func digestCached(vs *Values, v Value, cache map[uint64]string) string {
	v = vs.Resolve(v)
	if !v.IsContainer() {
		return sha256Hex(Canonical(vs, v))
	}
	if h, ok := cache[v.N]; ok {
		return h
	}
	items := vs.Items(v)
	var parts []string
	if v.Kind == KindDict {
		for i := 0; i+1 < len(items); i += 2 {
			parts = append(parts, digestCached(vs, items[i], cache)+":"+digestCached(vs, items[i+1], cache))
		}
	} else {
		for _, x := range items {
			parts = append(parts, digestCached(vs, x, cache))
		}
	}
	var text string
	switch v.Kind {
	case KindDict:
		text = "{" + strings.Join(parts, ",") + "}"
	case KindSet:
		sort.Strings(parts)
		text = "<" + strings.Join(parts, ",") + ">"
	case KindTuple:
		text = "(" + strings.Join(parts, ",") + ")"
	default:
		text = "[" + strings.Join(parts, ",") + "]"
	}
	h := sha256Hex(text)
	cache[v.N] = h
	return h
}

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}
