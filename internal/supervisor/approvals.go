package supervisor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Approval states.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	ApprovalExpired  = "expired"
	// ApprovalCancelled: the caller that asked went away first.
	ApprovalCancelled = "cancelled"
)

// Approval is an action waiting for (or decided by) a person.
type Approval struct {
	ID      string    `json:"id"`
	State   string    `json:"state"`
	Created time.Time `json:"created"`
	// Expires is when a pending approval is denied by itself.
	Expires time.Time `json:"expires"`
	// Key is the id of the key that asked; it may not decide.
	Key     string         `json:"key"`
	Sandbox string         `json:"sandbox"`
	Request policy.Request `json:"request"`
	// Rule and Why are the policy's: which rule asked, and why.
	Rule string `json:"rule"`
	Why  string `json:"why"`
	// DecidedBy, Reason and Decided are set once decided.
	DecidedBy string    `json:"decided_by,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Decided   time.Time `json:"decided,omitzero"`
}

// approvals holds pending approvals and the recently decided ones.
type approvals struct {
	mu      sync.Mutex
	pending map[string]*pendingApproval
	recent  []Approval // decided, newest last
}

type pendingApproval struct {
	a    Approval
	done chan struct{} // closed once decided
}

const maxRecentApprovals = 200

// Bounds on the actions waiting for a person: one key may park at most
// MaxPendingPerKey, all keys together MaxPendingTotal. More are refused at
// once (429), so that nobody can bury one action among decoys on the
// operators' page or hold the daemon's memory with parked calls.
const (
	MaxPendingPerKey = 10
	MaxPendingTotal  = 100
)

// pendingRetry is the Retry-After of a refusal by the pending caps.
const pendingRetry = 5 * time.Second

// ask parks an action until a person decides, the timeout passes or ctx
// ends. It returns nil when approved, or a *policy.Denied.
func (s *Supervisor) ask(ctx context.Context, c Caller, r policy.Request, d policy.Decision) error {
	now := s.opts.Now().UTC()
	p := &pendingApproval{done: make(chan struct{}), a: Approval{
		ID: "ap-" + strings.TrimPrefix(newID(), "sb-"), State: ApprovalPending, Created: now, Expires: now.Add(s.policy.ApprovalTimeout()),
		Key: c.KeyID, Sandbox: r.Sandbox, Request: r, Rule: d.Rule, Why: d.Reason,
	}}
	s.approvals.mu.Lock()
	mine := 0
	for _, q := range s.approvals.pending {
		if q.a.Key == c.KeyID {
			mine++
		}
	}
	total := len(s.approvals.pending)
	if mine >= MaxPendingPerKey || total >= MaxPendingTotal {
		s.approvals.mu.Unlock()
		msg := fmt.Sprintf("this key has %d actions waiting for approval, the most it may have; wait until they are decided", mine)
		if mine < MaxPendingPerKey {
			msg = fmt.Sprintf("%d actions are waiting for approval, the most the daemon holds; retry later", total)
		}
		ev := s.auditEvent(kindApproval, c, r)
		ev.Decision, ev.Rule, ev.Reason = "deny", d.Rule, "refused: "+msg
		if err := s.record(ctx, ev); err != nil {
			return err
		}
		return &RateError{Msg: msg, RetryAfter: pendingRetry}
	}
	s.approvals.pending[p.a.ID] = p
	s.approvals.mu.Unlock()
	s.log.Info("action waits for approval", "approval", p.a.ID, "sandbox_id", r.Sandbox, "rule", d.Rule)
	if asker := s.askerFor(ctx); asker != nil {
		actx, stop := context.WithCancel(ctx)
		defer stop()
		go func(a Approval) {
			approve, reason, ok := asker(actx, a)
			if !ok {
				return // no answer: it waits on for an operator or its timeout
			}
			state := ApprovalDenied
			if approve {
				state = ApprovalApproved
			}
			s.settle(a.ID, state, ByElicitation, reason)
		}(p.a)
	}
	timer := time.NewTimer(s.policy.ApprovalTimeout())
	defer timer.Stop()
	var a Approval
	select {
	case <-p.done:
		a = p.a
	case <-timer.C:
		a = s.settle(p.a.ID, ApprovalExpired, "", "nobody approved it within "+s.policy.ApprovalTimeout().String())
	case <-ctx.Done():
		a = s.settle(p.a.ID, ApprovalCancelled, "", "the caller stopped waiting")
	}
	if a.State == "" { // decided just as the timer fired: take the decision
		<-p.done
		a = p.a
	}
	approve := "deny"
	if a.State == ApprovalApproved {
		approve = "approve"
	}
	ev := s.auditEvent(kindApproval, c, r)
	ev.Approval, ev.Decision, ev.Rule, ev.Reason = a.ID, approve, d.Rule, a.State+": "+a.Reason
	if a.DecidedBy != "" {
		ev.Reason = a.State + " by " + a.DecidedBy + ": " + a.Reason
	}
	if err := s.record(ctx, ev); err != nil {
		return err
	}
	if a.State == ApprovalApproved {
		return nil
	}
	why := fmt.Sprintf("approval %s %s", a.ID, a.State)
	if a.Reason != "" {
		why += ": " + a.Reason
	}
	return &policy.Denied{Decision: policy.Decision{Verdict: policy.Deny, Rule: d.Rule, Reason: why}}
}

// An Asker asks the person behind a caller's client to decide approval a
// (MCP elicitation): approve or deny with a reason, or ok false when the
// person gave no answer (dismissed it, or the client failed), which leaves
// it pending. It returns when ctx ends.
type Asker func(ctx context.Context, a Approval) (approve bool, reason string, ok bool)

// ByElicitation is the DecidedBy of an approval the person in an MCP
// client decided.
const ByElicitation = "mcp-elicitation"

type askerKey struct{}

// WithAsker returns ctx carrying an Asker for the asks of the calls made
// with it. The supervisor uses it where the policy lets the client's
// person decide (policy Approval.Elicit), or where nobody else can
// (Options.NoApprover).
func WithAsker(ctx context.Context, a Asker) context.Context {
	return context.WithValue(ctx, askerKey{}, a)
}

// askerFor is the Asker of ctx that may decide here; nil when there is
// none or the policy keeps decisions to operators.
func (s *Supervisor) askerFor(ctx context.Context) Asker {
	a, _ := ctx.Value(askerKey{}).(Asker)
	if a == nil || !(s.opts.NoApprover || s.policy.Elicit()) {
		return nil
	}
	return a
}

// settle decides approval id if it is still pending, and returns it; the
// zero Approval when someone else settled it first.
func (s *Supervisor) settle(id, state, by, reason string) Approval {
	s.approvals.mu.Lock()
	defer s.approvals.mu.Unlock()
	p := s.approvals.pending[id]
	if p == nil {
		return Approval{}
	}
	delete(s.approvals.pending, id)
	p.a.State, p.a.DecidedBy, p.a.Reason, p.a.Decided = state, by, reason, s.opts.Now().UTC()
	s.approvals.recent = append(s.approvals.recent, p.a)
	if len(s.approvals.recent) > maxRecentApprovals {
		s.approvals.recent = s.approvals.recent[1:]
	}
	close(p.done)
	return p.a
}

// Approvals lists pending approvals (oldest first), then recently decided
// ones (newest first). Operators only.
func (s *Supervisor) Approvals(ctx context.Context, c Caller) ([]Approval, error) {
	if !c.Operator {
		return nil, fmt.Errorf("%w: listing approvals needs an operator key", ErrForbidden)
	}
	s.approvals.mu.Lock()
	defer s.approvals.mu.Unlock()
	var out []Approval
	for _, p := range s.approvals.pending {
		out = append(out, p.a)
	}
	slices.SortFunc(out, func(a, b Approval) int { return a.Created.Compare(b.Created) })
	for i := len(s.approvals.recent) - 1; i >= 0; i-- {
		out = append(out, s.approvals.recent[i])
	}
	return out, nil
}

// DecideApproval approves or denies a pending approval. Only an operator
// key may decide, and neither the key that asked nor a key it made
// (directly, or through keys those made: Caller.Lineage).
func (s *Supervisor) DecideApproval(ctx context.Context, c Caller, id string, approve bool, reason string) (Approval, error) {
	if !c.Operator {
		return Approval{}, fmt.Errorf("%w: deciding approvals needs an operator key", ErrForbidden)
	}
	s.approvals.mu.Lock()
	p := s.approvals.pending[id]
	s.approvals.mu.Unlock()
	if p == nil {
		return Approval{}, fmt.Errorf("%w: approval %q is not pending", sandbox.ErrNotFound, id)
	}
	if p.a.Key == c.KeyID {
		return Approval{}, fmt.Errorf("%w: the key that asked for an action cannot approve it", ErrForbidden)
	}
	if slices.Contains(c.Lineage, p.a.Key) {
		return Approval{}, fmt.Errorf("%w: this key was made by the key that asked for the action (directly or through keys it made), so it cannot decide it; use an operator key made by someone else", ErrForbidden)
	}
	state := ApprovalDenied
	if approve {
		state = ApprovalApproved
	}
	a := s.settle(id, state, c.KeyID, reason)
	if a.ID == "" {
		return Approval{}, fmt.Errorf("%w: approval %q was decided meanwhile", sandbox.ErrNotFound, id)
	}
	return a, nil
}
