// Package termsafe renders text that a sandbox controls (file content,
// file and sandbox names, process output, audit fields) so that a terminal
// shows every character as itself, or as a visible mark: nothing printed
// can move the cursor, rewrite a line, set the window's title, reorder
// text (bidi overrides) or hide in plain sight (zero-width characters).
//
// The rule is the console's (internal/api/ui/core.js, hidden): a
// character is shown as itself when it is a letter, mark, number,
// punctuation, symbol or space (Unicode's graphic characters), or a
// newline or tab in text; every other one — C0 and C1 controls, DEL, bidi
// overrides and isolates, zero-width and other format characters, line
// and paragraph separators, private-use and unassigned code points — is
// written as ⟨U+XXXX⟩, and a byte that is not UTF-8 as ⟨0xXX⟩.
//
//	fmt.Fprint(out, termsafe.Text(diff))            // content: newlines and tabs kept
//	fmt.Fprintf(out, "%s\n", termsafe.Name(path))   // a name: newlines and tabs marked too
package termsafe

import (
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Hidden says whether r would not show as itself on a terminal: every
// character that is not graphic (letters, marks, numbers, punctuation,
// symbols, spaces). Newline and tab are hidden too: Text keeps them,
// Name and JSON mark them.
func Hidden(r rune) bool { return !unicode.IsGraphic(r) }

// Text returns s with each hidden character but newline and tab as
// ⟨U+XXXX⟩ and each byte that is not UTF-8 as ⟨0xXX⟩. Text of its own
// result is the same: it can be applied twice.
func Text(s string) string { return render(s, false) }

// Name returns s as Text does, with newlines and tabs marked too: in a
// file name, a sandbox's name or a label they are never what they seem.
func Name(s string) string { return render(s, true) }

// Count returns how many characters (and bytes that are not UTF-8) Text
// marks in s.
func Count(s string) int {
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size <= 1) || (Hidden(r) && r != '\n' && r != '\t') {
			n++
		}
		i += size
	}
	return n
}

func render(s string, names bool) string {
	if clean(s, names) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, "⟨0x%02X⟩", s[i])
		case Hidden(r) && (names || (r != '\n' && r != '\t')):
			fmt.Fprintf(&b, "⟨U+%04X⟩", r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// clean says whether render leaves s as it is.
func clean(s string, names bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 {
			return false // the slow path decides
		}
		if c < 0x20 || c == 0x7f {
			if names || (c != '\n' && c != '\t') {
				return false
			}
		}
	}
	return true
}

// JSON returns a line of JSON with every hidden character (newline and
// tab included, but a newline that ends the line) written as a \u escape:
// the same JSON value, and what a person reads is what it holds. Outside
// strings JSON has no such characters; bytes that are not UTF-8 (a damaged
// line) become U+FFFD.
func JSON(line string) string {
	var b strings.Builder
	for i, r := range line {
		switch {
		case r == '\n' && i == len(line)-1:
			b.WriteRune(r)
		case Hidden(r):
			if r > 0xffff {
				r1, r2 := utf16.EncodeRune(r)
				fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Writer writes what is written to it to W as Text renders it, for a
// stream (a process's output): a character split between two writes is
// rendered whole. Close (or Flush) writes what a last incomplete
// character left as ⟨0xXX⟩.
type Writer struct {
	W       io.Writer
	pending []byte
}

// NewWriter returns a Writer to w.
func NewWriter(w io.Writer) *Writer { return &Writer{W: w} }

// Write renders p; it reports len(p) when W took all of it.
func (w *Writer) Write(p []byte) (int, error) {
	buf := append(w.pending, p...)
	// Keep an incomplete character at the end for the next write.
	cut := len(buf)
	for k := 1; k <= utf8.UTFMax-1 && k <= len(buf); k++ {
		c := buf[len(buf)-k]
		if c < 0x80 {
			break
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(buf[len(buf)-k:]) {
				cut = len(buf) - k
			}
			break
		}
	}
	w.pending = append([]byte(nil), buf[cut:]...)
	if _, err := io.WriteString(w.W, Text(string(buf[:cut]))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes an incomplete character kept from the last write.
func (w *Writer) Flush() error {
	if len(w.pending) == 0 {
		return nil
	}
	s := Text(string(w.pending))
	w.pending = nil
	_, err := io.WriteString(w.W, s)
	return err
}

// Close flushes.
func (w *Writer) Close() error { return w.Flush() }
