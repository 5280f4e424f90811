package supervisor

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// chooseDriver says which driver a create runs on: the one it names, else
// the one a policy tier chooses, else its template's; and that the daemon
// has it. A tier that cannot be evaluated refuses the create, as a rule
// that cannot be evaluated does.
func (s *Supervisor) chooseDriver(ctx context.Context, c Caller, name string, t Template, req CreateRequest, spec sandbox.Spec) (policy.TierChoice, error) {
	r := policy.Request{Action: policy.ActionCreate, Template: name, Driver: t.Driver, Key: c.KeyID, Labels: c.Labels,
		Limits: &spec.Limits, Network: &spec.Network, Explicit: req.Driver != ""}
	if req.Driver != "" {
		r.Driver = req.Driver
	}
	choice, err := s.policy.ChooseDriver(ctx, r)
	if err != nil {
		s.log.Error("policy tier evaluation failed; denying", "err", err)
		d := policy.Decision{Verdict: policy.Deny, Rule: choice.Rule, Reason: "the policy's tier could not be evaluated"}
		ev := s.auditEvent(audit.KindPolicy, c, r)
		ev.Decision, ev.Rule, ev.Reason = string(d.Verdict), d.Rule, "create: "+d.Reason
		if err := s.record(ctx, ev); err != nil {
			return choice, err
		}
		return choice, &policy.Denied{Decision: d}
	}
	if _, ok := s.opts.Drivers[choice.Driver]; !ok {
		have := make([]string, 0, len(s.opts.Drivers))
		for n := range s.opts.Drivers {
			have = append(have, n)
		}
		slices.Sort(have)
		who := "the create names"
		if choice.Rule != "request" {
			who = fmt.Sprintf("%s chose", choice.Rule)
		}
		return choice, fmt.Errorf("%w: %s driver %q, which this daemon does not offer (it offers %s)",
			sandbox.ErrUnsupported, who, choice.Driver, strings.Join(have, ", "))
	}
	return choice, nil
}
