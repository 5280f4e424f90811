package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/cow"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
)

// Copy-on-write mounts (sandbox.Mount.Cow): a sandbox's pending changes
// to host directories, applied or discarded by its owner, or only by an
// operator where the policy says so ([approval] mounts).

// CowMount is one cow mount's pending change.
type CowMount struct {
	cow.Pending
	// Approval says only an operator may apply or discard it.
	Approval bool `json:"approval"`
}

// CowRequest chooses a cow mount (Target; may be empty when the sandbox
// has one) and paths in it (none: every change).
type CowRequest struct {
	Target string   `json:"target,omitempty"`
	Paths  []string `json:"paths,omitempty"`
	// Expect (apply only), when set, maps paths to the entry each change
	// showed the reviewer (cow.Change.Entry; "" for a deletion): a change
	// that is no longer that is a conflict (cow.ApplyReviewed).
	Expect map[string]string `json:"expect,omitempty"`
}

// PendingChange is a sandbox's cow mount with changes, for operators.
type PendingChange struct {
	Sandbox string `json:"sandbox"`
	// Key is the id of the key that owns the sandbox; KeyName its name.
	Key      string `json:"key"`
	KeyName  string `json:"key_name,omitempty"`
	Target   string `json:"target"`
	Source   string `json:"source"`
	Approval bool   `json:"approval"`
	Count    int    `json:"count"`
}

// ApprovalRequiredError: the policy lets only an operator decide the
// changes of this mount.
type ApprovalRequiredError struct {
	Source string
}

func (e *ApprovalRequiredError) Error() string {
	return fmt.Sprintf("changes to the host directory %s need a person's approval: an operator must decide (on the daemon's web page, Changes, or with an operator key); this key can only list them", e.Source)
}

// Unwrap classes it as forbidden.
func (e *ApprovalRequiredError) Unwrap() error { return ErrForbidden }

// cowLayers is sandbox id's cow mounts, for c.
func (s *Supervisor) cowLayers(c Caller, id string) ([]sandbox.CowLayer, error) {
	l, err := s.lookup(c, id)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	inst, drv := l.inst, l.rec.Driver
	l.mu.Unlock()
	cm, ok := inst.(sandbox.CowMounter)
	if !ok || !s.can(drv, func(c sandbox.Capabilities) bool { return c.CowMounts }) {
		return nil, nil
	}
	return cm.CowLayers(), nil
}

// Changes lists the pending changes of sandbox id's cow mounts (none for
// a sandbox without one).
func (s *Supervisor) Changes(ctx context.Context, c Caller, id string) ([]CowMount, error) {
	ctx, done, err := s.Begin(ctx, c, OpFiles)
	if err != nil {
		return nil, err
	}
	defer done()
	layers, err := s.cowLayers(c, id)
	if err != nil {
		return nil, err
	}
	out := []CowMount{}
	for _, ly := range layers {
		p, err := cow.Changes(ctx, ly.Dir, snapshot.DiffLimits{})
		if err != nil {
			return nil, fmt.Errorf("changes of %s: %w", ly.Target, err)
		}
		if s.policy.MountKeepsSharedWrite(ly.Source) {
			for i, c := range p.Changes {
				p.Changes[i].Warning = cow.Warning(c.After, true)
			}
		}
		out = append(out, CowMount{Pending: *p, Approval: s.policy.MountNeedsApproval(ly.Source)})
	}
	return out, nil
}

// pickLayer is the cow mount target names.
func pickLayer(id string, layers []sandbox.CowLayer, target string) (sandbox.CowLayer, error) {
	if len(layers) == 0 {
		return sandbox.CowLayer{}, fmt.Errorf("%w: sandbox %s has no cow mount (create it with a mount HOST:PATH:cow)", sandbox.ErrNotFound, id)
	}
	if target == "" {
		if len(layers) == 1 {
			return layers[0], nil
		}
		var ts []string
		for _, l := range layers {
			ts = append(ts, l.Target)
		}
		return sandbox.CowLayer{}, fmt.Errorf("%w: sandbox %s has %d cow mounts: name the target (one of %s)", sandbox.ErrInvalid, id, len(layers), strings.Join(ts, ", "))
	}
	for _, l := range layers {
		if l.Target == target {
			return l, nil
		}
	}
	return sandbox.CowLayer{}, fmt.Errorf("%w: sandbox %s has no cow mount at %q", sandbox.ErrNotFound, id, target)
}

// decideCow finds the mount r names and checks c may decide its changes.
func (s *Supervisor) decideCow(c Caller, id string, r CowRequest) (sandbox.CowLayer, error) {
	layers, err := s.cowLayers(c, id)
	if err != nil {
		return sandbox.CowLayer{}, err
	}
	ly, err := pickLayer(id, layers, r.Target)
	if err != nil {
		return ly, err
	}
	if len(r.Paths) > 10000 || len(r.Expect) > 10000 {
		return ly, fmt.Errorf("%w: at most 10000 paths at once", sandbox.ErrInvalid)
	}
	if s.policy.MountNeedsApproval(ly.Source) && !c.Operator {
		return ly, &ApprovalRequiredError{Source: ly.Source}
	}
	return ly, nil
}

// ApplyChanges writes the chosen pending changes of a cow mount of
// sandbox id to the host (cow.Apply), and records who did, with the
// digests, in the audit log. A conflict is a *cow.ConflictError.
func (s *Supervisor) ApplyChanges(ctx context.Context, c Caller, id string, r CowRequest) (*cow.ApplyResult, error) {
	ctx, done, err := s.Begin(ctx, c, OpFiles)
	if err != nil {
		return nil, err
	}
	defer done()
	ly, err := s.decideCow(c, id, r)
	if err != nil {
		return nil, err
	}
	res, err := cow.ApplyWith(ctx, ly.Dir, cow.ApplyOptions{Paths: r.Paths, Expect: r.Expect, SharedWrite: s.policy.MountKeepsSharedWrite(ly.Source)})
	ev := audit.Event{Kind: audit.KindCowApply, Key: c.KeyID, Sandbox: id, Path: ly.Target, Host: ly.Source, Decision: "apply", Reason: decider(c)}
	var ce *cow.ConflictError
	switch {
	case errors.As(err, &ce):
		ev.Decision, ev.Error = "conflict", ce.Error()
		for _, f := range ce.Conflicts {
			ev.Files = append(ev.Files, audit.FileChange{Path: f.Path, Refused: f.Reason})
		}
	case err != nil && res == nil:
		ev.Error = err.Error()
	}
	if res != nil {
		for _, a := range res.Applied {
			ev.Files = append(ev.Files, audit.FileChange{Path: a.Path, Kind: a.Kind, Before: a.Before, After: a.Digest})
		}
		for _, f := range res.Refused {
			ev.Files = append(ev.Files, audit.FileChange{Path: f.Path, Refused: f.Reason})
		}
	}
	s.recordAfter(ctx, ev)
	return res, err
}

// DiscardChanges drops the chosen pending changes of a cow mount of
// sandbox id (cow.Discard), recorded in the audit log.
func (s *Supervisor) DiscardChanges(ctx context.Context, c Caller, id string, r CowRequest) (*cow.DiscardResult, error) {
	ctx, done, err := s.Begin(ctx, c, OpFiles)
	if err != nil {
		return nil, err
	}
	defer done()
	ly, err := s.decideCow(c, id, r)
	if err != nil {
		return nil, err
	}
	res, err := cow.Discard(ctx, ly.Dir, r.Paths)
	if err != nil {
		return nil, err
	}
	ev := audit.Event{Kind: audit.KindCowDiscard, Key: c.KeyID, Sandbox: id, Path: ly.Target, Host: ly.Source, Decision: "discard", Reason: decider(c)}
	for _, d := range res.Dropped {
		ev.Files = append(ev.Files, audit.FileChange{Path: d.Path, Kind: d.Kind, Before: d.Before, After: d.Digest})
	}
	for _, f := range res.Refused {
		ev.Files = append(ev.Files, audit.FileChange{Path: f.Path, Refused: f.Reason})
	}
	s.recordAfter(ctx, ev)
	return res, nil
}

func decider(c Caller) string {
	if c.Operator {
		return "decided by an operator key"
	}
	return "decided by the sandbox's owner"
}

// PendingChanges lists every live sandbox's cow mounts that have pending
// changes. Operators only.
func (s *Supervisor) PendingChanges(ctx context.Context, c Caller) ([]PendingChange, error) {
	if !c.Operator {
		return nil, fmt.Errorf("%w: only operator keys list every sandbox's changes; list one sandbox's with GET /v1/sandboxes/{id}/changes", ErrForbidden)
	}
	s.mu.Lock()
	lives := make([]*live, 0, len(s.live))
	for _, l := range s.live {
		lives = append(lives, l)
	}
	s.mu.Unlock()
	out := []PendingChange{}
	names := map[string]string{}
	for _, l := range lives {
		l.mu.Lock()
		inst, rec, ending := l.inst, l.rec, l.ending
		l.mu.Unlock()
		cm, ok := inst.(sandbox.CowMounter)
		if !ok || ending || !s.can(rec.Driver, func(c sandbox.Capabilities) bool { return c.CowMounts }) {
			continue
		}
		for _, ly := range cm.CowLayers() {
			n, err := cow.Count(ctx, ly.Dir)
			if err != nil {
				s.log.Warn("count a sandbox's cow changes", "sandbox_id", rec.ID, "target", ly.Target, "err", err)
				continue
			}
			if n == 0 {
				continue
			}
			name, seen := names[rec.Owner]
			if !seen && rec.Owner != "" {
				if k, err := s.store.GetKey(rec.Owner); err == nil {
					name = k.Name
				}
				names[rec.Owner] = name
			}
			out = append(out, PendingChange{Sandbox: rec.ID, Key: rec.Owner, KeyName: name, Target: ly.Target, Source: ly.Source,
				Approval: s.policy.MountNeedsApproval(ly.Source), Count: n})
		}
	}
	slices.SortFunc(out, func(a, b PendingChange) int {
		return strings.Compare(a.Sandbox+a.Target, b.Sandbox+b.Target)
	})
	return out, nil
}

// RecordCowRecoveries records in the audit log what a start found of
// applies that a crash interrupted (cow.RecoverAll).
func (s *Supervisor) RecordCowRecoveries(ctx context.Context, rs []cow.Recovery) {
	for _, r := range rs {
		ev := audit.Event{Kind: audit.KindCowRecover, Sandbox: r.Sandbox, Path: r.Target, Host: r.Source, Decision: "apply",
			Reason: fmt.Sprintf("an apply begun %s was interrupted: %d path(s) applied, %d not", r.Started.Format("2006-01-02T15:04:05Z"), len(r.Applied), len(r.NotApplied))}
		for _, p := range r.Applied {
			ev.Files = append(ev.Files, audit.FileChange{Path: p, Kind: "applied"})
		}
		for _, p := range r.NotApplied {
			ev.Files = append(ev.Files, audit.FileChange{Path: p, Refused: "not applied (interrupted)"})
		}
		s.log.Warn("an apply of a cow mount's changes was interrupted; the host holds these paths new", "sandbox_id", r.Sandbox, "target", r.Target,
			"applied", firstPaths(r.Applied), "not_applied", firstPaths(r.NotApplied), "audit", "cow_recover")
		s.recordAfter(ctx, ev)
	}
}

// cowRecoverer is a driver that keeps cow layers (native).
type cowRecoverer interface {
	RecoverCow() ([]cow.Recovery, error)
}

// RecoverCow reports, for every driver that keeps cow layers, what applies
// a crash of the daemon before interrupted: in the log and the audit log.
// The daemon calls it on start, after Recover.
func (s *Supervisor) RecoverCow(ctx context.Context) {
	for name, d := range s.opts.Drivers {
		cr, ok := d.(cowRecoverer)
		if !ok {
			continue
		}
		rs, err := cr.RecoverCow()
		if err != nil {
			s.log.Error("read the journals of interrupted cow applies", "driver", name, "err", err)
		}
		s.RecordCowRecoveries(ctx, rs)
	}
}

// firstPaths shortens a list of paths for a log line (the audit log has
// them all).
func firstPaths(ps []string) string {
	if len(ps) <= 10 {
		return strings.Join(ps, " ")
	}
	return fmt.Sprintf("%s … (%d in all)", strings.Join(ps[:10], " "), len(ps))
}
