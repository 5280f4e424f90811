package gvisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// instance is one gVisor sandbox: a `runsc run` process whose container's
// only process is the agent, talking over the container's stdin and stdout.
type instance struct {
	d           *Driver
	spec        sandbox.Spec
	layers      []sandbox.Layer
	agentLayers []sandbox.Layer
	lock        *os.File
	bundle      string
	group       *cgroup.Group // the host cgroup; nil without cgroups
	cmd         *exec.Cmd
	conn        net.Conn
	client      *agent.Client
	log         agentdriver.LogBuffer // runsc's and the agent's standard error
	done        chan struct{}
	doneOnce    sync.Once
	lifetime    *time.Timer

	execSeq atomic.Int64
	mu      sync.Mutex
	procs   map[string]*process
	closed  bool
	// ended says why the sandbox ended by itself (it died), once it has.
	ended *death

	closeOnce    sync.Once
	closeErr     error
	teardownOnce sync.Once
}

// death is why a sandbox ended without being closed.
type death struct {
	reason sandbox.Reason // oom, pids, or error
	msg    string
}

var _ sandbox.Instance = (*instance)(nil)

func (in *instance) ID() string              { return in.spec.ID }
func (in *instance) Layers() []sandbox.Layer { return append([]sandbox.Layer(nil), in.layers...) }
func (in *instance) Done() <-chan struct{}   { return in.done }
func (in *instance) Files() sandbox.Files    { return files{in} }

// makeCgroup makes the sandbox's host cgroup with the host limits. runsc
// joins a cgroup that exists and leaves it alone, so its counters (the OOM
// kills above all) outlive runsc, until teardown removes it.
func (in *instance) makeCgroup(h hostLimits) error {
	g := in.d.hier.Open(in.d.opts.CgroupParent + "/" + in.spec.ID)
	if g.Exists() {
		// A stale group of a sandbox of the same name: its limits are not
		// ours to trust.
		_ = g.Kill(5*time.Second, os.Getpid())
		if err := g.Remove(); err != nil {
			return fmt.Errorf("remove the stale cgroup of %s: %w", in.spec.ID, err)
		}
	}
	in.group = g
	if err := g.Create(); err != nil {
		return err
	}
	// The CPU quota comes once the sandbox is up (limitCPU): gVisor's own
	// start is not the workload's, and throttled to half a core it takes
	// twice as long.
	return g.Set(cgroup.Limits{MemoryBytes: h.MemoryBytes, Pids: int(h.Pids)})
}

// limitCPU sets the sandbox's CPU quota on its host cgroup.
func (in *instance) limitCPU(h hostLimits) error {
	if in.group == nil {
		return nil
	}
	return in.group.Set(cgroup.Limits{CPUs: h.CPUs})
}

// start runs `runsc run` on the bundle, sends the agent its Config and
// performs the handshake.
func (in *instance) start(ctx context.Context) error {
	d := in.d
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("make the agent connection: %w", err)
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return fmt.Errorf("make the agent connection: %w", err)
	}
	in.conn = agent.PipeConn(stdoutR, stdinW)
	args := append(d.runscArgs(), "run", "--bundle", in.bundle, in.spec.ID)
	cmd := &exec.Cmd{
		Path:   d.runsc.Path,
		Args:   append([]string{"runsc"}, args...),
		Env:    []string{}, // nothing of airlock's environment reaches runsc or its logs
		Dir:    "/",
		Stdin:  stdinR,
		Stdout: stdoutW,
		Stderr: &in.log,
		// runsc passes its own stdio to the container. The Sentry and the
		// gofer die with `runsc run` (it starts them attached).
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
		WaitDelay:   2 * time.Second,
	}
	err = in.startInGroup(cmd)
	stdinR.Close()
	stdoutW.Close()
	if err != nil {
		return fmt.Errorf("start runsc: %w", err)
	}
	in.cmd = cmd
	go in.wait()
	cfg := agentConfig(in.spec)
	if err := agent.WriteConfig(stdinW, cfg); err != nil {
		return fmt.Errorf("start the sandbox: %w%s", err, in.stderr())
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stop := context.AfterFunc(dctx, func() { in.conn.Close() })
	client, layers, err := agent.Dial(dctx, in.conn)
	stop()
	if err != nil {
		if dctx.Err() != nil {
			err = fmt.Errorf("%w (the agent did not answer within 30 s)", err)
		}
		return in.startError(err)
	}
	in.client, in.agentLayers = client, layers
	return nil
}

// startInGroup starts cmd (runsc) inside the sandbox's host cgroup, so
// that runsc, its gofer, the Sentry and every stub process they fork are
// in it from their first instruction. runsc itself is told to leave
// cgroups alone (--ignore-cgroups): joining the host's cgroup v1
// hierarchies one by one, moving processes between them, costs it about
// 50 ms a start. On v2 the child is cloned straight into the group
// (CLONE_INTO_CGROUP). On v1 a locked thread moves itself into the group
// (which spares the kernel the global lock and RCU grace period a process
// move takes), forks runsc from there, and moves back to where it was.
func (in *instance) startInGroup(cmd *exec.Cmd) error {
	if in.group == nil {
		return cmd.Start()
	}
	h := in.d.hier
	if h.V2 {
		fd, err := unix.Open(in.group.Path("memory"), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open the sandbox's cgroup: %w", err)
		}
		defer unix.Close(fd)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		return cmd.Start()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := threadCgroups(h)
		if err != nil {
			errc <- err
			runtime.UnlockOSThread()
			return
		}
		moved := false
		for _, c := range cgroup.V1Controllers {
			if err = enterThread(filepath.Join(in.group.Path(c), "tasks")); err != nil {
				err = fmt.Errorf("enter the sandbox's cgroup (%s): %w", c, err)
				break
			}
			moved = true
		}
		if err == nil {
			err = cmd.Start()
		}
		for _, tasks := range home {
			if moved && enterThread(tasks) != nil {
				// Stuck in the sandbox's cgroup: the thread must not run
				// anything else. It ends with this goroutine (Go parks
				// the main thread instead; teardown spares this process).
				errc <- err
				return
			}
		}
		errc <- err
		runtime.UnlockOSThread()
	}()
	return <-errc
}

// enterThread moves the calling thread into the group of a v1 tasks file.
func enterThread(tasks string) error {
	return os.WriteFile(tasks, []byte("0"), 0)
}

// threadCgroups returns the tasks files of the calling thread's own groups
// in the v1 hierarchies of h, to go back to.
func threadCgroups(h *cgroup.Hierarchy) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/cgroup", unix.Gettid()))
	if err != nil {
		return nil, fmt.Errorf("read the thread's cgroups: %w", err)
	}
	var out []string
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			mnt, ok := h.Mounts[c]
			if !ok || !slices.Contains(cgroup.V1Controllers, c) {
				continue
			}
			tasks := filepath.Join(mnt, parts[2], "tasks")
			if !seen[tasks] {
				seen[tasks] = true
				out = append(out, tasks)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("read the thread's cgroups: none of %v in %q", cgroup.V1Controllers, b)
	}
	return out, nil
}

// startError explains why a sandbox did not start: runsc's own words, and
// whether it ran into the host's process limit.
func (in *instance) startError(err error) error {
	if in.group != nil {
		// Give runsc a moment to fail all the way and count what it hit.
		select {
		case <-in.done:
		case <-time.After(time.Second):
		}
		if st, serr := in.group.Stats(); serr == nil && st.PidsMax > 0 {
			return fmt.Errorf("start the sandbox: gVisor's own processes and threads ran into the host's process limit of %d (pids): %w: %w%s",
				hostLimitsFor(in.spec.Limits, false).Pids, sandbox.ErrLimit, err, in.stderr())
		}
	}
	return fmt.Errorf("start the sandbox: %w%s", err, in.stderr())
}

// wait waits for `runsc run` to exit: the sandbox has ended. If nobody
// closed it, it died; the host's counters say why.
func (in *instance) wait() {
	err := in.cmd.Wait()
	in.mu.Lock()
	closed := in.closed
	in.mu.Unlock()
	if !closed {
		dt := in.deathCause(err)
		in.mu.Lock()
		in.ended = dt
		in.mu.Unlock()
		in.d.opts.Logger.Warn("gVisor sandbox ended by itself", "sandbox_id", in.spec.ID, "reason", dt.reason, "err", dt.msg)
	}
	in.doneOnce.Do(func() { close(in.done) })
}

// deathCause reads why the sandbox died from the host's counters.
func (in *instance) deathCause(waitErr error) *death {
	var st cgroup.Stats
	if in.group != nil {
		st, _ = in.group.Stats()
	}
	l := in.spec.Limits
	switch {
	case st.OOMKills > 0:
		return &death{reason: sandbox.ReasonOOM, msg: fmt.Sprintf("out of memory: the memory limit of %s killed gVisor's kernel, and every process of the sandbox with it", sandbox.FormatBytes(l.MemoryBytes))}
	case st.PidsMax > 0:
		return &death{reason: sandbox.ReasonPids, msg: fmt.Sprintf("gVisor's own processes ran into the host's process limit (%d for a sandbox of %d processes)", hostLimitsFor(l, false).Pids, l.Pids)}
	}
	msg := "gVisor exited"
	if waitErr != nil {
		msg += ": " + waitErr.Error()
	}
	return &death{reason: sandbox.ReasonError, msg: msg + in.stderr()}
}

// endedError is the error of every call on a sandbox that has ended.
func (in *instance) endedError() error {
	in.mu.Lock()
	dt := in.ended
	in.mu.Unlock()
	if dt == nil {
		return sandbox.ErrClosed
	}
	return fmt.Errorf("sandbox %s ended: %s: %w", in.spec.ID, dt.msg, sandbox.ErrClosed)
}

// isDone says whether the sandbox has ended.
func (in *instance) isDone() bool {
	select {
	case <-in.done:
		return true
	default:
		return false
	}
}

// stderr returns what runsc and the agent wrote to standard error, for an
// error message.
func (in *instance) stderr() string {
	b := bytes.TrimSpace(in.log.Bytes())
	if len(b) == 0 {
		return ""
	}
	return ": " + string(b)
}

// Exec runs req to its end.
func (in *instance) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.Result, error) {
	p, err := in.Start(ctx, req)
	if err != nil {
		var ce *sandbox.CommandError
		if errors.As(err, &ce) {
			return sandbox.Result{ExitCode: ce.Code, Reason: sandbox.ReasonExit, LimitsHit: []sandbox.Limit{}, Message: ce.Msg}, nil
		}
		return sandbox.Result{}, err
	}
	stop := context.AfterFunc(ctx, func() { _ = p.Signal(context.Background(), syscall.SIGKILL) })
	defer stop()
	return p.Wait(context.Background())
}

// Start starts req and returns at once.
func (in *instance) Start(ctx context.Context, req sandbox.ExecRequest) (sandbox.Process, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	in.mu.Lock()
	closed := in.closed
	in.mu.Unlock()
	if closed {
		return nil, sandbox.ErrClosed
	}
	if in.isDone() {
		return nil, in.endedError()
	}
	id := "e" + strconv.FormatInt(in.execSeq.Add(1), 10)
	l := in.spec.Limits
	timeout := req.Timeout
	if timeout == 0 && !req.Background {
		timeout = l.Timeout
	}
	cpu := req.CPUTime
	if cpu == 0 {
		cpu = l.CPUTime
	}
	p := &process{in: in, id: id, req: req, timeout: timeout, cpuTime: cpu, done: make(chan struct{})}
	if in.group != nil {
		p.before, _ = in.group.Stats()
	}
	// The stream lives as long as the exec, not as long as ctx.
	sctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	stop := context.AfterFunc(ctx, cancel)
	ex, err := in.client.StartExec(sctx, &agent.ExecStart{
		ID: id, Argv: req.Argv, Env: req.Env, Dir: req.Dir,
		TimeoutMS: timeout.Milliseconds(), CPUTimeMS: cpu.Milliseconds(),
		Background: req.Background, Stdin: req.Stdin != nil, OutputLimit: l.OutputBytes,
	})
	stop()
	if err != nil {
		cancel()
		// A broken connection is a dead sandbox (say why) or a broken agent.
		var ce *sandbox.CommandError
		if !errors.As(err, &ce) && ctx.Err() == nil && in.waitDone(2*time.Second) {
			return nil, in.endedError()
		}
		return nil, err
	}
	p.ex, p.started = ex, time.Now()
	in.mu.Lock()
	in.procs[id] = p
	in.mu.Unlock()
	if req.Stdin != nil {
		go ex.FeedStdin(req.Stdin)
	}
	go p.run()
	return p, nil
}

// waitDone waits up to d for the sandbox to end, and says whether it did:
// a broken connection is either a dead sandbox or a broken agent.
func (in *instance) waitDone(d time.Duration) bool {
	select {
	case <-in.done:
		return true
	case <-time.After(d):
		return false
	}
}

// Close ends the sandbox and removes everything it made on the host. It
// runs once; later calls return the first result.
func (in *instance) Close(ctx context.Context) error {
	in.closeOnce.Do(func() {
		in.mu.Lock()
		in.closed = true
		in.mu.Unlock()
		if in.lifetime != nil {
			in.lifetime.Stop()
		}
		in.teardown()
		if left := in.leftovers(); len(left) > 0 {
			in.closeErr = fmt.Errorf("sandbox %s: left on the host after close: %v", in.spec.ID, left)
		}
	})
	return in.closeErr
}

// teardown stops the sandbox and removes what it made, whatever state it
// is in: a live one, a half-made one, a dead one, a stale one of an
// airlock process that died. In order: the agent is told to go (it exits
// when its connection ends, and runsc with it, removing its own state);
// runsc is killed if it lingers (the Sentry and the gofer die with it);
// whatever is left in the host cgroup is killed; runsc's state, the
// cgroups, the bundle and the lock are removed.
func (in *instance) teardown() {
	in.teardownOnce.Do(func() {
		log := in.d.opts.Logger.With("sandbox_id", in.spec.ID)
		if in.client != nil {
			in.client.Close()
		}
		if in.conn != nil {
			in.conn.Close()
		}
		if in.cmd != nil && !in.waitDone(5*time.Second) {
			log.Warn("runsc did not exit after its agent was told to: killing it")
			_ = in.cmd.Process.Kill()
			if !in.waitDone(10 * time.Second) {
				log.Error("runsc did not exit after SIGKILL")
			}
		}
		if in.group != nil {
			// This process is never the sandbox's, even should a thread of
			// it have been left in the group (see startInGroup).
			if err := in.group.Kill(5*time.Second, os.Getpid()); err != nil {
				log.Warn("kill what is left in the sandbox's cgroup", "err", err)
			}
		}
		if in.d.runsc != nil && len(in.stateFiles()) > 0 {
			if _, err := in.d.runscCmd(10*time.Second, "delete", "--force", in.spec.ID); err != nil {
				log.Warn("delete the sandbox's runsc state", "err", err)
			}
			for _, f := range in.stateFiles() {
				_ = os.Remove(f)
			}
		}
		if in.group != nil {
			if err := in.group.Remove(); err != nil {
				log.Warn("remove the sandbox's cgroup", "err", err)
			}
		}
		// runsc makes the controllers airlock does not use (cpuset,
		// devices…) itself and removes them when it exits cleanly.
		for _, dir := range cgroupDirs(in.d.opts.CgroupParent, in.spec.ID) {
			if err := removeCgroupTree(dir); err != nil {
				log.Warn("remove a cgroup runsc left", "dir", dir, "err", err)
			}
		}
		if in.bundle != "" {
			in.removeBundle(log)
		}
		if in.lock != nil {
			os.Remove(in.lock.Name())
			in.lock.Close()
		}
		if in.cmd == nil {
			in.doneOnce.Do(func() { close(in.done) })
		}
	})
}

// removeBundle removes the bundle, after detaching the mounts pinned in
// it; while anything is still mounted below it, it is left alone, so that
// removing it can never reach into a host directory the sandbox mounted.
func (in *instance) removeBundle(log *slog.Logger) {
	if err := unpin(in.bundle); err != nil {
		log.Warn("detach the bundle's mounts", "err", err)
	}
	if left := mountsBelow(in.bundle); len(left) > 0 {
		log.Error("not removing the sandbox's bundle: something is still mounted in it", "mounts", left)
		return
	}
	if err := os.RemoveAll(in.bundle); err != nil {
		log.Warn("remove the sandbox's bundle", "err", err)
	}
}

// stateFiles lists runsc's state files of the sandbox.
func (in *instance) stateFiles() []string {
	dir := in.d.stateDir()
	var out []string
	for _, pat := range []string{in.spec.ID + "_sandbox:*", "runsc-" + in.spec.ID + ".sock"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		out = append(out, m...)
	}
	return out
}

// leftovers lists what of the sandbox is still on the host.
func (in *instance) leftovers() []string {
	var left []string
	left = append(left, in.stateFiles()...)
	left = append(left, cgroupDirs(in.d.opts.CgroupParent, in.spec.ID)...)
	if in.bundle != "" {
		left = append(left, mountsBelow(in.bundle)...)
		if _, err := os.Stat(in.bundle); err == nil {
			left = append(left, in.bundle)
		}
	}
	return left
}

// process is one exec on the host's side.
type process struct {
	in       *instance
	id       string
	req      sandbox.ExecRequest
	timeout  time.Duration
	cpuTime  time.Duration
	ex       *agent.Exec
	before   cgroup.Stats // the host cgroup's counters when it started
	started  time.Time
	cancel   context.CancelFunc
	killedBy atomic.Value // sandbox.Reason the host killed it for

	done   chan struct{}
	result sandbox.Result
	err    error
}

var _ sandbox.Process = (*process)(nil)

func (p *process) ID() string { return p.id }

// Wait returns the exec's result once it has ended.
func (p *process) Wait(ctx context.Context) (sandbox.Result, error) {
	select {
	case <-p.done:
		return p.result, p.err
	case <-ctx.Done():
		return sandbox.Result{}, ctx.Err()
	}
}

// Signal sends sig to the exec; SIGKILL kills its whole tree.
func (p *process) Signal(ctx context.Context, sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if sig == syscall.SIGKILL {
		p.killedBy.CompareAndSwap(nil, sandbox.ReasonKilled)
	}
	return p.in.client.Signal(ctx, p.id, int(sig))
}

// run reads the exec's events to the end, holding the agent to the
// timeout and the output limit, and settles the result.
func (p *process) run() {
	defer close(p.done)
	defer p.cancel()
	in := p.in
	l := in.spec.Limits
	if p.timeout > 0 {
		// A backstop: the agent enforces the timeout; if it does not, the
		// host asks again.
		t := time.AfterFunc(p.timeout+2*time.Second, func() { p.hostKill(sandbox.ReasonTimeout) })
		defer t.Stop()
	}
	var outN, errN int64
	for {
		ev, err := p.ex.Next()
		if err != nil {
			p.lost(err)
			return
		}
		switch {
		case ev.Exit != nil:
			outCut, errCut := p.result.StdoutTruncated, p.result.StderrTruncated
			p.result = *ev.Exit
			p.result.StdoutTruncated = p.result.StdoutTruncated || outCut
			p.result.StderrTruncated = p.result.StderrTruncated || errCut
			p.finish()
			return
		case len(ev.Stdout) > 0:
			p.write(p.req.Stdout, ev.Stdout, &outN, l.OutputBytes, &p.result.StdoutTruncated)
		case len(ev.Stderr) > 0:
			p.write(p.req.Stderr, ev.Stderr, &errN, l.OutputBytes, &p.result.StderrTruncated)
		}
	}
}

// lost settles an exec whose stream broke: when the sandbox died, the
// result says why (an OOM that killed gVisor's kernel, say) instead of
// being lost; otherwise airlock lost the command.
func (p *process) lost(err error) {
	in := p.in
	r := &p.result
	r.ExitCode, r.LimitsHit = -1, []sandbox.Limit{}
	r.Usage.WallMS = time.Since(p.started).Milliseconds()
	if in.waitDone(3 * time.Second) {
		in.mu.Lock()
		dt, closed := in.ended, in.closed
		in.mu.Unlock()
		switch {
		case dt != nil && dt.reason == sandbox.ReasonOOM:
			r.Signal, r.Reason, r.LimitsHit = "SIGKILL", sandbox.ReasonOOM, []sandbox.Limit{sandbox.LimitMemory}
			r.Message = fmt.Sprintf("memory limit of %s exceeded; in gVisor this ended the whole sandbox, and every process in it — use less memory (e.g. process the data in chunks) or raise --memory, and start a new sandbox", sandbox.FormatBytes(in.spec.Limits.MemoryBytes))
		case dt != nil && dt.reason == sandbox.ReasonPids:
			r.Signal, r.Reason, r.LimitsHit = "SIGKILL", sandbox.ReasonPids, []sandbox.Limit{sandbox.LimitPids}
			r.Message = "the sandbox ended: " + dt.msg + " — start fewer processes, or raise --pids"
		case dt != nil:
			r.Signal, r.Reason = "SIGKILL", sandbox.ReasonError
			r.Message = "the sandbox ended while the command ran: " + dt.msg
		case closed:
			r.Signal, r.Reason = "SIGKILL", sandbox.ReasonKilled
			r.Message = "the sandbox was closed while the command ran"
		default:
			r.Signal, r.Reason = "SIGKILL", sandbox.ReasonKilled
			r.Message = "the sandbox ended while the command ran"
		}
	} else {
		p.err = fmt.Errorf("exec %s: %w", p.id, err)
		r.Reason = sandbox.ReasonError
		r.Message = "airlock lost the command: " + err.Error()
	}
	p.forget()
}

// write passes output on, and holds the agent to the output limit.
func (p *process) write(w io.Writer, data []byte, n *int64, limit int64, truncated *bool) {
	if left := limit - *n; int64(len(data)) > left {
		data = data[:max(left, 0)]
		if !*truncated {
			*truncated = true
			go p.hostKill(sandbox.ReasonOutputLimit)
		}
	}
	*n += int64(len(data))
	if w != nil && len(data) > 0 {
		_, _ = w.Write(data)
	}
}

// hostKill asks the agent to kill the exec's whole tree.
func (p *process) hostKill(reason sandbox.Reason) {
	p.killedBy.CompareAndSwap(nil, reason)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.in.client.Signal(ctx, p.id, int(syscall.SIGKILL))
}

// finish adds what the host's cgroup saw during the exec (an OOM kill,
// the host's process limit) to what the agent said, and writes the
// message.
func (p *process) finish() {
	r := &p.result
	in := p.in
	if r.Usage.WallMS == 0 {
		r.Usage.WallMS = time.Since(p.started).Milliseconds()
	}
	oom, pids := r.Hit(sandbox.LimitMemory), r.Hit(sandbox.LimitPids)
	if in.group != nil {
		if st, err := in.group.Stats(); err == nil {
			// The memory limit is the whole sandbox's: when the host's OOM
			// killer ended a process (gVisor then kills the process inside
			// whose memory that was), it is this exec's doing as far as
			// anybody can tell.
			oom = oom || st.OOMKills > p.before.OOMKills
			pids = pids || st.PidsMax > p.before.PidsMax
		}
	}
	killedBy, _ := p.killedBy.Load().(sandbox.Reason)
	switch r.Reason {
	case sandbox.ReasonTimeout, sandbox.ReasonCPUTime, sandbox.ReasonOutputLimit, sandbox.ReasonKilled:
		if killedBy == "" || killedBy == sandbox.ReasonError {
			killedBy = r.Reason
		}
	}
	if r.Reason != sandbox.ReasonError {
		r.Reason = ""
		r.Classify(killedBy, sandbox.Evidence{OOM: oom, Pids: pids})
	}
	if r.Message == "" {
		r.Message = sandbox.Message(r, in.spec.Limits, p.timeout, p.cpuTime)
	}
	p.forget()
}

func (p *process) forget() {
	p.in.mu.Lock()
	delete(p.in.procs, p.id)
	p.in.mu.Unlock()
}

// files is the sandbox's file API, served by its agent.
type files struct{ in *instance }

// call runs a file call, and turns the error of a dead sandbox into why it
// ended.
func (f files) call(err error) error {
	if err != nil && f.in.isDone() {
		return f.in.endedError()
	}
	return err
}

func (f files) ReadFile(ctx context.Context, path string, offset, limit int64, w io.Writer) error {
	if f.in.isDone() {
		return f.in.endedError()
	}
	return f.call(f.in.client.ReadFile(ctx, path, offset, limit, w))
}

func (f files) WriteFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error {
	if f.in.isDone() {
		return f.in.endedError()
	}
	return f.call(f.in.client.WriteFile(ctx, path, r, mode))
}

func (f files) ReadDir(ctx context.Context, path string) ([]sandbox.FileInfo, error) {
	if f.in.isDone() {
		return nil, f.in.endedError()
	}
	fi, err := f.in.client.ReadDir(ctx, path)
	return fi, f.call(err)
}

func (f files) Stat(ctx context.Context, path string) (sandbox.FileInfo, error) {
	if f.in.isDone() {
		return sandbox.FileInfo{}, f.in.endedError()
	}
	fi, err := f.in.client.Stat(ctx, path)
	return fi, f.call(err)
}

func (f files) Mkdir(ctx context.Context, path string, mode fs.FileMode) error {
	if f.in.isDone() {
		return f.in.endedError()
	}
	return f.call(f.in.client.Mkdir(ctx, path, mode))
}

func (f files) Remove(ctx context.Context, path string) error {
	if f.in.isDone() {
		return f.in.endedError()
	}
	return f.call(f.in.client.Remove(ctx, path))
}

func (f files) Rename(ctx context.Context, oldpath, newpath string) error {
	if f.in.isDone() {
		return f.in.endedError()
	}
	return f.call(f.in.client.Rename(ctx, oldpath, newpath))
}
