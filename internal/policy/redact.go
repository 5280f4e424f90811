package policy

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Redact says which secrets are masked in an exec's output before it is
// returned or logged, and in the argv and code the audit log records. A
// secret is masked where it appears whole within one line; this guards
// against accidental echoes, not against code that leaks a value on
// purpose (split, reversed or encoded, it passes).
//
//	[redact]
//	env = ["OPENAI_API_KEY"]            # the daemon's own values of these variables
//	values = ["s3cr3t-token"]           # literal values
//	patterns = ['sk-[A-Za-z0-9]{20,}']  # RE2 regular expressions
type Redact struct {
	Env      []string `toml:"env"`
	Values   []string `toml:"values"`
	Patterns []string `toml:"patterns"`
}

// Mask replaces each secret.
const Mask = "[REDACTED]"

// Redactor masks secrets. The zero of *Redactor (nil) masks nothing.
type Redactor struct {
	values []string // longest first
	re     []*regexp.Regexp
}

// minSecret is the shortest value masked: shorter ones would mask
// ordinary text.
const minSecret = 6

// NewRedactor makes a Redactor from literal values and patterns; it
// returns nil when there is nothing to mask.
func NewRedactor(values, patterns []string) (*Redactor, error) {
	r := &Redactor{}
	for _, v := range values {
		if len(v) >= minSecret {
			r.values = append(r.values, v)
		}
	}
	slices.SortFunc(r.values, func(a, b string) int { return len(b) - len(a) })
	for _, p := range patterns {
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("redact pattern %q: %w", p, err)
		}
		if re.MatchString("") {
			return nil, fmt.Errorf("redact pattern %q matches the empty string", p)
		}
		r.re = append(r.re, re)
	}
	if len(r.values) == 0 && len(r.re) == 0 {
		return nil, nil
	}
	return r, nil
}

func (c Redact) compile() (*Redactor, error) {
	values := slices.Clone(c.Values)
	for _, e := range c.Env {
		if v := os.Getenv(e); v != "" {
			values = append(values, v)
		}
	}
	return NewRedactor(values, c.Patterns)
}

// String masks s.
func (r *Redactor) String(s string) string {
	if r == nil {
		return s
	}
	for _, v := range r.values {
		s = strings.ReplaceAll(s, v, Mask)
	}
	for _, re := range r.re {
		s = re.ReplaceAllLiteralString(s, Mask)
	}
	return s
}

// Strings masks each of ss (a copy; nil stays nil).
func (r *Redactor) Strings(ss []string) []string {
	if r == nil || ss == nil {
		return ss
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = r.String(s)
	}
	return out
}

// maxHeld bounds how much a Writer holds back waiting for a line's end.
const maxHeld = 64 << 10

// Writer returns a writer that masks what it passes on to w, line by line
// (a secret split across a line break, or across a line longer than 64
// KiB, is not masked). Call Flush at the end. With a nil Redactor it is
// w itself wrapped with a no-op Flush.
func (r *Redactor) Writer(w io.Writer) *RedactWriter {
	return &RedactWriter{r: r, w: w}
}

// RedactWriter is a masking writer; see Redactor.Writer.
type RedactWriter struct {
	r   *Redactor
	w   io.Writer
	mu  sync.Mutex
	buf []byte
}

// Write masks complete lines and passes them on; the rest waits.
func (rw *RedactWriter) Write(p []byte) (int, error) {
	if rw.w == nil {
		return len(p), nil
	}
	if rw.r == nil {
		return rw.w.Write(p)
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.buf = append(rw.buf, p...)
	end := bytes.LastIndexByte(rw.buf, '\n') + 1
	if end == 0 && len(rw.buf) >= maxHeld {
		end = len(rw.buf)
	}
	if end > 0 {
		out := rw.r.String(string(rw.buf[:end]))
		rw.buf = append(rw.buf[:0], rw.buf[end:]...)
		if _, err := io.WriteString(rw.w, out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Flush masks and passes on what is held.
func (rw *RedactWriter) Flush() error {
	if rw.w == nil || rw.r == nil {
		return nil
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if len(rw.buf) == 0 {
		return nil
	}
	out := rw.r.String(string(rw.buf))
	rw.buf = rw.buf[:0]
	_, err := io.WriteString(rw.w, out)
	return err
}
