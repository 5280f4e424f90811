package sandbox

import (
	"context"
	"errors"
	"testing"
)

// TestWaitDone: an ended process answers with its result even when the
// caller's context is done too; a running one with the context's error.
func TestWaitDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan struct{})
	result := func() (Result, error) { return Result{ExitCode: 3}, nil }
	if _, err := WaitDone(ctx, done, result); !errors.Is(err, context.Canceled) {
		t.Fatalf("running, context done: %v, want context.Canceled", err)
	}
	close(done)
	for range 100 {
		if r, err := WaitDone(ctx, done, result); err != nil || r.ExitCode != 3 {
			t.Fatalf("ended, context done: %+v, %v; want its result", r, err)
		}
	}
}
