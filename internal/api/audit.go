package api

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
)

// AuditEvents is the answer of GET /v1/audit: a page of the audit log's
// events that match the query, oldest first, each as written, and the
// cursor of the page before it.
type AuditEvents struct {
	Events []json.RawMessage `json:"events"`
	// Next, given as before, reads the events before these; empty when
	// there are none (the start of the log, or since).
	Next string `json:"next,omitempty"`
}

// auditKinds are the kinds a query may name.
var auditKinds = []audit.Kind{
	audit.KindCreate, audit.KindDestroy, audit.KindExec, audit.KindFileWrite, audit.KindFileDelete,
	audit.KindSnapshot, audit.KindRestore, audit.KindSnapshotDelete, audit.KindFork,
	audit.KindEgress, audit.KindPolicy, audit.KindApproval, audit.KindCheckpoint, audit.KindRecover,
	audit.KindCowApply, audit.KindCowDiscard, audit.KindCowRecover, audit.KindExpose,
	audit.KindPause, audit.KindResume,
}

// auditQuery reads the query parameters of GET /v1/audit.
func auditQuery(r *http.Request) (audit.Query, error) {
	v := r.URL.Query()
	q := audit.Query{Key: v.Get("key"), Sandbox: v.Get("sandbox"), Before: v.Get("before"), Limit: audit.DefaultQueryLimit}
	if n := v.Get("n"); n != "" {
		l, err := strconv.Atoi(n)
		if err != nil || l < 1 || l > audit.MaxQueryLimit {
			return q, badRequest("n: give a number from 1 to %d", audit.MaxQueryLimit)
		}
		q.Limit = l
	}
	if len(q.Key) > 200 || len(q.Sandbox) > 200 || len(q.Before) > 40 {
		return q, badRequest("key, sandbox and before: at most 200 bytes")
	}
	for _, ks := range v["kind"] {
		for k := range strings.SplitSeq(ks, ",") {
			if k = strings.TrimSpace(k); k == "" {
				continue
			}
			if !slices.Contains(auditKinds, audit.Kind(k)) {
				names := make([]string, len(auditKinds))
				for i, k := range auditKinds {
					names[i] = string(k)
				}
				return q, badRequest("kind %q: use one of %s", truncate(k, 40), strings.Join(names, ", "))
			}
			q.Kinds = append(q.Kinds, audit.Kind(k))
		}
	}
	for _, f := range []struct {
		name string
		t    *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		if s := v.Get(f.name); s != "" {
			t, err := time.Parse(time.RFC3339, s)
			if err != nil {
				return q, badRequest("%s %q: give a time like 2026-01-02T15:04:05Z", f.name, truncate(s, 40))
			}
			*f.t = t
		}
	}
	return q, nil
}

func (s *Server) recentAudit(w http.ResponseWriter, r *http.Request, c *caller) error {
	q, err := auditQuery(r)
	if err != nil {
		return err
	}
	out := AuditEvents{Events: []json.RawMessage{}}
	l := s.sup.AuditLog()
	if l == nil {
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	p, err := l.Query(r.Context(), q)
	if err != nil {
		return err
	}
	slices.Reverse(p.Events)
	out.Events, out.Next = p.Events, p.Next
	writeJSON(w, http.StatusOK, out)
	return nil
}

// AuditVerification is the answer of GET /v1/audit/verify: what checking
// the audit log's chain and signatures found, as `airlock audit verify`
// does, over every line the daemon has written.
type AuditVerification struct {
	// OK says no line is wrong; Problems says which are (at most
	// maxProblems of ProblemCount), by line number (= seq).
	OK           bool            `json:"ok"`
	Problems     []audit.Problem `json:"problems"`
	ProblemCount int             `json:"problem_count"`
	Lines        int             `json:"lines"`
	Checkpoints  int             `json:"checkpoints"`
	// LastCheckpoint is the line of the last signed checkpoint; Unsealed
	// counts the lines after it, which no signature covers yet.
	LastCheckpoint int       `json:"last_checkpoint"`
	Unsealed       int       `json:"unsealed"`
	Recovered      []int     `json:"recovered,omitempty"`
	VerifiedAt     time.Time `json:"verified_at"`
	TookMS         int64     `json:"took_ms"`
}

const maxProblems = 100

// auditVerifier runs one verification at a time and lets requests that
// come within verifyReuse of one share its answer.
type auditVerifier struct {
	mu   sync.Mutex
	last AuditVerification
}

const verifyReuse = 2 * time.Second

func (s *Server) verifyAudit(w http.ResponseWriter, r *http.Request, c *caller) error {
	l := s.sup.AuditLog()
	if l == nil {
		return &Error{Status: http.StatusNotFound, Code: "not_found", Message: "this daemon keeps no audit log"}
	}
	v := &s.verifier
	v.mu.Lock()
	defer v.mu.Unlock()
	if time.Since(v.last.VerifiedAt) > verifyReuse {
		start := time.Now()
		rep, err := l.VerifyLive()
		if err != nil {
			return err
		}
		v.last = AuditVerification{
			OK: rep.OK(), Problems: rep.Problems[:min(len(rep.Problems), maxProblems)], ProblemCount: len(rep.Problems),
			Lines: rep.Lines, Checkpoints: rep.Checkpoints, LastCheckpoint: rep.LastCheckpoint, Unsealed: rep.Unsealed,
			Recovered: rep.Recovered, VerifiedAt: time.Now().UTC(), TookMS: time.Since(start).Milliseconds(),
		}
		if v.last.Problems == nil {
			v.last.Problems = []audit.Problem{}
		}
	}
	writeJSON(w, http.StatusOK, v.last)
	return nil
}
