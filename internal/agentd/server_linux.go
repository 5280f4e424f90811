package agentd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/sandbox"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/fsroot"
)

// Main is the agent's entry point: read the agent.Config, build the sandbox,
// serve the host until the connection ends (or, for a sandbox that
// outlives its host, until the host kills it), then exit, which ends
// everything in the sandbox.
func Main() int {
	if len(os.Args) > 1 && os.Args[1] == agent.OwnNamespacesArg {
		return ownNamespaces()
	}
	if len(os.Args) == 3 && os.Args[1] == agent.RelayArg {
		return relay(os.Args[2])
	}
	if len(os.Args) > 1 && (os.Args[1] == agent.GuestArg || os.Args[1] == agent.GuestExitArg) {
		return guestInit(os.Args[1] == agent.GuestExitArg)
	}
	// run returns only on an error: a built sandbox's agent ends by
	// os.Exit from the goroutine that serves the host (see run).
	fmt.Fprintf(os.Stderr, "airlock-agent: %v\n", run())
	return 1
}

func run() error {
	// Nothing the host passed may reach a command: mark every inherited
	// descriptor close-on-exec before anything else.
	if err := markCloexec(); err != nil {
		return fmt.Errorf("mark inherited descriptors close-on-exec: %w", err)
	}
	var cfg agent.Config
	var conn net.Conn // set here in stdio mode, below otherwise
	var stdin, stdout *os.File
	stdio := len(os.Args) > 1 && os.Args[1] == agent.StdioArg
	if stdio {
		c, in, out, err := openStdio()
		if err != nil {
			return err
		}
		stdin, stdout = in, out
		cfg = *c
		if cfg.Listen == nil {
			conn = agent.PipeConn(in, out)
		} else {
			// Standard input carried the config only; sessions come
			// from the listener. Both stay open as /dev/null, held for
			// good: a descriptor number freed here would be reused, and
			// later pointed at /dev/null too (see quiet).
			if err := toNull(0, 1); err != nil {
				return err
			}
			heldStdio = []*os.File{in, out}
		}
	} else if len(os.Args) > 1 && os.Args[1] == agent.ListenArg {
		if err := listenEarly(); err != nil {
			return err
		}
	}
	var cfgFile *os.File
	var cfgDec *json.Decoder
	if !stdio {
		cfgFile = os.NewFile(agent.FDConfig, "config")
		cfgDec = json.NewDecoder(io.LimitReader(cfgFile, agent.MaxMessage))
		err := cfgDec.Decode(&cfg)
		if err != nil {
			return fmt.Errorf("read config: %w", err)
		}
		if !cfg.Template {
			cfgFile.Close()
		}
	}
	var sessions net.Listener
	if cfg.Listen != nil {
		// Before the root is finished: the path is in a directory that
		// setup hides from commands.
		var err error
		if sessions, err = sessionListener(cfg.Listen); err != nil {
			return err
		}
	}
	workloadRoot := 0
	if cfg.Contained != nil {
		// The runtime stops the sandbox with SIGTERM (a kubelet deleting
		// the Pod, `docker stop`): end at once, and the kernel kills
		// every process of the sandbox with its first one, rather than
		// keep the runtime waiting for its grace period.
		endOnTerm()
		// The runtime built the root; what remains lives inside it.
		var err error
		if workloadRoot, err = setupContained(&cfg); err != nil {
			return err
		}
	} else {
		if err := enterAgentGroup(cfg.AgentTasks); err != nil {
			return err
		}
		if err := setup(&cfg); err != nil {
			return err
		}
	}
	// Harden before the engine starts threads of its own: dropping
	// capabilities stops every thread, and would wait for one that is
	// moving into a cgroup.
	if err := harden(&cfg); err != nil {
		return err
	}
	eng, err := newEngine(&cfg)
	if err != nil {
		return err
	}
	serve := func() error {
		eng.workloadRoot = workloadRoot
		s := &server{cfg: &cfg, eng: eng}
		s.life = newLifetime(eng.running, s.endSandbox)
		if !cfg.Template && (cfg.Run != nil || cfg.RunSocket > 0) {
			// A one-shot run's command starts now, beside the rest of the
			// start, on a spawner of its own: no spare is prepared.
			eng.noSpares = true
			s.startRun()
		} else {
			// Spawners confine themselves ahead: only once the commands' root is known.
			go eng.prepare()
		}
		if cfg.Contained != nil && cfg.Contained.Listen != "" && sessions == nil {
			// A container engine's: the first session is the attach stream,
			// later ones come through relays to the socket in the agent's
			// home, which setupContained made.
			if sessions, err = listenSessions(cfg.Contained.Listen); err != nil {
				return err
			}
		}
		if cfg.Contained != nil {
			// gVisor has no setfsuid: file operations run on threads that are
			// the workload's uid and gid altogether (see idThreads).
			s.root, err = fsroot.Open("/", -1, -1, sandbox.HomeOf(cfg.Home))
			s.ids = &idThreads{uid: cfg.UID, gid: cfg.GID}
			if errors.Is(err, sandbox.ErrUnsupported) {
				// gVisor before 2023 has no openat2, without which no path
				// is safely resolved inside the root: no file API, then.
				s.rootErr = fmt.Errorf("the file API needs openat2, which this gVisor lacks (build a current runsc with `make runsc`): %w", sandbox.ErrUnsupported)
				s.root, err = nil, nil
			}
		} else {
			s.root, err = fsroot.Open("/", cfg.UID, cfg.GID, sandbox.HomeOf(cfg.Home))
		}
		if err != nil {
			return fmt.Errorf("open the file API's root: %w", err)
		}
		// The calls' handlers, and the restores an earlier agent left, do
		// not depend on what a template's sandbox will be: a template does
		// them before it waits, so that a machine restored from its
		// snapshot does not (under emulation, code run for the first time
		// after a restore is the start's cost).
		s.snap = newSnapState()
		if s.rootErr == nil {
			if err := s.recoverRestores(); err != nil {
				return err
			}
		}
		s.mux = s.trim.wrap(s.handler())
		trimmed := false
		if cfg.Template {
			// Built ahead of its sandbox: wait for it (a virtual machine is
			// saved meanwhile), then become it.
			for _, argv := range cfg.WarmUp {
				warmUp(eng, argv)
			}
			ready := func() error {
				if cfg.ReadyFD <= 0 {
					return nil
				}
				_, err := unix.Write(cfg.ReadyFD, []byte{1})
				if cerr := unix.Close(cfg.ReadyFD); err == nil {
					err = cerr
				}
				return err
			}
			next := func() (*agent.Config, error) {
				var c agent.Config
				return &c, cfgDec.Decode(&c)
			}
			if stdio {
				// A sandbox built ahead on a stream (a warm Pod): one byte
				// on it says the sandbox is built, and the host that claims
				// it sends its config on the stream.
				ready = func() error {
					_, err := stdout.Write([]byte{1})
					return err
				}
				next = func() (*agent.Config, error) { return agent.ReadConfig(stdin) }
			}
			home := cfg.Home
			// What building took goes back before the wait (see below),
			// not while the sandbox's first calls are served.
			debug.FreeOSMemory()
			trimmed = true
			err := awaitSandbox(&cfg, ready, next)
			if cfgFile != nil {
				cfgFile.Close()
			}
			if err != nil {
				return err
			}
			if cfg.Home != home && s.root != nil {
				// The sandbox's home is the file API's base of relative
				// paths (only native agents take on a home: a guest's).
				s.root.Close()
				if s.root, err = fsroot.Open("/", cfg.UID, cfg.GID, sandbox.HomeOf(cfg.Home)); err != nil {
					return fmt.Errorf("open the file API's root: %w", err)
				}
			}
			if cfg.Contained != nil {
				// A warm Pod's. A virtual machine's spawners stay: what
				// they are built from (the commands' root and mounts, the
				// filter, the exec groups under the workload's) is the
				// same before and after, and its rlimits, the host name
				// and the groups' limits are the process's, the
				// namespace's and the parent group's, which the sandbox
				// changes for every thread at once.
				eng.discardSpawners()
			}
		}
		if s.egress, err = startEgress(cfg.Egress, &s.tun); err != nil {
			return err
		}
		if err := s.writeCABundle(cfg.Egress); err != nil && s.rootErr == nil {
			return err
		}
		if conn == nil && cfg.Listen == nil {
			if conn, err = hostConn(agent.FDConn); err != nil {
				return fmt.Errorf("open the host connection: %w", err)
			}
			if cfg.GuestControl > 0 {
				s.port = newGuestPort(conn, cfg.GuestControl)
			}
		}
		// An idle sandbox should cost the host little. No collection is
		// forced once it is built, and GOGC stays at 100 (the runtime's
		// first goal is a 4 MiB heap): building it leaves about
		// 0.25 MiB of garbage, and a collection costs more, as its sweep
		// gives every size class of the heap a second set of span lists,
		// which the runtime never frees (about 0.4 MiB). The trim, once the
		// agent is idle, collects when the garbage is worth it (trimIdle;
		// docs/decisions.md, 77). A template gave its memory back before
		// it was saved, and its first calls are not slowed by a trim.
		if !trimmed {
			time.AfterFunc(50*time.Millisecond, func() {
				s.trim.poke()
			})
		}
		if sessions != nil {
			if cfg.Listen != nil {
				// The agent's standard output and error go to a log file on
				// the host, which nothing bounds: once the sandbox is built
				// they go nowhere, so that nothing in the sandbox can fill the
				// host's disk through them.
				if err := quiet(); err != nil {
					return err
				}
			}
			if conn != nil {
				go s.serveSession(conn)
			}
			// The sandbox outlives its sessions: it ends when the host (or
			// its runtime) kills it.
			return s.serveSessions(sessions)
		}
		if s.port != nil {
			s.port.serve(s.mux)
		} else {
			agent.ServeConn(context.Background(), s.session(conn), s.mux)
		}
		// A restore past its commit point finishes before the agent ends.
		s.snap.commits.Wait()
		// The agent's exit ends the sandbox: as PID 1 of its pid namespace
		// its death kills every process in it. Killing the execs first would
		// only race the host's kill of the agent, and an agent killed while it
		// froze an exec's group for a kill would leave that group frozen.
		return nil
	}
	// From here on the main goroutine, on the main thread, reaps the
	// sandbox's processes (see reaper); the agent serves from another, and
	// its end ends the process.
	go func() {
		code := 0
		if err := serve(); err != nil {
			fmt.Fprintf(os.Stderr, "airlock-agent: %v\n", err)
			code = 1
		}
		os.Exit(code)
	}()
	eng.reaper.run()
	return errors.New("the reaper of the sandbox's processes returned")
}

// markCloexec marks every descriptor from 3 on close-on-exec: with one
// close_range call, or one by one where the kernel lacks its
// CLOSE_RANGE_CLOEXEC (Linux before 5.11, gVisor before 2023).
func markCloexec() error {
	err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
		return err
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		// The directory's own descriptor is among them, and gone by now.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			return err
		}
	}
	return nil
}

// hostConn makes the connection to the host out of descriptor fd: a
// socket (native), or a character device (a virtual machine's
// virtio-serial port), which is read and written as a file. The
// descriptor is made non-blocking before the runtime sees it, so that it
// gets deadlines.
func hostConn(fd int) (net.Conn, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFSOCK {
		return net.FileConn(os.NewFile(uintptr(fd), "conn"))
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "conn")
	return agent.PipeConn(f, f), nil
}

// heldStdio keeps standard input and output of a persistent stdio agent
// from being closed by their finalizers.
var heldStdio []*os.File //nolint:unused // written, never read: holding the files is the point

// openStdio reads the agent.Config from standard input and returns it with
// standard input and output, the host connection unless the config says
// otherwise (see agent.StdioArg).
func openStdio() (*agent.Config, *os.File, *os.File, error) {
	// Pollable descriptors give the connection deadlines.
	for _, fd := range []int{0, 1} {
		if err := unix.SetNonblock(fd, true); err != nil {
			return nil, nil, nil, fmt.Errorf("prepare the host connection: %w", err)
		}
	}
	in, out := os.NewFile(0, "stdin"), os.NewFile(1, "stdout")
	cfg, err := agent.ReadConfig(in)
	if err != nil {
		return nil, nil, nil, err
	}
	return cfg, in, out, nil
}

type server struct {
	cfg  *agent.Config
	eng  *engine
	root *fsroot.Root
	// ids, when set, runs the file operations as the workload (gVisor);
	// otherwise fsroot switches the file-system identity itself.
	ids *idThreads
	// rootErr, when set, is why there is no root and so no file API.
	rootErr error
	// egress serves the tunnels of network mode egress; nil otherwise.
	egress *egressServer
	// tun is the current session's tunnel channel (tunnel_linux.go).
	tun tunnelChannel
	// execSockets says the current session passes exec sockets
	// (execsock_linux.go).
	execSockets atomic.Bool
	// mux serves every host session.
	mux http.Handler
	// sessMu guards current, the host session being served: one at a time.
	sessMu  sync.Mutex
	current net.Conn
	// port, in a virtual machine, serves its sessions one after another
	// (guestport_linux.go); nil otherwise.
	port *guestPort
	// snap is the snapshot state (snapshot_linux.go).
	snap *snapState
	// trim ends idle threads once the agent is quiet (threads_linux.go).
	trim trimmer
	// life is the sandbox's lifetime as the host last set it
	// (lifetime_linux.go).
	life *lifetime
	// runStarted is closed once the command of the config (Config.Run)
	// has started, or failed to: runErr says why (run_linux.go).
	runStarted chan struct{}
	runErr     error
}

// files runs the file operation f with the workload's identity.
func (s *server) files(f func() error) error {
	if s.rootErr != nil {
		return s.rootErr
	}
	if s.ids == nil {
		return f()
	}
	return s.ids.do(f)
}

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	o := agent.HandlerOptions()
	mux.Handle(agent.ProcHello, s.lazily(func() http.Handler { return connect.NewUnaryHandlerSimple(agent.ProcHello, s.hello, o...) }))
	mux.Handle(agent.ProcExec, s.lazily(func() http.Handler { return connect.NewBidiStreamHandler(agent.ProcExec, s.exec, o...) }))
	mux.Handle(agent.ProcSignal, s.lazily(func() http.Handler { return connect.NewUnaryHandlerSimple(agent.ProcSignal, s.signal, o...) }))
	mux.Handle(agent.ProcReadFile, s.lazily(func() http.Handler { return connect.NewServerStreamHandlerSimple(agent.ProcReadFile, s.readFile, o...) }))
	mux.Handle(agent.ProcWriteFile, s.lazily(func() http.Handler {
		return connect.NewClientStreamHandlerSimple(agent.ProcWriteFile, s.writeFile, o...)
	}))
	mux.Handle(agent.ProcReadDir, s.lazily(func() http.Handler { return connect.NewUnaryHandlerSimple(agent.ProcReadDir, s.readDir, o...) }))
	mux.Handle(agent.ProcStat, s.lazily(func() http.Handler { return connect.NewUnaryHandlerSimple(agent.ProcStat, s.stat, o...) }))
	mux.Handle(agent.ProcMkdir, s.lazily(func() http.Handler { return connect.NewUnaryHandlerSimple(agent.ProcMkdir, s.mkdir, o...) }))
	mux.Handle(agent.ProcRemove, s.lazily(func() http.Handler { return connect.NewUnaryHandlerSimple(agent.ProcRemove, s.remove, o...) }))
	mux.Handle(agent.ProcRename, s.lazily(func() http.Handler { return connect.NewUnaryHandlerSimple(agent.ProcRename, s.rename, o...) }))
	mux.Handle(agent.ProcSymlink, s.lazily(func() http.Handler { return connect.NewUnaryHandlerSimple(agent.ProcSymlink, s.symlink, o...) }))
	mux.Handle(agent.ProcResolve, s.lazily(func() http.Handler { return connect.NewUnaryHandlerSimple(agent.ProcResolve, s.resolve, o...) }))
	mux.Handle(agent.ProcList, s.lazily(func() http.Handler { return connect.NewUnaryHandlerSimple(agent.ProcList, s.list, o...) }))
	mux.Handle(agent.ProcForget, s.lazily(func() http.Handler { return connect.NewUnaryHandlerSimple(agent.ProcForget, s.forget, o...) }))
	mux.Handle(agent.ProcSuspend, s.lazily(func() http.Handler { return connect.NewUnaryHandlerSimple(agent.ProcSuspend, s.suspendSession, o...) }))
	// s.egress is started once the sandbox's config is known, after the
	// handlers are made (a template's): it is read at each call.
	mux.Handle(agent.ProcEgress, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.egress.ServeHTTP(w, r) }))
	mux.Handle(agent.ProcDial, http.HandlerFunc(serveDial))
	s.registerSnapshots(mux)
	return s.registerLifetime(mux)
}

// hello answers the handshake with the agent's own version, whatever the
// host's: the host decides whether it can work with it (a daemon of another
// version reattaching after an upgrade only ends the sandbox).
func (s *server) hello(context.Context, *agent.HelloRequest) (*agent.HelloResponse, error) {
	var layers []sandbox.Layer
	layers = append(layers, sandbox.LayerRootFS, sandbox.LayerNoNewPrivs, sandbox.LayerCaps)
	if s.eng.filter != nil {
		layers = append(layers, sandbox.LayerSeccomp)
	}
	if s.eng.landlock {
		layers = append(layers, sandbox.LayerLandlock)
	}
	return &agent.HelloResponse{Version: agent.Version, Layers: layers, ExecSeq: s.eng.execs.lastSeq(), Persistent: s.cfg.Listen != nil || s.cfg.Contained != nil && s.cfg.Contained.Listen != "",
		Tunnels: s.tun.current() != nil, ExecSockets: s.execSockets.Load(), LazyTunnels: s.execSockets.Load()}, nil
}

func (s *server) signal(_ context.Context, req *agent.SignalRequest) (*agent.Empty, error) {
	if req.Signal <= 0 || req.Signal > 64 {
		return nil, agent.WireError(fmt.Errorf("signal %d: %w", req.Signal, sandbox.ErrInvalid))
	}
	return &agent.Empty{}, agent.WireError(s.eng.signal(req.ID, unix.Signal(req.Signal)))
}

// exec serves an Exec stream: a first message that starts a command
// starts it and follows it; one that attaches follows a command the agent
// holds (see execs_linux.go). Later messages feed its stdin and terminal.
// The end of the stream ends nothing but the following.
func (s *server) exec(ctx context.Context, stream *connect.BidiStream[agent.ExecInput, agent.ExecEvent]) error {
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	var sendMu sync.Mutex
	send := func(ev *agent.ExecEvent) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(ev)
	}
	if first.Attach != nil {
		return s.attachExec(ctx, stream, send, first.Attach)
	}
	st := first.Start
	if st == nil || !sandbox.ValidID(st.ID) {
		return agent.WireError(fmt.Errorf("%w: %w", errNoStart, sandbox.ErrInvalid))
	}
	if err := (sandbox.ExecRequest{Argv: st.Argv, Env: st.Env, Dir: st.Dir}).Validate(); err != nil {
		return agent.WireError(err)
	}
	es, att, err := s.startExec(st)
	if err != nil {
		var ce *sandbox.CommandError
		if errors.As(err, &ce) {
			return send(&agent.ExecEvent{Exit: &sandbox.Result{ExitCode: ce.Code, Reason: sandbox.ReasonExit, Message: ce.Msg, LimitsHit: []sandbox.Limit{}}})
		}
		return agent.WireError(err)
	}
	// A host whose stream broke here learns of the exec from List, or
	// kills it by id.
	if err := send(&agent.ExecEvent{Started: es.p.pid, Cgroup: es.p.cgroupName}); err != nil {
		es.detach(att)
		return err
	}
	if es.eio.input != nil {
		go s.feed(stream.Receive, es)
	}
	return s.follow(ctx, send, es, att, make([]int64, len(es.rings)))
}

// drainGrace is how long output may still arrive after the main process
// ended: a foreground exec's tree is dead by then, a background one's
// survivors may hold the pipes forever.
func drainGrace(background bool) time.Duration {
	if background {
		return 100 * time.Millisecond
	}
	return 2 * time.Second
}

// watch waits for the main process to exit, enforcing the wall-time and
// CPU-time limits.
func (s *server) watch(p *proc, st *agent.ExecStart) unix.WaitStatus {
	var timeout <-chan time.Time
	if st.TimeoutMS > 0 {
		t := time.NewTimer(time.Duration(st.TimeoutMS) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	var tick <-chan time.Time
	if st.CPUTimeMS > 0 && p.group != nil {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case ws := <-p.status:
			return ws
		case <-timeout:
			timeout = nil
			go s.eng.kill(p, sandbox.ReasonTimeout)
		case <-tick:
			if ns, err := p.group.CPUNanos(); err == nil && ns/1e6 >= st.CPUTimeMS {
				tick = nil
				go s.eng.kill(p, sandbox.ReasonCPUTime)
			}
		}
	}
}

// execIO is the standard streams of one exec: pipes, or a terminal.
type execIO struct {
	// The command's ends, closed once it has started.
	stdin, stdout, stderr *os.File
	// outputs are what the agent reads: stdout and stderr, or the master.
	outputs []*os.File
	// input is where the host's stdin goes (a pipe or the master); nil
	// when the host sends none.
	input *os.File
	// master is the terminal's agent end; nil for pipes.
	master *os.File
}

// execIO opens the streams st asks for.
func (s *server) execIO(st *agent.ExecStart) (*execIO, error) {
	x := &execIO{}
	if st.PTY != nil {
		if err := st.PTY.Validate(); err != nil {
			return nil, err
		}
		m, t, err := openPTY(*st.PTY, s.cfg.UID, s.cfg.GID)
		if err != nil {
			return nil, err
		}
		x.master, x.input, x.outputs = m, m, []*os.File{m}
		x.stdin, x.stdout, x.stderr = t, t, t
		return x, nil
	}
	var err error
	if st.Stdin {
		x.stdin, x.input, err = os.Pipe()
	} else {
		x.stdin, err = os.Open(os.DevNull)
	}
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		x.closeAll()
		return nil, err
	}
	x.stdout, x.outputs = outW, []*os.File{outR}
	errR, errW, err := os.Pipe()
	if err != nil {
		x.closeAll()
		return nil, err
	}
	x.stderr, x.outputs = errW, append(x.outputs, errR)
	return x, nil
}

// closeCommandEnds closes the agent's copies of the command's ends (a
// terminal's slave is one file for all three).
func (x *execIO) closeCommandEnds() {
	for _, f := range []*os.File{x.stdin, x.stdout, x.stderr} {
		if f != nil {
			f.Close()
		}
	}
}

// closeAgentEnds closes the agent's ends: the input, and the terminal
// (which hangs it up: what still runs on it gets SIGHUP).
func (x *execIO) closeAgentEnds() {
	if x.input != nil {
		x.input.Close()
	}
	if x.master != nil {
		x.master.Close()
	}
}

// closeAll closes everything of a command that did not start.
func (x *execIO) closeAll() {
	x.closeCommandEnds()
	x.closeAgentEnds()
	if x.master == nil {
		for _, f := range x.outputs {
			f.Close()
		}
	}
}

func exitOf(ws unix.WaitStatus) (int, string) {
	if ws.Signaled() {
		return -1, sandbox.SignalName(ws.Signal())
	}
	return ws.ExitStatus(), ""
}

// diskFull reports whether /workspace or /tmp has no room left.
func diskFull() bool {
	for _, p := range []string{sandbox.Workspace, "/tmp"} {
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && st.Blocks > 0 && st.Bavail*uint64(st.Bsize) < 64<<10 {
			return true
		}
	}
	return false
}

func (s *server) readFile(_ context.Context, req *agent.PathRequest, stream *connect.ServerStream[agent.FileChunk]) error {
	w := &chunkWriter{send: func(b []byte) error { return stream.Send(&agent.FileChunk{Data: b}) }}
	err := s.files(func() error {
		_, err := s.root.ReadFile(req.Path, req.Offset, req.Limit, w)
		return err
	})
	if err == nil {
		err = w.flush()
	}
	return agent.WireError(err)
}

func (s *server) writeFile(_ context.Context, stream *connect.ClientStream[agent.FileChunk]) (*agent.Empty, error) {
	if !stream.Receive() {
		return nil, agent.WireError(fmt.Errorf("write needs a path: %w", sandbox.ErrInvalid))
	}
	first := stream.Msg()
	r := &chunkReader{pending: first.Data, next: func() ([]byte, error) {
		if !stream.Receive() {
			if err := stream.Err(); err != nil {
				return nil, err
			}
			return nil, io.EOF
		}
		return stream.Msg().Data, nil
	}}
	mode := fs.FileMode(first.Mode).Perm()
	if mode == 0 {
		mode = 0o644
	}
	err := s.files(func() error {
		_, err := s.writeRoot(first.NoFollow).WriteFile(first.Path, r, mode, s.cfg.DiskBytes)
		return err
	})
	return &agent.Empty{}, agent.WireError(err)
}

func (s *server) readDir(_ context.Context, req *agent.PathRequest) (*agent.FileList, error) {
	var fi []sandbox.FileInfo
	err := s.files(func() (err error) {
		fi, err = s.root.ReadDir(req.Path)
		return err
	})
	return &agent.FileList{Files: fi}, agent.WireError(err)
}

func (s *server) stat(_ context.Context, req *agent.PathRequest) (*agent.FileList, error) {
	var fi sandbox.FileInfo
	err := s.files(func() (err error) {
		fi, err = s.root.Stat(req.Path)
		return err
	})
	return &agent.FileList{Files: []sandbox.FileInfo{fi}}, agent.WireError(err)
}

func (s *server) mkdir(_ context.Context, req *agent.PathRequest) (*agent.Empty, error) {
	mode := fs.FileMode(req.Mode).Perm()
	if mode == 0 {
		mode = 0o755
	}
	return &agent.Empty{}, agent.WireError(s.files(func() error { return s.writeRoot(req.NoFollow).Mkdir(req.Path, mode) }))
}

func (s *server) remove(_ context.Context, req *agent.PathRequest) (*agent.Empty, error) {
	return &agent.Empty{}, agent.WireError(s.files(func() error { return s.writeRoot(req.NoFollow).Remove(req.Path) }))
}

func (s *server) rename(_ context.Context, req *agent.PathRequest) (*agent.Empty, error) {
	return &agent.Empty{}, agent.WireError(s.files(func() error { return s.writeRoot(req.NoFollow).Rename(req.Path, req.To) }))
}

func (s *server) resolve(_ context.Context, req *agent.PathRequest) (*agent.PathRequest, error) {
	var p string
	err := s.files(func() (err error) {
		p, err = s.root.Resolve(req.Path)
		return err
	})
	return &agent.PathRequest{Path: p}, agent.WireError(err)
}

// writeRoot is the root a write works in: with noFollow, one that follows
// no symlink on the way.
func (s *server) writeRoot(noFollow bool) *fsroot.Root {
	if noFollow {
		return s.root.NoFollow()
	}
	return s.root
}

func (s *server) symlink(_ context.Context, req *agent.PathRequest) (*agent.Empty, error) {
	return &agent.Empty{}, agent.WireError(s.files(func() error { return s.writeRoot(req.NoFollow).Symlink(req.To, req.Path) }))
}

// chunkWriter sends what is written in chunks of at most agent.ChunkSize.
type chunkWriter struct {
	buf  []byte
	send func([]byte) error
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), agent.ChunkSize-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == agent.ChunkSize {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.send(w.buf)
	w.buf = w.buf[:0]
	return err
}

// chunkReader reads a stream of chunks as one byte stream.
type chunkReader struct {
	pending []byte
	next    func() ([]byte, error)
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		b, err := r.next()
		if err != nil {
			return 0, err
		}
		r.pending = b
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}
