package agentdriver

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// AttachEgress attaches a sandbox in network mode egress to proxy, before
// its agent starts: cfg asks the agent for the proxy port, and commands get
// the proxy's variables. It returns nil for a sandbox without egress; the
// caller closes the handle if the sandbox does not start, and hands it to
// New otherwise.
func AttachEgress(proxy *egress.Proxy, spec sandbox.Spec, cfg *agent.Config) (*egress.Sandbox, error) {
	if spec.Network.Mode != sandbox.NetworkEgress {
		return nil, nil
	}
	sb, err := proxy.Attach(spec.ID, spec.Network)
	if err != nil {
		return nil, err
	}
	cfg.Egress = &agent.EgressConfig{Forward: LoopbackForwards(spec.Network)}
	if ca := sb.CAPEM(); ca != nil {
		// The proxy intercepts some hosts: the sandbox trusts its CA.
		cfg.Egress.CA, cfg.Egress.CABundle = string(ca), egress.SandboxCABundle
	}
	// The sandbox's own Env comes after, so a caller may override these.
	// sb.Env holds where the CA bundle is and the secrets' placeholders.
	cfg.Env = append(append(append([]string(nil), agent.EgressEnv...), sb.Env()...), cfg.Env...)
	return sb, nil
}

// startEgress tunnels the sandbox's proxy connections to its proxy handle
// until the sandbox closes.
func (in *Instance) startEgress() {
	if in.egress == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	in.egressStop = cancel
	go func() {
		err := in.client.ServeEgress(ctx, in.egress.ServeConn)
		if err != nil && !errors.Is(err, context.Canceled) {
			in.log.Debug("egress tunnel ended", "err", err)
		}
	}()
}

// stopEgress ends the tunnels and detaches the sandbox from the proxy.
func (in *Instance) stopEgress() {
	if in.egressStop != nil {
		in.egressStop()
	}
	if in.egress != nil {
		in.egress.Close()
	}
}

// EgressSummary says what the sandbox did through the egress proxy; false
// when it is not in network mode egress.
func (in *Instance) EgressSummary() (egress.Summary, bool) {
	if in.egress == nil {
		return egress.Summary{}, false
	}
	return in.egress.Summary(), true
}

// SetNetwork replaces the egress rules of a sandbox in network mode
// egress (sandbox.NetworkChanger). The agent forwards the loopback
// addresses it was started with and no other, so a loopback address
// beyond those is refused rather than allowed in vain.
func (in *Instance) SetNetwork(n sandbox.Network) error {
	if in.egress == nil {
		return &sandbox.UnsupportedError{What: "a change of network", Why: "the sandbox was made without network (mode none): it has no tunnel to the egress proxy",
			Fix: "create a sandbox with egress (a template with network mode egress) and change that one's network"}
	}
	have := LoopbackForwards(in.spec.Network)
	for _, a := range LoopbackForwards(n) {
		if !slices.Contains(have, a) {
			return fmt.Errorf("%w: allow address %s: a loopback address reaches a sandbox only if it was allowed at create (the agent forwards those); create the sandbox with it", sandbox.ErrInvalid, a)
		}
	}
	return in.egress.SetNetwork(n)
}

// LoopbackForwards lists the allowed addresses on the host's loopback that
// the agent forwards from the same address inside the sandbox (see
// agent.EgressConfig.Forward). The proxy's own port is never one.
func LoopbackForwards(n sandbox.Network) []string {
	var out []string
	for _, a := range n.AllowAddresses {
		ap, err := netip.ParseAddrPort(a)
		if err != nil || !ap.Addr().Unmap().IsLoopback() {
			continue
		}
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		if ap.String() == agent.EgressListen || slices.Contains(out, ap.String()) {
			continue
		}
		out = append(out, ap.String())
	}
	return out
}
