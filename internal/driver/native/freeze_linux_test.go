package native

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// counter reads the number a background loop keeps writing to /tmp/c.
func counter(t *testing.T, in sandbox.Instance) int {
	t.Helper()
	var b bytes.Buffer
	if err := in.Files().ReadFile(context.Background(), "/tmp/c", 0, 0, &b); err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(b.String()))
	return n
}

// TestFreezeThaw: a frozen native sandbox's commands stop where they are
// and use no CPU while its agent answers; thawed, they go on from there.
func TestFreezeThaw(t *testing.T) {
	requireNative(t)
	d, err := New(Options{Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if c := d.Capabilities(); !c.Pause || !c.MemoryKeptInHost || c.LiveFork {
		t.Fatalf("capabilities %+v: want pause with memory_kept_in_host, no live_fork", c)
	}
	ctx := context.Background()
	in, err := d.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(ctx)
	loop := `i=0; while :; do i=$((i+1)); echo $i > /tmp/c.new; mv /tmp/c.new /tmp/c; done`
	if _, err := in.Start(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", loop}, Background: true}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	fr := in.(sandbox.Freezer)
	t0 := time.Now()
	if err := fr.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("freeze: %v", time.Since(t0))
	u1, err := in.(sandbox.UsageReader).Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n1 := counter(t, in) // the agent answers while the commands are frozen
	time.Sleep(500 * time.Millisecond)
	n2 := counter(t, in)
	u2, _ := in.(sandbox.UsageReader).Usage(ctx)
	if n1 == 0 || n2 != n1 {
		t.Fatalf("the frozen loop went on: %d then %d", n1, n2)
	}
	// The agent's own work for the reads is all the CPU it used.
	if used := u2.CPUMS - u1.CPUMS; used > 100 {
		t.Errorf("a frozen sandbox used %d ms of CPU in 500 ms", used)
	}
	t0 = time.Now()
	if err := fr.Thaw(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("thaw: %v", time.Since(t0))
	time.Sleep(200 * time.Millisecond)
	if n3 := counter(t, in); n3 <= n2 {
		t.Fatalf("the thawed loop did not go on: %d then %d", n2, n3)
	}
	if err := fr.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	// A frozen sandbox closes at once (teardown thaws it first).
	t0 = time.Now()
	if err := in.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("closing a frozen sandbox took %v", d)
	}
}
