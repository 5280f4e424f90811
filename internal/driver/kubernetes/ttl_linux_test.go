package kubernetes

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestTTLWithoutHost: a sandbox whose host let go of it (a daemon killed
// with SIGKILL is the same, unannounced) ends at its TTL all the same: its
// agent ends it, a command still running included, and the Pod's
// container stops (the kubelet keeps the attach stream open, so the agent
// waits agent.AttachedGrace past the TTL). Not before the TTL. The ended
// Pod is then the janitor's to delete (SweepEnded; docs/decisions.md, 51).
func TestTTLWithoutHost(t *testing.T) {
	t.Parallel() // beside TestWarmPool (see conformanceParallel in kubernetes_linux_test.go)
	r := testRig(t)
	d := newDriver(t, RuntimeClassNone, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ttl = 3 * time.Second
	start := time.Now()
	sb, err := d.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{Lifetime: ttl}})
	if err != nil {
		t.Fatal(err)
	}
	h := hostOf(t, sb)
	k, _ := d.client()
	defer func() {
		if p, err := k.getPod(context.WithoutCancel(ctx), r.ns, h.name); err == nil {
			_ = d.deletePod(context.WithoutCancel(ctx), h.name, p.UID)
		}
	}()
	if _, err := sb.Start(ctx, sandbox.ExecRequest{Argv: []string{"sleep", "1000"}, Background: true}); err != nil {
		t.Fatal(err)
	}
	if err := sb.(sandbox.Detacher).Detach(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		p, err := k.getPod(ctx, r.ns, h.name)
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			if took := time.Since(start); took < ttl {
				t.Fatalf("the Pod ended %v after its create, before its TTL (%v)", took, ttl)
			}
			t.Logf("the Pod ended %v after its create (TTL %v): %s", time.Since(start).Round(time.Second), ttl, p.Status.Phase)
			// The janitor's part: the ended Pod goes.
			if _, err := d.SweepEnded(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := k.getPod(ctx, r.ns, h.name); !isNotFound(err) {
				t.Errorf("the ended Pod after SweepEnded: %v, want it gone", err)
			}
			return
		}
		if time.Since(start) > ttl+agent.AttachedGrace+30*time.Second {
			t.Fatalf("the Pod runs on past its TTL: %s", p.Status.Phase)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
