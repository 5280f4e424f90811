package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// This file holds the policy and audit hooks: every create, exec and
// file write or delete is decided by the policy before it happens, and
// recorded in the audit log (when there is one) after.

const kindApproval = audit.KindApproval

// ErrAudit: the audit log could not record an action, so it was refused.
var ErrAudit = errors.New("audit log unavailable")

// auditEvent starts an event for r on behalf of c.
func (s *Supervisor) auditEvent(kind audit.Kind, c Caller, r policy.Request) audit.Event {
	red := s.policy.Redactor()
	ev := audit.Event{Kind: kind, Key: c.KeyID, Sandbox: r.Sandbox, Template: r.Template, Path: r.Path, Host: r.Host, Language: r.Language, Code: red.String(r.Code)}
	if r.Code == "" {
		ev.Argv = red.Strings(r.Argv)
	}
	return ev
}

// record appends ev to the audit log, if there is one. Failing to record
// refuses the action (fail closed).
func (s *Supervisor) record(ctx context.Context, ev audit.Event) error {
	if s.opts.Audit == nil {
		return nil
	}
	if err := s.opts.Audit.Append(context.WithoutCancel(ctx), ev); err != nil {
		s.log.Error("audit append failed", "kind", ev.Kind, "err", err)
		return fmt.Errorf("%w: %w", ErrAudit, err)
	}
	return nil
}

// recordAfter records an action that already happened; a failure is only
// logged.
func (s *Supervisor) recordAfter(ctx context.Context, ev audit.Event) {
	_ = s.record(ctx, ev)
}

// decide asks the policy about r, records the decision, and waits for a
// person when the policy asks for one. It returns nil when r may go
// ahead, or a *policy.Denied.
func (s *Supervisor) decide(ctx context.Context, c Caller, r policy.Request) error {
	r.Key = c.KeyID
	d, err := s.policy.Decide(ctx, r)
	if err != nil {
		s.log.Error("policy evaluation failed; denying", "err", err)
		d = policy.Decision{Verdict: policy.Deny, Rule: d.Rule, Reason: "the policy could not be evaluated"}
	}
	ev := s.auditEvent(audit.KindPolicy, c, r)
	ev.Decision, ev.Rule, ev.Reason = string(d.Verdict), d.Rule, string(r.Action)+": "+d.Reason
	if err := s.record(ctx, ev); err != nil {
		return err
	}
	switch d.Verdict {
	case policy.Allow:
	case policy.Ask:
		if s.opts.NoApprover && s.askerFor(ctx) == nil {
			d.Verdict, d.Reason = policy.Deny, d.Reason+" (needs a person's approval, and nobody can approve here: run it through `airlock serve`, or from an MCP client that supports elicitation)"
			return &policy.Denied{Decision: d}
		}
		if err := s.ask(ctx, c, r, d); err != nil {
			return err
		}
	default:
		return &policy.Denied{Decision: d}
	}
	if r.Action == policy.ActionExec {
		s.countExec(r.Sandbox)
	}
	return nil
}

// request fills the sandbox's identity into r, and writes a file path (of
// a write, a delete, an exec's directory, their audit events) as the
// policy judges it: sandbox.PolicyPath, absolute, clean, the home as
// /workspace. Every file path the policy sees of a sandbox passes here.
// An egress request's path is a URL's, left as it is.
func (l *live) request(r policy.Request) policy.Request {
	l.mu.Lock()
	r.Sandbox, r.Template, r.Driver = l.rec.ID, l.rec.Template, l.rec.Driver
	if r.Action != policy.ActionEgress {
		r.Path = sandbox.PolicyPath(l.rec.Spec.Home, r.Path)
	}
	l.mu.Unlock()
	return r
}

// hashWriter passes writes on to w (when not nil) and hashes them.
type hashWriter struct {
	w io.Writer
	h hash.Hash
}

func newHashWriter(w io.Writer) *hashWriter { return &hashWriter{w: w, h: sha256.New()} }

func (h *hashWriter) Write(p []byte) (int, error) {
	h.h.Write(p)
	if h.w == nil {
		return len(p), nil
	}
	return h.w.Write(p)
}

func (h *hashWriter) sum() string { return hex.EncodeToString(h.h.Sum(nil)) }

// guardedFiles puts the policy and the audit log in front of a sandbox's
// file API: writes, directory creation, moves and removals are decided
// first and recorded after. Reads pass through.
//
// A write is judged, recorded and done on the path it really lands on:
// its directories' symlinks resolved inside the sandbox (Resolve), and
// written through the file API's NoFollow view, which follows no symlink
// on the way, so a command that swaps a directory for a symlink meanwhile
// makes the write fail rather than land elsewhere.
type guardedFiles struct {
	sandbox.Files
	s *Supervisor
	c Caller
	l *live
}

// NoFollow is the same guard: every write already follows no symlink.
func (g *guardedFiles) NoFollow() sandbox.Files { return g }

// target resolves path for a write and has the policy judge it: the
// resolved path, and the path as asked when they differ (the stricter
// verdict wins), each as the policy names it (live.request).
func (g *guardedFiles) target(ctx context.Context, a policy.Action, path string) (string, error) {
	real, err := g.Files.Resolve(ctx, path)
	if err != nil {
		return "", err
	}
	if err := g.check(ctx, a, real); err != nil {
		return "", err
	}
	if g.l.request(policy.Request{Path: real}).Path != g.l.request(policy.Request{Path: path}).Path {
		if err := g.check(ctx, a, path); err != nil {
			return "", err
		}
	}
	return real, nil
}

func (g *guardedFiles) check(ctx context.Context, a policy.Action, path string) error {
	return g.s.decide(ctx, g.c, g.l.request(policy.Request{Action: a, Path: path}))
}

func (g *guardedFiles) done(ctx context.Context, kind audit.Kind, path string, sum string, size int64, err error) {
	ev := g.s.auditEvent(kind, g.c, g.l.request(policy.Request{Path: path}))
	ev.SHA256, ev.Size = sum, size
	if err != nil {
		ev.Error = err.Error()
	}
	g.s.recordAfter(ctx, ev)
}

type countReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	return n, err
}

func (g *guardedFiles) WriteFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error {
	real, err := g.target(ctx, policy.ActionFileWrite, path)
	if err != nil {
		return err
	}
	cr := &countReader{r: r, h: sha256.New()}
	err = g.Files.NoFollow().WriteFile(ctx, real, cr, mode)
	g.done(ctx, audit.KindFileWrite, real, hex.EncodeToString(cr.h.Sum(nil)), cr.n, err)
	return err
}

func (g *guardedFiles) Mkdir(ctx context.Context, path string, mode fs.FileMode) error {
	real, err := g.target(ctx, policy.ActionFileWrite, path)
	if err != nil {
		return err
	}
	err = g.Files.NoFollow().Mkdir(ctx, real, mode)
	g.done(ctx, audit.KindFileWrite, real, "", 0, err)
	return err
}

func (g *guardedFiles) Remove(ctx context.Context, path string) error {
	real, err := g.target(ctx, policy.ActionFileDelete, path)
	if err != nil {
		return err
	}
	err = g.Files.NoFollow().Remove(ctx, real)
	g.done(ctx, audit.KindFileDelete, real, "", 0, err)
	return err
}

func (g *guardedFiles) Rename(ctx context.Context, oldpath, newpath string) error {
	from, err := g.target(ctx, policy.ActionFileDelete, oldpath)
	if err != nil {
		return err
	}
	to, err := g.target(ctx, policy.ActionFileWrite, newpath)
	if err != nil {
		return err
	}
	err = g.Files.NoFollow().Rename(ctx, from, to)
	g.done(ctx, audit.KindFileDelete, from, "", 0, err)
	g.done(ctx, audit.KindFileWrite, to, "", 0, err)
	return err
}

// Symlink is a write of path whose content is the link's target: the audit
// event carries the target's digest and length.
func (g *guardedFiles) Symlink(ctx context.Context, target, path string) error {
	real, err := g.target(ctx, policy.ActionFileWrite, path)
	if err != nil {
		return err
	}
	err = g.Files.NoFollow().Symlink(ctx, target, real)
	sum := sha256.Sum256([]byte(target))
	g.done(ctx, audit.KindFileWrite, real, hex.EncodeToString(sum[:]), int64(len(target)), err)
	return err
}

// recordExec records a finished exec.
func (s *Supervisor) recordExec(ctx context.Context, c Caller, r policy.Request, res sandbox.Result, stdoutSum, stderrSum string, err error) {
	red := s.policy.Redactor()
	ev := audit.ExecEvent(c.KeyID, r.Sandbox, red.Strings(r.Argv), red.String(r.Code), r.Language, res, nil, nil, err)
	if err == nil {
		ev.StdoutSHA256, ev.StderrSHA256 = stdoutSum, stderrSum
	}
	ev.Template = r.Template
	s.recordAfter(ctx, ev)
}

// AuditLog returns the audit log, or nil when there is none.
func (s *Supervisor) AuditLog() *audit.Log { return s.opts.Audit }
