package main

import (
	"context"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/agent"
)

// TestServeTTLWithoutDaemon: a sandbox never outlives its TTL, daemon or
// not. A daemon killed with SIGKILL, its state directory removed, so that
// no daemon ever comes back for its sandboxes: each ends at its TTL (its
// holder, the agent, ends it; the janitor the daemon started removes what
// is left on the host), a command still running in it included, and
// nothing of it is left: no process, cgroup, lock, socket, bundle or
// mount. Before its TTL it runs on.
func TestServeTTLWithoutDaemon(t *testing.T) {
	faultDrivers(t, func(t *testing.T, driver string) {
		f := newFault(t, driver, "")
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
		var holders []int
		for _, id := range ids {
			holders = append(holders, holderPids(t, driver, id)...)
		}
		if len(holders) != len(ids) {
			t.Fatalf("the holders of %v: %v", ids, holders)
		}
		f.kill9()
		if err := os.RemoveAll(f.dir); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(created.Add(ttl - time.Second)))
		for _, pid := range holders {
			if err := unix.Kill(pid, 0); err != nil {
				t.Fatalf("the holder %d ended before its sandbox's TTL: %v", pid, err)
			}
		}
		// The TTL, the agent's grace, the janitor's round.
		time.Sleep(time.Until(created.Add(ttl + agent.LifetimeGrace)))
		noLeftovers(t, "at its TTL with no daemon", ids)
		reapOrphans()
		for _, pid := range holders {
			if err := unix.Kill(pid, 0); err == nil {
				t.Errorf("the holder %d runs on past its sandbox's TTL", pid)
			}
		}
	})
}
