package sandbox

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// KillWait bounds how long Run waits, after ctx is cancelled, for the
// sandbox to confirm that the command it killed has ended.
const KillWait = 750 * time.Millisecond

// Run runs req in inst to its end: Start, then WaitOrKill. A command that
// cannot start (not found, not executable) is a result with its exit code
// (127, 126), not an error. Cancelling ctx kills the command and
// everything it started (reason "killed"); Run then returns within
// KillWait even when the sandbox does not answer, with a result that says
// so and an error wrapping ctx's.
func Run(ctx context.Context, inst Instance, req ExecRequest) (Result, error) {
	p, err := inst.Start(ctx, req)
	if err != nil {
		var ce *CommandError
		if errors.As(err, &ce) {
			return ce.Result(), nil
		}
		return Result{}, err
	}
	return WaitOrKill(ctx, p)
}

// WaitOrKill waits for p to end. When ctx ends first it kills p (SIGKILL:
// every process of the exec) and waits up to KillWait for the sandbox to
// confirm: then p's result (reason "killed"), else a result that says the
// sandbox did not confirm it, with an error wrapping ctx's. Every caller
// that kills a command its caller gave up on (Run, the supervisor, the
// CLI's terminal) goes through here.
func WaitOrKill(ctx context.Context, p Process) (Result, error) {
	res, err := p.Wait(ctx)
	if ctx.Err() == nil || err == nil {
		return res, err
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), KillWait)
	defer cancel()
	go func() { _ = p.Signal(kctx, syscall.SIGKILL) }()
	if res, err := p.Wait(kctx); kctx.Err() == nil {
		return res, err
	}
	return Result{ExitCode: -1, Signal: "SIGKILL", Reason: ReasonKilled, LimitsHit: []Limit{},
		Message: "the command was killed; the sandbox did not confirm it"}, fmt.Errorf("exec %s: %w", p.ID(), ctx.Err())
}

// WaitDone is a Process's Wait over done, closed once the process has
// ended and result says how: the result of a process that has ended,
// even when ctx is done too; else ctx's error if it is done first.
func WaitDone(ctx context.Context, done <-chan struct{}, result func() (Result, error)) (Result, error) {
	select {
	case <-done:
		return result()
	default:
	}
	select {
	case <-done:
		return result()
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}
