// Package tty is the caller's side of an interactive session: it puts the
// terminal airlock runs in into raw mode and restores it, reads its size,
// and names the escape sequences that undo what a program in a sandbox may
// have switched on in it.
package tty

// Reset undoes the terminal modes a full-screen program switches on and
// may leave on when it dies: attributes, a hidden cursor, the alternate
// screen, mouse reporting, bracketed paste, application cursor keys and
// keypad; then it pops the window title pushed by Start. A program in the
// sandbox writes what it likes to its own terminal, which is the
// caller's; this puts the caller's back as it was.
const Reset = "\x1b[0m" + // attributes
	"\x1b[?25h" + // cursor visible
	"\x1b[?1049l\x1b[?47l" + // main screen
	"\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1005l\x1b[?1006l\x1b[?1015l" + // no mouse reports
	"\x1b[?2004l" + // no bracketed paste
	"\x1b[?1004l" + // no focus reports
	"\x1b[?1l\x1b>" + // normal cursor keys and keypad
	"\x1b[r" + // the whole screen scrolls
	"\x1b[23;0t" // the title pushed by Start

// Start pushes the window title, so that Reset can restore it.
const Start = "\x1b[22;0t"

// Size is a terminal's size in characters.
type Size struct {
	Rows, Cols uint16
}
