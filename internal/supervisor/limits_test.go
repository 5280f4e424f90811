package supervisor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// TestRateLimits: a key's rate limits and in-flight cap are the
// supervisor's, so every front end (API, /mcp, stdio MCP) shares them.
func TestRateLimits(t *testing.T) {
	f := newFixture(t, Config{})
	ctx := context.Background()
	c := Caller{KeyID: "key-limited", Rate: store.RateLimits{ExecsPerSecond: 1, ExecBurst: 2, CreatesPerSecond: 0.5, CreateBurst: 1}}
	in, err := f.sup.Create(ctx, c, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.sup.Create(ctx, c, CreateRequest{})
	var re *RateError
	if !errors.As(err, &re) || !errors.Is(err, ErrRateLimited) || re.RetryAfter < time.Second || re.RetryAfter > 2*time.Second {
		t.Fatalf("second create at 0.5/s: %v (%+v)", err, re)
	}
	for i := 0; i < 2; i++ {
		if _, err := f.sup.Exec(ctx, c, in.ID, ExecRequest{Argv: []string{"echo", "hi"}}); err != nil {
			t.Fatalf("exec %d within the burst: %v", i, err)
		}
	}
	_, err = f.sup.Exec(ctx, c, in.ID, ExecRequest{Argv: []string{"echo", "hi"}})
	if !errors.As(err, &re) || re.RetryAfter <= 0 || re.RetryAfter > time.Second {
		t.Fatalf("third exec at 1/s burst 2: %v", err)
	}
	// Stdin writes are execs too.
	if err := f.sup.WriteStdin(ctx, c, in.ID, "e1", []byte("x"), false); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("stdin write past the exec rate: %v", err)
	}
	// Another key has its own budget.
	if _, err := f.sup.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"echo"}}); errors.Is(err, ErrRateLimited) {
		t.Fatalf("another key is limited by this one's budget: %v", err)
	}
}

// TestInFlightCap: a key may have at most MaxInFlight calls that move data
// or wait running at once; a context admitted by Begin is not counted
// again by the calls made with it.
func TestInFlightCap(t *testing.T) {
	f := newFixture(t, Config{})
	ctx := context.Background()
	c := Caller{KeyID: "key-cap", Rate: store.RateLimits{MaxInFlight: 2}}
	in, err := f.sup.Create(ctx, c, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.sup.StartProcess(ctx, c, in.ID, StartRequest{ExecRequest: ExecRequest{Argv: []string{"sleep"}}})
	if err != nil {
		t.Fatal(err)
	}
	// Two waits park; the third call is refused at once.
	wctx, cancel := context.WithCancel(ctx)
	waits := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			_, err := f.sup.Wait(wctx, c, in.ID, p.ID)
			waits <- err
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.sup.lim.mu.Lock()
		n := f.sup.lim.keys[c.KeyID].inFlight
		f.sup.lim.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls in flight, want 2", n)
		}
		time.Sleep(time.Millisecond)
	}
	_, err = f.sup.Exec(ctx, c, in.ID, ExecRequest{Argv: []string{"echo"}})
	var re *RateError
	if !errors.As(err, &re) || re.RetryAfter != time.Second {
		t.Fatalf("a third call past the cap of 2: %v", err)
	}
	if _, _, err := f.sup.Files(ctx, c, in.ID); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("a file call past the cap: %v", err)
	}
	cancel()
	for i := 0; i < 2; i++ {
		<-waits
	}
	// One slot taken by Begin covers the calls made with its context.
	actx, done, err := f.sup.Begin(ctx, c, OpFiles)
	if err != nil {
		t.Fatal(err)
	}
	_, done2, err := f.sup.Begin(ctx, c, OpFiles)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.sup.Exec(actx, c, in.ID, ExecRequest{Argv: []string{"echo"}}); err != nil {
		t.Fatalf("a call made with an admitted context was counted again: %v", err)
	}
	if _, err := f.sup.Exec(ctx, c, in.ID, ExecRequest{Argv: []string{"echo"}}); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("cap not held: %v", err)
	}
	done()
	done()
	done2()
	if _, err := f.sup.Exec(ctx, c, in.ID, ExecRequest{Argv: []string{"echo"}}); err != nil {
		t.Fatalf("slots not released: %v", err)
	}
	f.sup.lim.mu.Lock()
	n, total := f.sup.lim.keys[c.KeyID].inFlight, f.sup.lim.total
	f.sup.lim.mu.Unlock()
	if n != 0 || total != 0 {
		t.Fatalf("after every call ended: %d in flight for the key, %d in all", n, total)
	}
}
