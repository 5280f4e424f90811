package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// This file is envd's Process service over the supervisor's processes.
// An E2B process is an airlock background process: it outlives the stream
// that started it (Connect follows it again), what it starts lives on (a
// server started with `&`), and it has no output limit, its latest output
// kept in its rings. Its pid is the number of its id ("e7" is pid 7).
// Every one runs as the sandbox's unprivileged user, whatever user the
// caller names.

// pidOf is the E2B pid of process id ("e7": 7); 0 when it has none.
func pidOf(id string) uint32 {
	n, err := strconv.ParseUint(strings.TrimPrefix(id, "e"), 10, 32)
	if err != nil || !strings.HasPrefix(id, "e") {
		return 0
	}
	return uint32(n)
}

// processID finds the process a selector names; with running, only one
// that runs (as envd forgets a process that has ended: killing it says
// not found).
func (h *Handler) processID(ctx context.Context, t *target, sel *processSelector, running bool) (string, error) {
	if sel == nil || (sel.PID == nil && sel.Tag == nil) {
		return "", connect.NewError(connect.CodeInvalidArgument, errors.New("process: give its pid or its tag"))
	}
	if sel.PID != nil && !running {
		return "e" + strconv.FormatUint(uint64(*sel.PID), 10), nil
	}
	ps, err := h.sup.Processes(ctx, t.c.sup, t.info.ID)
	if err != nil {
		return "", h.rpcError(err)
	}
	for i := len(ps) - 1; i >= 0; i-- {
		p := ps[i]
		if (!running || p.Running) && !isBridge(p.Argv) && ((sel.PID != nil && pidOf(p.ID) == uint32(*sel.PID)) || (sel.PID == nil && p.Tag == *sel.Tag)) {
			return p.ID, nil
		}
	}
	if sel.PID != nil {
		return "", connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found: it has ended, or never ran", *sel.PID))
	}
	return "", connect.NewError(connect.CodeNotFound, fmt.Errorf("no running process has the tag %q", truncate(*sel.Tag, 80)))
}

// execTimeout is the wall-time limit of a process, E2B's way: the
// client's (its Connect-Timeout-Ms, the SDKs' timeoutMs, 60 s by default;
// none: no limit but the sandbox's lifetime), not the sandbox's exec
// timeout, which is airlock's default for commands that ask none. A
// template that sets its own timeout bounds it: asking for more is
// refused, not lowered, and asking for none gets the template's. The
// policy's ceiling applies in the supervisor.
// ceiling is commandCeiling's, template the sandbox's template.
func execTimeout(header http.Header, template string, ceiling time.Duration) (time.Duration, error) {
	var asked time.Duration
	if ms, err := strconv.ParseInt(header.Get("Connect-Timeout-Ms"), 10, 64); err == nil && ms > 0 {
		asked = time.Duration(ms) * time.Millisecond
	}
	switch {
	case ceiling == 0:
		return asked, nil
	case asked == 0:
		return ceiling, nil
	case asked > ceiling:
		return 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("timeout %s is more than template %q allows for a command (%s): pass timeoutMs of at most %d, or ask the operator for a template with a longer timeout", asked, template, ceiling, ceiling.Milliseconds()))
	}
	return asked, nil
}

// commandCeiling is the longest a command or a code run of sandbox info
// may take: its template's timeout when the template sets one; zero
// (none but the sandbox's lifetime) when it leaves it to E2B's clients.
func (h *Handler) commandCeiling(info supervisor.Info) time.Duration {
	for _, t := range h.sup.Templates() {
		if t.Name == info.Template {
			return time.Duration(t.Timeout)
		}
	}
	return 0
}

func (h *Handler) start(ctx context.Context, req *connect.Request[startRequest], stream *connect.ServerStream[eventResponse]) error {
	t := targetOf(ctx)
	m := req.Msg
	if m.Process == nil || m.Process.Cmd == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd: give the command to run"))
	}
	env, err := envList(m.Process.Envs)
	if err != nil {
		return h.rpcError(err)
	}
	timeout, err := execTimeout(req.Header(), t.info.Template, h.commandCeiling(t.info))
	if err != nil {
		return err
	}
	sr := supervisor.StartRequest{
		ExecRequest: supervisor.ExecRequest{
			Argv: append([]string{m.Process.Cmd}, m.Process.Args...), Env: env,
			Timeout: timeout, OwnTimeout: true,
		},
		KeepStdinOpen: m.Stdin != nil && *m.Stdin,
	}
	if m.Tag != nil {
		sr.Tag = *m.Tag
	}
	if m.Process.Cwd != nil && *m.Process.Cwd != "" {
		if sr.Dir, err = h.cwd(ctx, t, *m.Process.Cwd); err != nil {
			return err
		}
	}
	if m.PTY != nil {
		size := sandbox.TermSize{Rows: 24, Cols: 80}
		if s := m.PTY.Size; s != nil {
			size = sandbox.TermSize{Rows: uint16(min(s.Rows, 65535)), Cols: uint16(min(s.Cols, 65535))}
		}
		if size.Validate() != nil {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("pty size %dx%d: give rows and cols between 1 and %d", size.Rows, size.Cols, sandbox.MaxTermSide))
		}
		sr.PTY = &size
	}
	p, err := h.sup.StartProcess(ctx, t.c.sup, t.info.ID, sr)
	var denied *policy.Denied
	if errors.As(err, &denied) {
		return deniedProcess(stream, denied)
	}
	if err != nil {
		return h.rpcError(err)
	}
	return h.follow(ctx, req.Header(), stream, t, p.ID, supervisor.Offsets{})
}

// ExitDenied is the exit code of a command the policy refused, as a
// shell's for a command it cannot execute.
const ExitDenied = 126

// deniedText is what a refused command or cell says: the rule and the
// reason, for the model to read and try something else.
func deniedText(d *policy.Denied) string {
	return "airlock: " + d.Error()
}

// deniedProcess answers a command the policy refused as one that ran
// and failed (exit 126, the rule and reason on stderr), not as an error
// of the API: the SDKs raise CommandExitError with stderr, which an
// agent's model reads, where an RPC error reads as the sandbox breaking.
// It has no pid: nothing ran.
func deniedProcess(stream *connect.ServerStream[eventResponse], d *policy.Denied) error {
	msg := deniedText(d)
	for _, ev := range []processEvent{
		{Start: &startEvent{}},
		{Data: &dataEvent{Stderr: []byte(msg + "\n")}},
		{End: &endEvent{ExitCode: ExitDenied, Exited: true, Status: "exit status " + strconv.Itoa(ExitDenied), Error: &msg}},
	} {
		if err := stream.Send(&eventResponse{Event: ev}); err != nil {
			return err
		}
	}
	return nil
}

// cwd checks a working directory: it must exist and be a directory, as
// envd refuses one that is not.
func (h *Handler) cwd(ctx context.Context, t *target, dir string) (string, error) {
	if !strings.HasPrefix(dir, "/") {
		dir = path.Join(t.home(), dir)
	}
	f, done, err := h.sup.Files(ctx, t.c.sup, t.info.ID)
	if err != nil {
		return "", h.rpcError(err)
	}
	defer done()
	fi, err := f.Stat(ctx, dir)
	if err != nil || fi.Type != "dir" {
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd %q is not a directory of the sandbox: create it first", truncate(dir, 200)))
	}
	return dir, nil
}

func (h *Handler) connectProcess(ctx context.Context, req *connect.Request[connectRequest], stream *connect.ServerStream[eventResponse]) error {
	t := targetOf(ctx)
	id, err := h.processID(ctx, t, req.Msg.Process, false)
	if err != nil {
		return err
	}
	return h.follow(ctx, req.Header(), stream, t, id, supervisor.Offsets{Now: true})
}

// follow streams process id's events: start (its pid) first, its output
// as it comes, keepalives while it is silent, and its end.
func (h *Handler) follow(ctx context.Context, header http.Header, stream *connect.ServerStream[eventResponse], t *target, id string, from supervisor.Offsets) error {
	var mu sync.Mutex
	send := func(ev processEvent) error {
		mu.Lock()
		defer mu.Unlock()
		return stream.Send(&eventResponse{Event: ev})
	}
	stop := h.keepalive(header, func() error { return send(processEvent{Keepalive: &struct{}{}}) })
	defer stop()
	info, err := h.sup.Follow(ctx, t.c.sup, t.info.ID, id, from, func(p supervisor.ProcessInfo) error {
		return send(processEvent{Start: &startEvent{PID: pidOf(p.ID)}})
	}, func(o supervisor.OutputEvent) error {
		d := &dataEvent{}
		switch o.Stream {
		case supervisor.StreamStdout:
			d.Stdout = o.Data
		case supervisor.StreamStderr:
			d.Stderr = o.Data
		default:
			d.PTY = o.Data
		}
		return send(processEvent{Data: d})
	})
	if err != nil {
		return h.rpcError(err)
	}
	return send(processEvent{End: endOf(info.Result)})
}

// keepalive calls ping whenever the stream has been silent for the
// interval the client asks for (Keepalive-Ping-Interval, seconds) or the
// handler's, whichever is shorter; the returned func stops it and returns
// once it has stopped.
func (h *Handler) keepalive(header http.Header, ping func() error) func() {
	every := h.opts.Keepalive
	if s, err := strconv.Atoi(header.Get("Keepalive-Ping-Interval")); err == nil && s > 0 {
		every = min(every, time.Duration(s)*time.Second)
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if ping() != nil {
					return
				}
			}
		}
	}()
	return func() { close(stop); <-stopped }
}

// endOf is E2B's end event for a result: a process that exited has its
// code and status "exit status N"; one killed by a signal, code -1 and
// "signal: killed". Error says why it failed: "exit status N", or
// airlock's message when a limit ended it.
func endOf(res *sandbox.Result) *endEvent {
	if res == nil {
		msg := "airlock lost the process"
		return &endEvent{ExitCode: -1, Status: "unknown", Error: &msg}
	}
	ev := &endEvent{ExitCode: int32(res.ExitCode), Exited: true, Status: "exit status " + strconv.Itoa(res.ExitCode)}
	if res.Signal != "" {
		name := strings.ToLower(strings.TrimPrefix(res.Signal, "SIG"))
		if sig, err := sandbox.ParseSignal(res.Signal); err == nil {
			name = syscall.Signal(sig).String()
		}
		ev.ExitCode, ev.Exited, ev.Status = -1, false, "signal: "+name
	}
	if res.Reason != sandbox.ReasonExit && res.Reason != "" && res.Message != "" {
		msg := res.Message
		ev.Error = &msg
	} else if ev.ExitCode != 0 {
		msg := ev.Status
		ev.Error = &msg
	}
	return ev
}

func (h *Handler) listProcesses(ctx context.Context, _ *connect.Request[listRequest]) (*connect.Response[listResponse], error) {
	t := targetOf(ctx)
	ps, err := h.sup.Processes(ctx, t.c.sup, t.info.ID)
	if err != nil {
		return nil, h.rpcError(err)
	}
	out := &listResponse{Processes: []processInfo{}}
	for _, p := range ps {
		if !p.Running || isBridge(p.Argv) || len(p.Argv) == 0 {
			continue
		}
		pi := processInfo{PID: pidOf(p.ID), Config: processConfig{Cmd: p.Argv[0], Args: p.Argv[1:]}}
		if len(p.Env) > 0 {
			pi.Config.Envs = map[string]string{}
			for _, kv := range p.Env {
				k, v, _ := strings.Cut(kv, "=")
				pi.Config.Envs[k] = v
			}
		}
		if p.Dir != "" {
			pi.Config.Cwd = &p.Dir
		}
		if p.Tag != "" {
			pi.Tag = &p.Tag
		}
		out.Processes = append(out.Processes, pi)
	}
	return connect.NewResponse(out), nil
}

func (h *Handler) sendInput(ctx context.Context, req *connect.Request[sendInputRequest]) (*connect.Response[empty], error) {
	t := targetOf(ctx)
	id, err := h.processID(ctx, t, req.Msg.Process, true)
	if err != nil {
		return nil, err
	}
	var data []byte
	switch in := req.Msg.Input; {
	case in == nil:
	case in.Stdin != nil:
		data = *in.Stdin
	case in.PTY != nil:
		data = *in.PTY
	}
	if err := h.sup.WriteStdin(ctx, t.c.sup, t.info.ID, id, data, false); err != nil {
		return nil, h.rpcError(err)
	}
	return connect.NewResponse(&empty{}), nil
}

func (h *Handler) sendSignal(ctx context.Context, req *connect.Request[sendSignalRequest]) (*connect.Response[empty], error) {
	t := targetOf(ctx)
	var sig syscall.Signal
	switch req.Msg.Signal {
	case 9:
		sig = syscall.SIGKILL
	case 15:
		sig = syscall.SIGTERM
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("signal: give SIGNAL_SIGKILL or SIGNAL_SIGTERM"))
	}
	id, err := h.processID(ctx, t, req.Msg.Process, true)
	if err != nil {
		return nil, err
	}
	if err := h.sup.Signal(ctx, t.c.sup, t.info.ID, id, sig); err != nil {
		return nil, h.rpcError(err)
	}
	return connect.NewResponse(&empty{}), nil
}

func (h *Handler) closeStdin(ctx context.Context, req *connect.Request[closeStdinRequest]) (*connect.Response[empty], error) {
	t := targetOf(ctx)
	id, err := h.processID(ctx, t, req.Msg.Process, true)
	if err != nil {
		return nil, err
	}
	if err := h.sup.WriteStdin(ctx, t.c.sup, t.info.ID, id, nil, true); err != nil {
		return nil, h.rpcError(err)
	}
	return connect.NewResponse(&empty{}), nil
}

func (h *Handler) update(ctx context.Context, req *connect.Request[updateRequest]) (*connect.Response[empty], error) {
	t := targetOf(ctx)
	id, err := h.processID(ctx, t, req.Msg.Process, true)
	if err != nil {
		return nil, err
	}
	if req.Msg.PTY == nil || req.Msg.PTY.Size == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("pty.size: give the terminal's new rows and cols"))
	}
	s := req.Msg.PTY.Size
	size := sandbox.TermSize{Rows: uint16(min(s.Rows, 65535)), Cols: uint16(min(s.Cols, 65535))}
	if err := h.sup.Resize(ctx, t.c.sup, t.info.ID, id, size); err != nil {
		return nil, h.rpcError(err)
	}
	return connect.NewResponse(&empty{}), nil
}
