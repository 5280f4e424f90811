package native

import (
	"context"
	"errors"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// proxy returns the egress proxy: Options.Egress, or one of the driver's
// own, made on first use (the one-shot CLI runs its proxy in-process).
func (d *Driver) proxy() *egress.Proxy {
	d.egressOnce.Do(func() {
		d.egress = d.opts.Egress
		if d.egress == nil {
			d.egress = egress.New(egress.Options{Logger: d.opts.Logger})
		}
	})
	return d.egress
}

// setupEgress attaches a sandbox in network mode egress to the proxy and
// asks the agent for the proxy port; commands get the proxy variables.
func (in *instance) setupEgress(cfg *agent.Config, undo *cleanups) error {
	if in.spec.Network.Mode != sandbox.NetworkEgress {
		return nil
	}
	sb, err := in.d.proxy().Attach(in.spec.ID, in.spec.Network)
	if err != nil {
		return err
	}
	undo.add(sb.Close)
	in.egress = sb
	cfg.Egress = &agent.EgressConfig{}
	// The sandbox's own Env comes after, so a caller may override these.
	cfg.Env = append(append([]string(nil), agent.EgressEnv...), cfg.Env...)
	return nil
}

// startEgress tunnels the sandbox's proxy connections to its proxy handle
// until the sandbox closes.
func (in *instance) startEgress() {
	if in.egress == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	in.egressStop = cancel
	go func() {
		err := in.client.ServeEgress(ctx, in.egress.ServeConn)
		if err != nil && !errors.Is(err, context.Canceled) {
			in.d.opts.Logger.Debug("egress tunnel ended", "sandbox_id", in.spec.ID, "err", err)
		}
	}()
}

// stopEgress ends the tunnels and detaches the sandbox from the proxy.
func (in *instance) stopEgress() {
	if in.egressStop != nil {
		in.egressStop()
	}
	if in.egress != nil {
		in.egress.Close()
	}
}

// EgressSummary says what the sandbox did through the egress proxy; false
// when it is not in network mode egress.
func (in *instance) EgressSummary() (egress.Summary, bool) {
	if in.egress == nil {
		return egress.Summary{}, false
	}
	return in.egress.Summary(), true
}

var _ egress.Reporter = (*instance)(nil)
