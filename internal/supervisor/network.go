package supervisor

import (
	"context"
	"fmt"
	"slices"

	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// SetNetwork replaces the egress rules of running sandbox id with n, as a
// create from its template could ask for them: n is bounded by the
// template's network (Template.network: zero n is the template's own
// network) and decided by the policy as the create's network was (action
// create, with the sandbox's template, driver and limits, and n); beyond
// either it is refused, naming the rule, never narrowed. Network mode none
// keeps the sandbox's tunnel but allows nothing through it. A sandbox made
// without egress has no tunnel to the proxy: a change to egress is
// refused (sandbox.ErrUnsupported). Connections open at the change end.
func (s *Supervisor) SetNetwork(ctx context.Context, c Caller, id string, n sandbox.Network) (Info, error) {
	l, err := s.lookup(c, id)
	if err != nil {
		return Info{}, err
	}
	l.mu.Lock()
	rec, inst := l.rec, l.inst
	l.mu.Unlock()
	t := s.templates[rec.Template]
	next, err := t.network(n)
	if err != nil {
		return Info{}, err
	}
	// A change that names no secrets or rules keeps the sandbox's (the
	// template's, narrowed or added to at create): its placeholders were
	// given then.
	if n.Secrets == nil {
		next.Secrets = slices.Clone(rec.Spec.Network.Secrets)
	}
	if n.Rules == nil {
		next.Rules = slices.Clone(rec.Spec.Network.Rules)
	}
	if rec.Spec.Network.Mode != sandbox.NetworkEgress {
		if next.Mode == sandbox.NetworkEgress {
			return Info{}, &sandbox.UnsupportedError{What: "a change to network mode egress", Why: "sandbox " + id + " was made without network (mode none): it has no tunnel to the egress proxy",
				Fix: "create the sandbox with egress (E2B: allowInternetAccess or network.allowOut at create)"}
		}
		return s.info(l), nil
	}
	if next.Mode != sandbox.NetworkEgress {
		next = sandbox.Network{Mode: sandbox.NetworkEgress}
	}
	limits := rec.Spec.Limits
	if err := s.decide(ctx, c, policy.Request{Action: policy.ActionCreate, Sandbox: id, Template: rec.Template, Driver: rec.Driver,
		Limits: &limits, Network: &next, Labels: c.Labels}); err != nil {
		return Info{}, err
	}
	s.policy.NarrowNetwork(&next)
	nc, ok := inst.(sandbox.NetworkChanger)
	if !ok || !s.can(rec.Driver, func(c sandbox.Capabilities) bool { return c.Egress }) {
		return Info{}, &sandbox.UnsupportedError{What: "a change of network", Why: "the " + rec.Driver + " driver cannot change a running sandbox's network", Fix: "create another sandbox with the network"}
	}
	if err := nc.SetNetwork(next); err != nil {
		return Info{}, fmt.Errorf("sandbox %s: %w", id, err)
	}
	stored, err := s.store.UpdateSandbox(id, func(r *store.Sandbox) error { r.Spec.Network = next; return nil })
	if err != nil {
		return Info{}, err
	}
	l.mu.Lock()
	l.rec.Spec.Network = stored.Spec.Network
	l.mu.Unlock()
	l.touch(s.opts.Now())
	return s.info(l), nil
}
