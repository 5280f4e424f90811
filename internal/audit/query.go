package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Query selects events of a log, newest first. Empty fields match every
// event.
type Query struct {
	// Key is the id of the key that acted.
	Key string
	// Sandbox is the sandbox's id.
	Sandbox string
	// Kinds are the kinds wanted; none means every kind.
	Kinds []Kind
	// Since and Until bound the events' times (Since inclusive, Until
	// exclusive).
	Since, Until time.Time
	// Before is the cursor of a previous Page's Next: only lines before it.
	Before string
	// Limit is the most events returned: DefaultQueryLimit when zero, at
	// most MaxQueryLimit.
	Limit int
	// MaxScan bounds the bytes read by one query: DefaultQueryScan when
	// zero. A page that reached it has Next set, to go on from there.
	MaxScan int64
}

// Bounds of a Query.
const (
	DefaultQueryLimit = 100
	MaxQueryLimit     = 1000
	DefaultQueryScan  = 64 << 20
	// maxPageBytes bounds the events of one page together: a page that
	// reached it has Next set.
	maxPageBytes = 8 << 20
	// maxLineBytes is the longest line a query reads; a longer one is not
	// an audit log's (an event's code is at most 128 KiB).
	maxLineBytes = 16 << 20
)

// Page is the answer to a Query.
type Page struct {
	// Events are the matching lines as written, newest first.
	Events []json.RawMessage
	// Next is the cursor of the lines before this page (Query.Before);
	// empty when the page reached the start of the log, or Since.
	Next string
	// Scanned counts the bytes read.
	Scanned int64
}

// Query reads the log from its end (or from q.Before) towards its start
// and returns the events that match q. It reads only what was fsync'ed.
func (l *Log) Query(ctx context.Context, q Query) (Page, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return Page{}, fmt.Errorf("read audit log: %w", err)
	}
	defer f.Close()
	return QueryReader(ctx, f, l.committed.Load(), q)
}

// QueryReader is Query over the first size bytes of r, a log.
func QueryReader(ctx context.Context, r io.ReaderAt, size int64, q Query) (Page, error) {
	if q.Limit <= 0 {
		q.Limit = DefaultQueryLimit
	}
	q.Limit = min(q.Limit, MaxQueryLimit)
	if q.MaxScan <= 0 {
		q.MaxScan = DefaultQueryScan
	}
	end := size
	if q.Before != "" {
		off, err := strconv.ParseInt(q.Before, 10, 64)
		if err != nil || off <= 0 || off > size {
			return Page{}, fmt.Errorf("%w: cursor %q is not one this log gave: start again without it", sandbox.ErrInvalid, truncateText(q.Before, 40))
		}
		var b [1]byte
		if _, err := r.ReadAt(b[:], off-1); err != nil || b[0] != '\n' {
			return Page{}, fmt.Errorf("%w: cursor %q is not at a line of this log: start again without it", sandbox.ErrInvalid, truncateText(q.Before, 40))
		}
		end = off
	}
	m := newMatcher(q)
	page := Page{Events: []json.RawMessage{}}
	found := 0 // bytes of the events found
	sc := backScanner{r: r, pos: end}
	for {
		line, start, err := sc.prev()
		if errors.Is(err, io.EOF) {
			return page, nil
		}
		if err != nil {
			return page, fmt.Errorf("read audit log: %w", err)
		}
		page.Scanned = end - start
		ok, older := m.match(line)
		if older {
			return page, nil
		}
		if ok {
			page.Events = append(page.Events, json.RawMessage(slices.Clone(line)))
			found += len(line)
		}
		if start > 0 && (len(page.Events) >= q.Limit || page.Scanned >= q.MaxScan || found >= maxPageBytes || ctx.Err() != nil) {
			page.Next = strconv.FormatInt(start, 10)
			return page, ctx.Err()
		}
	}
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// matcher tests lines against a Query: first by bytes (cheap), then by
// the decoded fields.
type matcher struct {
	q       Query
	needles [][]byte
	kinds   map[Kind]bool
}

func newMatcher(q Query) *matcher {
	m := &matcher{q: q}
	// Lines are written by json.Marshal: a field's value is in the line
	// exactly as Marshal writes it.
	for _, f := range []struct{ name, v string }{{"key", q.Key}, {"sandbox", q.Sandbox}} {
		if f.v != "" {
			v, _ := json.Marshal(f.v)
			m.needles = append(m.needles, append([]byte(`"`+f.name+`":`), v...))
		}
	}
	if len(q.Kinds) > 0 {
		m.kinds = map[Kind]bool{}
		for _, k := range q.Kinds {
			m.kinds[k] = true
		}
	}
	return m
}

// clockSlack is how far back in time the log may step (the writer's clock
// set back): a query stops at the first event older than Since by more.
const clockSlack = 5 * time.Minute

// match says whether line matches, and whether it is older than Since by
// more than clockSlack (the log is in time order: nothing before it can
// match).
func (m *matcher) match(line []byte) (ok, older bool) {
	for _, n := range m.needles {
		if !bytes.Contains(line, n) {
			return false, false
		}
	}
	var ev struct {
		Time    time.Time `json:"time"`
		Kind    Kind      `json:"kind"`
		Key     string    `json:"key"`
		Sandbox string    `json:"sandbox"`
	}
	if err := json.Unmarshal(line, &ev); err != nil {
		// Not an event (an edited line): shown when nothing narrows the
		// query, so that it is not hidden.
		return len(m.needles) == 0 && m.kinds == nil && m.q.Since.IsZero() && m.q.Until.IsZero(), false
	}
	switch {
	case !m.q.Since.IsZero() && ev.Time.Before(m.q.Since):
		return false, ev.Time.Before(m.q.Since.Add(-clockSlack))
	case !m.q.Until.IsZero() && !ev.Time.Before(m.q.Until):
		return false, false
	case m.q.Key != "" && ev.Key != m.q.Key, m.q.Sandbox != "" && ev.Sandbox != m.q.Sandbox:
		return false, false
	case m.kinds != nil && !m.kinds[ev.Kind]:
		return false, false
	}
	return true, false
}

// backScanner reads the lines of r from pos towards the start.
type backScanner struct {
	r   io.ReaderAt
	pos int64  // the offset buf starts at
	buf []byte // bytes from pos to the end of the line last returned
}

const backChunk = 256 << 10

// prev returns the line before the last one returned (without its
// newline) and its offset, or io.EOF at the start.
func (s *backScanner) prev() ([]byte, int64, error) {
	for {
		body := s.buf
		if n := len(body); n > 0 && body[n-1] == '\n' {
			body = body[:n-1]
		}
		if i := bytes.LastIndexByte(body, '\n'); i >= 0 {
			s.buf = s.buf[:i+1]
			return body[i+1:], s.pos + int64(i) + 1, nil
		}
		if s.pos == 0 {
			if len(s.buf) == 0 {
				return nil, 0, io.EOF
			}
			s.buf = s.buf[:0]
			return body, 0, nil
		}
		if len(s.buf) > maxLineBytes {
			return nil, 0, fmt.Errorf("a line of more than %d bytes ends at offset %d: not an audit log's (run airlock audit verify on it)", maxLineBytes, s.pos+int64(len(s.buf)))
		}
		n := min(int64(backChunk), s.pos)
		chunk := make([]byte, n, n+int64(len(s.buf)))
		if _, err := s.r.ReadAt(chunk, s.pos-n); err != nil && !errors.Is(err, io.EOF) {
			return nil, 0, err
		}
		s.buf = append(chunk, s.buf...)
		s.pos -= n
	}
}

// VerifyLive verifies the log as the daemon has written it so far: every
// line fsync'ed, against the log's own key and, when the log stores one,
// its head.
func (l *Log) VerifyLive() (Report, error) {
	opts := VerifyOptions{PublicKey: l.PublicKey()}
	// The head first: it is stored after its checkpoint was written, so it
	// is never ahead of the length read next.
	if l.opts.HeadPath != "" {
		if h, err := ReadHead(l.opts.HeadPath); err == nil {
			opts.Head = &h
		} else if !errors.Is(err, os.ErrNotExist) {
			return Report{}, err
		}
	}
	size := l.committed.Load()
	f, err := os.Open(l.path)
	if err != nil {
		return Report{}, fmt.Errorf("read audit log: %w", err)
	}
	defer f.Close()
	return Verify(io.NewSectionReader(f, 0, size), opts)
}
