package agentd

import (
	"errors"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// A one-shot run's command comes with the config (agent.Config.Run, or
// RunSocket where the transport carries descriptors): the agent starts it
// as soon as the sandbox is built, beside the rest of its start, and the
// host attaches to it without a handshake or an exec request before it
// (docs/decisions.md, 91). Its confinement is every command's: it starts
// through a spawner as an exec does.

// startRun starts the config's command. An exec socket is served as one
// the host passed on its session; a command from the config starts held
// (its attachment sends nothing, so its rings drop nothing) until the
// host attaches to it by its id.
func (s *server) startRun() {
	if fd := s.cfg.RunSocket; fd > 0 {
		go s.execSocket(fd)
		return
	}
	s.runStarted = make(chan struct{})
	go func() {
		defer close(s.runStarted)
		st := s.cfg.Run
		if !sandbox.ValidID(st.ID) {
			s.runErr = fmt.Errorf("%w: %w", errNoStart, sandbox.ErrInvalid)
			return
		}
		if err := (sandbox.ExecRequest{Argv: st.Argv, Env: st.Env, Dir: st.Dir}).Validate(); err != nil {
			s.runErr = err
			return
		}
		_, _, s.runErr = s.startExec(st)
	}()
}

// startFailed answers a stream whose command did not start, as an Exec
// stream's start answers: a command that cannot run is its result, any
// other error the call's.
func startFailed(send func(*agent.ExecEvent) error, err error) error {
	var ce *sandbox.CommandError
	if errors.As(err, &ce) {
		return send(&agent.ExecEvent{Exit: &sandbox.Result{ExitCode: ce.Code, Reason: sandbox.ReasonExit, Message: ce.Msg, LimitsHit: []sandbox.Limit{}}})
	}
	return agent.WireError(err)
}
