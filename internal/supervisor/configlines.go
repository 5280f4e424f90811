package supervisor

import (
	"fmt"
	"regexp"
	"strings"
)

// keyLines maps key paths of a TOML text to the lines that set them: the
// indexed path of every key and table ("template[1].memory",
// "egress.secret[0]"), and the unindexed path of each one's first
// occurrence ("template.memory"). The TOML parser keeps no position per
// array element, so this scanner finds them; it reads only what the parser
// has accepted, and on anything else stops short rather than guess.
type keyLines map[string]int

// find returns the line of key, or of the nearest enclosing table or key
// that is in the file; 0 when none is.
func (l keyLines) find(key string) int {
	for key != "" {
		if n, ok := l[key]; ok {
			return n
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 0
}

func scanKeys(src string) keyLines {
	s := &keyScanner{src: src, line: 1, out: keyLines{}, arrays: map[string]int{}}
	s.document()
	return s.out
}

var indexRE = regexp.MustCompile(`\[[0-9]+\]`)

func unindexed(key string) string { return indexRE.ReplaceAllString(key, "") }

type keyScanner struct {
	src    string
	i      int
	line   int
	out    keyLines
	arrays map[string]int // indexed path of each array of tables: its length so far
	table  string         // indexed path of the current table
}

func (s *keyScanner) record(path string, line int) {
	s.out[path] = line
	if u := unindexed(path); u != path {
		if _, ok := s.out[u]; !ok {
			s.out[u] = line
		}
	}
}

func (s *keyScanner) peek() byte {
	if s.i < len(s.src) {
		return s.src[s.i]
	}
	return 0
}

func (s *keyScanner) advance() {
	if s.i < len(s.src) {
		if s.src[s.i] == '\n' {
			s.line++
		}
		s.i++
	}
}

// blank skips spaces and tabs, and with newlines also line ends and comments.
func (s *keyScanner) blank(newlines bool) {
	for s.i < len(s.src) {
		switch c := s.src[s.i]; {
		case c == ' ' || c == '\t' || c == '\r':
			s.i++
		case newlines && c == '\n':
			s.advance()
		case newlines && c == '#':
			for s.i < len(s.src) && s.src[s.i] != '\n' {
				s.i++
			}
		default:
			return
		}
	}
}

func (s *keyScanner) restOfLine() {
	for s.i < len(s.src) && s.src[s.i] != '\n' {
		s.i++
	}
}

func (s *keyScanner) document() {
	for {
		s.blank(true)
		if s.i >= len(s.src) {
			return
		}
		start := s.i
		if s.peek() == '[' {
			s.header()
		} else {
			s.keyValue(s.table)
		}
		if s.i == start {
			s.restOfLine()
		}
		// A comment or whatever this scanner did not read ends the line.
		s.restOfLine()
	}
}

func (s *keyScanner) header() {
	line := s.line
	array := strings.HasPrefix(s.src[s.i:], "[[")
	if array {
		s.i += 2
	} else {
		s.i++
	}
	parts := s.key()
	if len(parts) == 0 {
		return
	}
	s.blank(false)
	if array {
		parent := s.resolve("", parts[:len(parts)-1])
		p := join(parent, parts[len(parts)-1])
		n := s.arrays[p]
		s.arrays[p] = n + 1
		s.table = fmt.Sprintf("%s[%d]", p, n)
		s.i += strings.Index(s.src[s.i:]+"]]", "]]") + 2
	} else {
		s.table = s.resolve("", parts)
		if s.peek() == ']' {
			s.i++
		}
	}
	s.record(s.table, line)
}

// resolve appends the key parts to base, each array of tables among them
// standing for its last element.
func (s *keyScanner) resolve(base string, parts []string) string {
	p := base
	for _, part := range parts {
		p = join(p, part)
		if n, ok := s.arrays[p]; ok {
			p = fmt.Sprintf("%s[%d]", p, n-1)
		}
	}
	return p
}

func join(base, part string) string {
	if base == "" {
		return part
	}
	return base + "." + part
}

func (s *keyScanner) keyValue(base string) {
	line := s.line
	parts := s.key()
	s.blank(false)
	if len(parts) == 0 || s.peek() != '=' {
		return
	}
	s.i++
	path := s.resolve(base, parts)
	s.record(path, line)
	s.value(path)
}

// key reads a dotted key: bare, "basic" or 'literal' parts.
func (s *keyScanner) key() []string {
	var parts []string
	for {
		s.blank(false)
		var part string
		switch c := s.peek(); {
		case c == '"':
			part = s.str('"', true)
		case c == '\'':
			part = s.str('\'', false)
		default:
			start := s.i
			for s.i < len(s.src) && isBare(s.src[s.i]) {
				s.i++
			}
			if s.i == start {
				return parts
			}
			part = s.src[start:s.i]
		}
		parts = append(parts, part)
		s.blank(false)
		if s.peek() != '.' {
			return parts
		}
		s.i++
	}
}

func isBare(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// str reads a one-line string quoted with q and returns its raw content.
func (s *keyScanner) str(q byte, escapes bool) string {
	s.i++
	start := s.i
	for s.i < len(s.src) && s.src[s.i] != q && s.src[s.i] != '\n' {
		if escapes && s.src[s.i] == '\\' {
			s.i++
		}
		s.i++
	}
	end := min(s.i, len(s.src))
	if s.peek() == q {
		s.i++
	}
	return s.src[start:end]
}

// multiline skips a string delimited by three q's, and the one or two more
// q's its closing may have.
func (s *keyScanner) multiline(q byte, escapes bool) {
	delim := strings.Repeat(string(q), 3)
	s.i += 3
	for s.i < len(s.src) && !strings.HasPrefix(s.src[s.i:], delim) {
		if escapes && s.src[s.i] == '\\' {
			s.advance()
		}
		s.advance()
	}
	s.i += min(3, len(s.src)-s.i)
	for n := 0; n < 2 && s.peek() == q; n++ {
		s.i++
	}
}

// value skips a value, recording the keys of inline tables in it.
func (s *keyScanner) value(path string) {
	s.blank(false)
	switch c := s.peek(); {
	case c == '"' || c == '\'':
		if strings.HasPrefix(s.src[s.i:], strings.Repeat(string(c), 3)) {
			s.multiline(c, c == '"')
		} else {
			s.str(c, c == '"')
		}
	case c == '[':
		s.i++
		for n := 0; ; {
			s.blank(true)
			switch s.peek() {
			case 0:
				return
			case ']':
				s.i++
				return
			case ',':
				s.i++
				n++
				continue
			}
			start := s.i
			s.value(fmt.Sprintf("%s[%d]", path, n))
			if s.i == start {
				return
			}
		}
	case c == '{':
		s.i++
		for {
			s.blank(true)
			switch s.peek() {
			case 0:
				return
			case '}':
				s.i++
				return
			case ',':
				s.i++
				continue
			}
			start := s.i
			s.keyValue(path)
			if s.i == start {
				return
			}
		}
	default:
		for s.i < len(s.src) && !strings.ContainsRune(",]}#\n", rune(s.src[s.i])) {
			s.i++
		}
	}
}
