package api

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// TestUsageRoute reads what a real sandbox uses while a process holds 64
// MiB and keeps its half core busy: GET /v1/sandboxes/{id}/usage through the Go
// SDK, for its owner and an operator; not for another key; 409 once it has
// ended.
func TestUsageRoute(t *testing.T) {
	e := nativeEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := e.agent()
	op, _ := e.client(store.RoleOperator, store.Quota{}, store.RateLimits{})
	stranger, _ := e.client(store.RoleAgent, store.Quota{}, store.RateLimits{})
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{Limits: client.Limits{MemoryBytes: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartProcess(ctx, sb.ID, client.StartProcessRequest{ExecRequest: client.ExecRequest{Language: "python",
		Code: "x = bytearray(64 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1\nwhile True: pass"}}); err != nil {
		t.Fatal(err)
	}
	var u *client.SandboxUsage
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if u, err = c.SandboxUsage(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if u.MemoryBytes >= 64<<20 {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("the sandbox never held 64 MiB: %+v", u)
		}
	}
	if u.MemoryLimitBytes != 256<<20 || u.CPUs != 0.5 || u.MemoryBytes > u.MemoryLimitBytes || u.At.IsZero() {
		t.Fatalf("usage %+v", u)
	}
	// Over a window of more than a second, the busy loop keeps the half
	// core it may have (the default template's limit) busy.
	time.Sleep(1200 * time.Millisecond)
	u2, err := op.SandboxUsage(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if u2.CPUWindowMS < 1000 || u2.CPUUsedCores < 0.1 || u2.CPUUsedCores > 0.7 || u2.CPUMS <= u.CPUMS {
		t.Fatalf("a busy core over %d ms: %.2f cores, cpu %d ms then %d ms", u2.CPUWindowMS, u2.CPUUsedCores, u.CPUMS, u2.CPUMS)
	}
	t.Logf("usage: %d MiB of %d MiB; %.2f cores over %d ms", u2.MemoryBytes>>20, u2.MemoryLimitBytes>>20, u2.CPUUsedCores, u2.CPUWindowMS)
	if _, err := stranger.SandboxUsage(ctx, sb.ID); err == nil {
		t.Fatal("another key read the sandbox's usage")
	} else {
		apiError(t, err, 403, "forbidden")
	}
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.SandboxUsage(ctx, sb.ID)
	apiError(t, err, 409, "not_running")
}
