package report

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Terminal safety. Frame, file, annotation and stream names come from the
// snapshot, which may be hostile: an escape sequence in a frame name could
// set the terminal's title, clear the screen or hide lines. Every text
// rendering (tables, Doc lines, titles, lists and preformatted blocks, and
// the messages on stderr) passes its text through Escape, so no control
// character from a file reaches the terminal. JSON is escaped by
// encoding/json; CSV keeps the data as it is (it is data for programs).

// Escape replaces the control characters of s (C0, DEL, C1, and bytes that
// are not UTF-8) by Go escapes (\x1b, \n, \u009b), so that the text shows
// what the file holds and the terminal interprets none of it.
func Escape(s string) string {
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == 0x7f || c >= 0x80 {
			break
		}
	}
	if i == len(s) {
		return s // the common case: printable ASCII
	}
	if !needsEscape(s[i:]) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for _, r := range s[i:] {
		writeEscaped(&b, r)
	}
	return b.String()
}

func needsEscape(s string) bool {
	for _, r := range s {
		if isControl(r) {
			return true
		}
	}
	return false
}

func isControl(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0, r == utf8.RuneError:
		return true
	}
	return false
}

func writeEscaped(b *strings.Builder, r rune) {
	if !isControl(r) {
		b.WriteRune(r)
		return
	}
	switch r {
	case '\n':
		b.WriteString(`\n`)
	case '\r':
		b.WriteString(`\r`)
	case '\t':
		b.WriteString(`\t`)
	case utf8.RuneError:
		b.WriteString(`\ufffd`)
	default:
		if r < 0x80 {
			fmt.Fprintf(b, `\x%02x`, r)
		} else {
			fmt.Fprintf(b, `\u%04x`, r)
		}
	}
}
