package kubernetes

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestUpgrade: an airlock of another agent protocol (agent.Version, as a
// build with -X …/agent.protocolVersion sets it) reattaches to a Pod whose
// agent speaks this one's: the sandbox runs on, marked mismatched, refuses
// work, and Close deletes its Pod. (The Pod used to be swept.)
func TestUpgrade(t *testing.T) {
	r := testRig(t)
	d := newDriver(t, RuntimeClassNone, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := d.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	name := hostOf(t, sb).name
	state, err := sb.(sandbox.StateHolder).DriverState()
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.(sandbox.Detacher).Detach(ctx); err != nil {
		t.Fatal(err)
	}
	defer func(v int) { agent.Version = v }(agent.Version)
	made := agent.Version
	agent.Version = made + 1
	got, err := newDriver(t, RuntimeClassNone, nil).Recover(ctx, sb.ID(), state)
	if err != nil {
		t.Fatalf("an upgraded airlock's reattach: %v; want the sandbox, mismatched", err)
	}
	if v, ok := got.(sandbox.AgentInstance).AgentProtocol(); ok || v != made {
		t.Errorf("agent protocol %d (ok %v), want %d and a mismatch", v, ok, made)
	}
	select {
	case <-got.Done():
		t.Error("the mismatched sandbox ended; it must run on")
	case <-time.After(time.Second):
	}
	if _, err := got.Start(ctx, sandbox.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrMismatch) {
		t.Errorf("an exec in a mismatched sandbox: %v, want ErrMismatch", err)
	}
	if err := got.Close(ctx); err != nil {
		t.Errorf("close the mismatched sandbox: %v", err)
	}
	k, _ := d.client()
	if _, err := k.getPod(ctx, r.ns, name); !isNotFound(err) {
		t.Errorf("the mismatched sandbox's Pod after Close: %v, want it gone", err)
	}
}
