package supervisor

import (
	"context"
	"crypto/subtle"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// This file holds what the E2B endpoints need beyond processes and files:
// code run by an interpreter that already runs in a sandbox (a cell of a
// Jupyter kernel), and a sandbox's token.

// CellEnd records a cell's end: its result and the SHA-256 (hex) of the
// output its caller got.
type CellEnd func(res sandbox.Result, stdoutSHA256, stderrSHA256 string)

// Cell admits code that an interpreter process already running in sandbox
// id is to run (a cell of a Jupyter kernel): it counts as an exec of code in
// language with the given timeout, in dir (the interpreter's working
// directory; "" is the home), which the policy sees as path as it sees an
// exec's. The key's exec rate is taken and one of
// its in-flight slots held (the returned context carries it), the policy
// decides action exec with Code and Language (an ask waits for a person),
// and the sandbox is busy (its idle timeout waits) until end is called,
// which records the cell in the audit log as an exec. end must be called
// once; its context is done when the admission's is.
func (s *Supervisor) Cell(ctx context.Context, c Caller, id, language, code, dir string, timeout time.Duration) (context.Context, CellEnd, error) {
	ctx, release, err := s.Begin(ctx, c, OpExec)
	if err != nil {
		return nil, nil, err
	}
	l, err := s.lookup(c, id)
	if err != nil {
		release()
		return nil, nil, err
	}
	pr := l.request(policy.Request{Action: policy.ActionExec, Code: code, Language: language, Path: execDir(dir), Limits: &sandbox.Limits{Timeout: timeout}})
	if err := s.decide(ctx, c, pr); err != nil {
		release()
		return nil, nil, err
	}
	l.busy.Add(1)
	l.touch(s.opts.Now())
	start := time.Now()
	end := func(res sandbox.Result, stdoutSum, stderrSum string) {
		defer release()
		l.touch(s.opts.Now())
		l.busy.Add(-1)
		s.m.ExecSeconds.Observe(time.Since(start).Seconds())
		s.recordExec(context.WithoutCancel(ctx), c, pr, res, stdoutSum, stderrSum, nil)
	}
	return ctx, end, nil
}

// EnsureToken gives sandbox id the token tok unless it has one already,
// and returns the token it has: the E2B endpoints' connect issues a token
// to a sandbox made without one (through airlock's own API).
func (s *Supervisor) EnsureToken(ctx context.Context, c Caller, id, tok string) (string, error) {
	if tok == "" || len(tok) > maxToken {
		return "", fmt.Errorf("%w: token: give 1 to %d bytes", sandbox.ErrInvalid, maxToken)
	}
	l, err := s.lookup(c, id)
	if err != nil {
		return "", err
	}
	rec, err := s.store.UpdateSandbox(id, func(r *store.Sandbox) error {
		if r.Token == "" {
			r.Token = tok
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	l.mu.Lock()
	l.rec.Token = rec.Token
	l.mu.Unlock()
	return rec.Token, nil
}

// TokenMatches says, in constant time, whether tok is sandbox rec's token
// (never when it has none).
func TokenMatches(rec Info, tok string) bool {
	return rec.Token != "" && subtle.ConstantTimeCompare([]byte(rec.Token), []byte(tok)) == 1
}

// Sandbox describes sandbox id whoever owns it, for a caller that proves
// its right to it otherwise (the E2B endpoints' envd calls carry the
// sandbox's token, not a key): see TokenMatches. The owner's key is
// Info.Owner.
func (s *Supervisor) Sandbox(ctx context.Context, id string) (Info, error) {
	return s.Get(ctx, Caller{Operator: true}, id)
}

// SandboxGated is Sandbox for a request not yet shown to hold the
// sandbox's token: a sandbox this daemon does not hold is looked for in
// the object store (paused on another daemon sharing it) only when gate
// says yes, so that requests for ids guessed cost the store a read only
// as often as gate allows (the E2B endpoints' rate limit of strangers).
func (s *Supervisor) SandboxGated(ctx context.Context, id string, gate func() bool) (Info, error) {
	return s.get(ctx, Caller{Operator: true}, id, gate)
}
