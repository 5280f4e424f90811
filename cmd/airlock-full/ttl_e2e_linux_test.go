package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/agent"
)

// TestServeTTLWithoutDaemon: a sandbox never outlives its TTL, daemon or
// not. A daemon killed with SIGKILL, its state directory removed, so that
// no daemon ever comes back for its sandboxes: each ends at its TTL (its
// holder, the agent, ends it; what is left on the host goes with the
// janitor the daemon started, or the engine), a command still running in
// it included, and nothing of it is left: no process, cgroup, lock,
// socket, bundle, mount or container. Before its TTL it runs on. On every
// driver that reattaches after a restart (Kubernetes: see the driver's
// own test).
//
// The drivers run side by side: each waits out its TTL (the agent's own
// timer, or the engine's), on its own daemon and state directory.
func TestServeTTLWithoutDaemon(t *testing.T) {
	t.Parallel() // beside the other fault tests, after the package's other tests (faultParallel)
	upgradeDrivers(t, func(t *testing.T, u upgradeCase) {
		t.Parallel()
		f := u.f
		f.start()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		const ttl = 5 * time.Second
		created := time.Now()
		idle := f.create(ctx, client.CreateRequest{TTL: ttl})
		busy := f.create(ctx, client.CreateRequest{TTL: ttl})
		if _, err := f.c.StartProcess(ctx, busy, client.StartProcessRequest{ExecRequest: client.ExecRequest{Argv: []string{"sleep", "1000"}}}); err != nil {
			t.Fatal(err)
		}
		ids := []string{idle, busy}
		f.kill9()
		if err := os.RemoveAll(f.dir); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(created.Add(ttl - time.Second)))
		for _, id := range ids {
			if f.driver != "docker" && len(holderPids(t, f.driver, id)) != 1 || f.driver == "docker" && !u.running(id) {
				t.Fatalf("sandbox %s ended before its TTL", id)
			}
		}
		// The TTL and the agent's grace; gone waits for the rest. The
		// engine keeps a container's standard input, the agent's first
		// session, open after its daemon died: the grace of a session
		// that looks attached.
		grace := agent.LifetimeGrace
		if f.driver == "docker" {
			grace = agent.AttachedGrace
		}
		time.Sleep(time.Until(created.Add(ttl + grace)))
		u.gone(t, "at its TTL with no daemon", ids)
	})
}
