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
// serve the host until the connection ends, then kill everything.
func Main() int {
	if len(os.Args) == 3 && os.Args[1] == agent.RelayArg {
		return relay(os.Args[2])
	}
	if len(os.Args) > 1 && (os.Args[1] == agent.GuestArg || os.Args[1] == agent.GuestExitArg) {
		return guestInit(os.Args[1] == agent.GuestExitArg)
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "airlock-agent: %v\n", err)
		return 1
	}
	return 0
}

func run() error {
	// Nothing the host passed may reach a command: mark every inherited
	// descriptor close-on-exec before anything else.
	if err := markCloexec(); err != nil {
		return fmt.Errorf("mark inherited descriptors close-on-exec: %w", err)
	}
	var cfg agent.Config
	var conn net.Conn // set here in stdio mode, below otherwise
	if len(os.Args) > 1 && os.Args[1] == agent.StdioArg {
		c, sc, err := openStdio()
		if err != nil {
			return err
		}
		cfg, conn = *c, sc
	}
	var cfgFile *os.File
	var cfgDec *json.Decoder
	if conn == nil {
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
	workloadRoot := 0
	if cfg.Contained != nil {
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
	eng.workloadRoot = workloadRoot
	s := &server{cfg: &cfg, eng: eng}
	var sessions *net.UnixListener
	if cfg.Contained != nil && cfg.Contained.Listen != "" {
		s.persistent = true
		if sessions, err = listenSessions(cfg.Contained.Listen); err != nil {
			return err
		}
	}
	if cfg.Contained != nil {
		// gVisor has no setfsuid: file operations run on threads that are
		// the workload's uid and gid altogether (see idThreads).
		s.root, err = fsroot.Open("/", -1, -1, sandbox.Workspace)
		s.ids = &idThreads{uid: cfg.UID, gid: cfg.GID}
		if errors.Is(err, sandbox.ErrUnsupported) {
			// gVisor before 2023 has no openat2, without which no path
			// is safely resolved inside the root: no file API, then.
			s.rootErr = fmt.Errorf("the file API needs openat2, which this gVisor lacks (build a current runsc with `make runsc`): %w", sandbox.ErrUnsupported)
			s.root, err = nil, nil
		}
	} else {
		s.root, err = fsroot.Open("/", cfg.UID, cfg.GID, sandbox.Workspace)
	}
	if err != nil {
		return fmt.Errorf("open the file API's root: %w", err)
	}
	if cfg.Template {
		// Built ahead of its sandbox: wait for it (a virtual machine is
		// saved meanwhile), then become it.
		for _, argv := range cfg.WarmUp {
			warmUp(eng, argv)
		}
		err := awaitSandbox(&cfg, cfgDec)
		cfgFile.Close()
		if err != nil {
			return err
		}
	}
	if s.egress, err = startEgress(cfg.Egress); err != nil {
		return err
	}
	s.mux = s.handler()
	if conn == nil {
		if conn, err = hostConn(agent.FDConn); err != nil {
			return fmt.Errorf("open the host connection: %w", err)
		}
	}
	// An idle sandbox should cost the host little: a tight heap (the agent's
	// live heap is about 2 MiB), and what building the sandbox took goes
	// back to the OS once it is built.
	time.AfterFunc(50*time.Millisecond, func() {
		debug.SetGCPercent(25)
		debug.FreeOSMemory()
	})
	// The main goroutine is locked to the main thread (see cmd/airlock-agent);
	// the connection is served from another, so that the hot path never
	// waits for that one thread to be woken.
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.serveSession(conn)
	}()
	if sessions != nil {
		// The sandbox outlives its sessions: it ends when its runtime
		// stops it.
		go s.acceptSessions(sessions)
		select {}
	}
	<-done
	eng.killAll()
	return nil
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

// openStdio reads the agent.Config from standard input and returns the host
// connection on standard input and output (see agent.StdioArg).
func openStdio() (*agent.Config, net.Conn, error) {
	// Pollable descriptors give the connection deadlines.
	for _, fd := range []int{0, 1} {
		if err := unix.SetNonblock(fd, true); err != nil {
			return nil, nil, fmt.Errorf("prepare the host connection: %w", err)
		}
	}
	in, out := os.NewFile(0, "stdin"), os.NewFile(1, "stdout")
	cfg, err := agent.ReadConfig(in)
	if err != nil {
		return nil, nil, err
	}
	return cfg, agent.PipeConn(in, out), nil
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
	// mux serves every session.
	mux http.Handler
	// persistent says the sandbox outlives its sessions (see
	// agent.ContainedConfig.Listen).
	persistent bool
	sessMu     sync.Mutex
	current    *session
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
	mux.Handle(agent.ProcHello, connect.NewUnaryHandlerSimple(agent.ProcHello, s.hello, o...))
	mux.Handle(agent.ProcExec, connect.NewBidiStreamHandler(agent.ProcExec, s.exec, o...))
	mux.Handle(agent.ProcSignal, connect.NewUnaryHandlerSimple(agent.ProcSignal, s.signal, o...))
	mux.Handle(agent.ProcReadFile, connect.NewServerStreamHandlerSimple(agent.ProcReadFile, s.readFile, o...))
	mux.Handle(agent.ProcWriteFile, connect.NewClientStreamHandlerSimple(agent.ProcWriteFile, s.writeFile, o...))
	mux.Handle(agent.ProcReadDir, connect.NewUnaryHandlerSimple(agent.ProcReadDir, s.readDir, o...))
	mux.Handle(agent.ProcStat, connect.NewUnaryHandlerSimple(agent.ProcStat, s.stat, o...))
	mux.Handle(agent.ProcMkdir, connect.NewUnaryHandlerSimple(agent.ProcMkdir, s.mkdir, o...))
	mux.Handle(agent.ProcRemove, connect.NewUnaryHandlerSimple(agent.ProcRemove, s.remove, o...))
	mux.Handle(agent.ProcRename, connect.NewUnaryHandlerSimple(agent.ProcRename, s.rename, o...))
	mux.Handle(agent.ProcSymlink, connect.NewUnaryHandlerSimple(agent.ProcSymlink, s.symlink, o...))
	mux.Handle(agent.ProcResolve, connect.NewUnaryHandlerSimple(agent.ProcResolve, s.resolve, o...))
	s.egress.register(mux)
	return mux
}

func (s *server) hello(_ context.Context, req *agent.HelloRequest) (*agent.HelloResponse, error) {
	if req.Version != agent.Version {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("agent speaks protocol %d, host %d: use the agent built with this airlock", agent.Version, req.Version))
	}
	var layers []sandbox.Layer
	layers = append(layers, sandbox.LayerRootFS, sandbox.LayerNoNewPrivs, sandbox.LayerCaps)
	if s.eng.filter != nil {
		layers = append(layers, sandbox.LayerSeccomp)
	}
	if s.eng.landlock {
		layers = append(layers, sandbox.LayerLandlock)
	}
	return &agent.HelloResponse{Version: agent.Version, Layers: layers}, nil
}

func (s *server) signal(_ context.Context, req *agent.SignalRequest) (*agent.Empty, error) {
	if req.Signal <= 0 || req.Signal > 64 {
		return nil, agent.WireError(fmt.Errorf("signal %d: %w", req.Signal, sandbox.ErrInvalid))
	}
	return &agent.Empty{}, agent.WireError(s.eng.signal(req.ID, unix.Signal(req.Signal)))
}

// exec runs one command: the first message starts it, later ones feed its
// stdin; the agent streams its output and ends with its Result.
func (s *server) exec(ctx context.Context, stream *connect.BidiStream[agent.ExecInput, agent.ExecEvent]) error {
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	st := first.Start
	if st == nil || !sandbox.ValidID(st.ID) {
		return agent.WireError(fmt.Errorf("exec needs a start message with a valid id: %w", sandbox.ErrInvalid))
	}
	if err := (sandbox.ExecRequest{Argv: st.Argv, Env: st.Env, Dir: st.Dir}).Validate(); err != nil {
		return agent.WireError(err)
	}
	var sendMu sync.Mutex
	send := func(ev *agent.ExecEvent) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(ev)
	}

	eio, err := s.execIO(st)
	if err != nil {
		return agent.WireError(err)
	}
	var pidsBefore int64
	if s.eng.workload != nil {
		pidsBefore = s.eng.workload.PidsMax()
	}
	p, err := s.eng.start(st, eio.stdin, eio.stdout, eio.stderr)
	eio.closeCommandEnds()
	if err != nil {
		eio.closeAll()
		var ce *sandbox.CommandError
		if errors.As(err, &ce) {
			return send(&agent.ExecEvent{Exit: &sandbox.Result{ExitCode: ce.Code, Reason: sandbox.ReasonExit, Message: ce.Msg, LimitsHit: []sandbox.Limit{}}})
		}
		return agent.WireError(err)
	}
	if err := send(&agent.ExecEvent{Started: p.pid, Cgroup: p.cgroupName}); err != nil && !s.detached(ctx) {
		s.eng.kill(p, sandbox.ReasonKilled)
	}
	if eio.input != nil {
		go feedInput(stream, eio)
	}

	// Output: each stream is counted; past the limit the exec is killed.
	var outWG sync.WaitGroup
	var written [2]atomic.Int64
	var truncated [2]atomic.Bool
	for i, r := range eio.outputs {
		outWG.Add(1)
		go func() {
			defer outWG.Done()
			if eio.master == nil {
				defer r.Close()
			}
			buf := make([]byte, agent.ChunkSize)
			for {
				n, err := r.Read(buf)
				if n > 0 {
					data := buf[:n]
					if left := st.OutputLimit - written[i].Load(); st.OutputLimit > 0 && int64(n) > left {
						data = buf[:max(left, 0)]
						if truncated[i].CompareAndSwap(false, true) {
							go s.eng.kill(p, sandbox.ReasonOutputLimit)
						}
					}
					written[i].Add(int64(len(data)))
					if len(data) > 0 {
						ev := &agent.ExecEvent{Stdout: data}
						if i == 1 {
							ev = &agent.ExecEvent{Stderr: data}
						}
						if send(ev) != nil && !s.detached(ctx) {
							go s.eng.kill(p, sandbox.ReasonKilled)
						}
					}
				}
				if err != nil {
					// A terminal whose last holder closed it answers EIO.
					return
				}
			}
		}()
	}

	ws := s.watch(ctx, p, st)
	if p.group != nil && !st.Background {
		// A command owns its whole tree: what it left running ends with it.
		_ = p.group.Kill(5 * time.Second)
	} else if !st.Background {
		_ = unix.Kill(-p.pid, unix.SIGKILL)
	}
	drained := make(chan struct{})
	go func() { outWG.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainGrace(st.Background)):
	}
	eio.closeAgentEnds()

	var res sandbox.Result
	res.ExitCode, res.Signal = exitOf(ws)
	res.Usage.WallMS = time.Since(p.started).Milliseconds()
	res.Usage.BytesWritten = written[0].Load() + written[1].Load()
	res.StdoutTruncated, res.StderrTruncated = truncated[0].Load(), truncated[1].Load()
	reason, _ := p.reason.Load().(sandbox.Reason)
	var stats struct{ oom, pids bool }
	if p.group != nil {
		gs, _ := p.group.Stats()
		res.Usage.CPUMS = gs.CPUNanos / 1e6
		res.Usage.MemoryPeakBytes = gs.MemoryPeak
		stats.oom = gs.OOMKills > 0
		stats.pids = gs.PidsMax > 0 || s.eng.workload.PidsMax() > pidsBefore
	}
	res.Classify(reason, sandbox.Evidence{OOM: stats.oom, Pids: stats.pids, DiskFull: diskFull()})
	if !st.Background {
		s.eng.remove(p)
	} else {
		go func() { <-drained; s.eng.remove(p) }()
	}
	err = send(&agent.ExecEvent{Exit: &res})
	// The next command's spawner is prepared while the sandbox is idle,
	// not while a command starts or runs.
	go s.eng.prepare()
	return err
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
// CPU-time limits and the caller going away.
func (s *server) watch(ctx context.Context, p *proc, st *agent.ExecStart) unix.WaitStatus {
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
	done := ctx.Done()
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
		case <-done:
			done = nil
			if !s.detached(ctx) {
				go s.eng.kill(p, sandbox.ReasonKilled)
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

// feedInput passes the host's stdin to the command and applies resizes,
// until the host's half of the stream ends, or (pipes) stdin ends.
func feedInput(stream *connect.BidiStream[agent.ExecInput, agent.ExecEvent], x *execIO) {
	if x.master == nil {
		defer x.input.Close()
	}
	for {
		msg, err := stream.Receive()
		if err != nil {
			return
		}
		if len(msg.Stdin) > 0 {
			if _, err := x.input.Write(msg.Stdin); err != nil {
				return
			}
		}
		if msg.Resize != nil && x.master != nil {
			_ = resize(x.master, *msg.Resize)
		}
		if msg.StdinEOF && x.master == nil {
			return
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
