package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/cow"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/procid"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// host is one gVisor sandbox seen from the host: a `runsc run` process
// whose container's only process is the agent, talking over the
// container's stdin and stdout; its bundle, cgroup and lock.
type host struct {
	d      *Driver
	spec   sandbox.Spec
	lock   *hostlock.Lock
	bundle string
	group  *cgroup.Group // the host cgroup; nil without cgroups
	cmd    *exec.Cmd
	conn   net.Conn
	log    agentdriver.LogBuffer // runsc's and the agent's standard error
	agentdriver.Lifecycle
	// run attaches to a one-shot run's command beside the handshake;
	// nil: none.
	run *agent.Attaching

	closeOnce    sync.Once
	teardownErr  error
	teardownOnce sync.Once

	// persistent: the sandbox outlives this process (Options.Persistent):
	// the agent listens in the session directory, and runsc's output goes
	// to the log file.
	persistent       bool
	created          time.Time // when the sandbox was made
	session, logPath string
	// runscPid and runscStart name `runsc run`, the sandbox's holder.
	runscPid   int
	runscStart uint64
	// watch tells a sandbox this process reattached to (runsc is not its
	// child) that runsc has exited, and kills it.
	watch *procid.PidWatch
}

var (
	_ agentdriver.Host         = (*host)(nil)
	_ agentdriver.HostDetacher = (*host)(nil)
	_ agentdriver.HostState    = (*host)(nil)
	_ sandbox.UsageReader      = (*host)(nil)
	_ sandbox.CowMounter       = (*host)(nil)
)

// CowLayers lists the sandbox's copy-on-write mounts.
func (h *host) CowLayers() []sandbox.CowLayer {
	return sandbox.CowLayers(h.d.rc.StateDir, h.spec)
}

// Exec: the host sees the sandbox's cgroup only, which holds gVisor's
// kernel too; kills go through the agent.
func (h *host) Exec(string) agentdriver.ExecHost { return agentdriver.SandboxCgroupDelta(h.group) }

// Usage reads the sandbox's host cgroup, which holds gVisor's kernel and
// its gofer too.
func (h *host) Usage(context.Context) (sandbox.SandboxUsage, error) {
	return agentdriver.CgroupUsage(h.group, h.spec.Limits)
}

// makeCgroup makes the sandbox's host cgroup with the host limits. runsc
// joins a cgroup that exists and leaves it alone, so its counters (the OOM
// kills above all) outlive runsc, until teardown removes it.
func (h *host) makeCgroup(hl hostLimits) error {
	g := h.d.hier.Open(h.d.rc.CgroupParent + "/" + h.spec.ID)
	if g.Exists() {
		// A stale group of a sandbox of the same name: its limits are not
		// ours to trust.
		_ = g.Kill(5*time.Second, os.Getpid())
		if err := g.Remove(); err != nil {
			return fmt.Errorf("remove the stale cgroup of %s: %w", h.spec.ID, err)
		}
	}
	h.group = g
	if err := g.Create(); err != nil {
		return err
	}
	// The CPU quota comes once the sandbox is up (limitCPU): gVisor's own
	// start is not the workload's, and throttled to half a core it takes
	// twice as long.
	return g.Set(cgroup.Limits{MemoryBytes: hl.MemoryBytes, Pids: int(hl.Pids)})
}

// limitCPU sets the sandbox's CPU quota on its host cgroup.
func (h *host) limitCPU(hl hostLimits) error {
	if h.group == nil {
		return nil
	}
	return h.group.Set(cgroup.Limits{CPUs: hl.CPUs})
}

// start runs `runsc run` on the bundle, sends the agent cfg and performs
// the handshake.
func (h *host) start(ctx context.Context, cfg *agent.Config) (*agent.Client, []sandbox.Layer, error) {
	if h.persistent {
		return h.startPersistent(ctx, cfg)
	}
	d := h.d
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("make the agent connection: %w", err)
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, nil, fmt.Errorf("make the agent connection: %w", err)
	}
	h.conn = agent.PipeConn(stdoutR, stdinW)
	args := append(d.runscArgs(), "run", "--bundle", h.bundle, h.spec.ID)
	cmd := &exec.Cmd{
		Path:   d.runsc.Path,
		Args:   append([]string{"runsc"}, args...),
		Env:    []string{}, // nothing of airlock's environment reaches runsc or its logs
		Dir:    "/",
		Stdin:  stdinR,
		Stdout: stdoutW,
		Stderr: &h.log,
		// runsc passes its own stdio to the container. The Sentry and the
		// gofer die with `runsc run` (it starts them attached).
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
		WaitDelay:   2 * time.Second,
	}
	err = h.startInGroup(cmd)
	stdinR.Close()
	stdoutW.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("start runsc: %w", err)
	}
	h.cmd = cmd
	go h.wait()
	if err := agent.WriteConfig(stdinW, cfg); err != nil {
		return nil, nil, h.startError(err)
	}
	client, layers, err := agentdriver.HandshakeAttached(ctx, h.conn, 30*time.Second, h.run)
	if err != nil {
		return nil, nil, h.startError(err)
	}
	return client, layers, nil
}

// startPersistent runs `runsc run` for a sandbox that outlives this
// process: runsc's standard input carries the agent's config and ends,
// its output goes to the bundle's log (a pipe to this process would break
// with it), it keeps a copy of the sandbox's lock for its life, and the
// agent serves the host on its session socket.
func (h *host) startPersistent(ctx context.Context, cfg *agent.Config) (*agent.Client, []sandbox.Layer, error) {
	d := h.d
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("make the agent's config pipe: %w", err)
	}
	defer stdinW.Close()
	logf, err := os.OpenFile(h.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_CLOEXEC, 0o600)
	if err != nil {
		stdinR.Close()
		return nil, nil, fmt.Errorf("make the sandbox's log: %w", err)
	}
	args := append(d.runscArgs(), "run", "--bundle", h.bundle, h.spec.ID)
	cmd := &exec.Cmd{
		Path:   d.runsc.Path,
		Args:   append([]string{"runsc"}, args...),
		Env:    []string{},
		Dir:    "/",
		Stdin:  stdinR,
		Stdout: logf,
		Stderr: logf,
		// The kernel drops the lock only when every descriptor of it is
		// closed: runsc's copy keeps the sandbox's id taken while it runs.
		ExtraFiles:  []*os.File{h.lock.File()},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	err = h.startInGroup(cmd)
	stdinR.Close()
	logf.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("start runsc: %w", err)
	}
	h.cmd, h.runscPid = cmd, cmd.Process.Pid
	go h.wait()
	if err := agent.WriteConfig(stdinW, cfg); err != nil {
		return nil, nil, h.startError(err)
	}
	stdinW.Close()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := agentdriver.DialSession(dctx, h.sockPath(), h.Done())
	if err != nil {
		return nil, nil, h.startError(err)
	}
	h.conn = c
	peer, err := procid.PeerOf(c)
	if err == nil {
		peer.Pidfd.Close()
		err = h.checkPeer(peer)
	}
	if err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(dctx, func() { h.conn.Close() })
	client, layers, err := agent.Dial(dctx, h.conn)
	stop()
	if err != nil {
		if dctx.Err() != nil {
			err = fmt.Errorf("%w (the agent did not answer within 30 s)", err)
		}
		return nil, nil, h.startError(err)
	}
	return client, layers, nil
}

// sockPath is the agent's session socket on the host.
func (h *host) sockPath() string { return filepath.Join(h.session, sessionSock) }

// checkPeer refuses a session socket whose listener is not this
// sandbox's: gVisor's gofer makes the socket on the host, and it runs in
// the sandbox's host cgroup (or, without cgroups, is runsc's child).
func (h *host) checkPeer(peer procid.Peer) error {
	if h.group != nil {
		if !procid.InCgroup(peer.Pid, h.d.rc.CgroupParent+"/"+h.spec.ID) {
			return fmt.Errorf("sandbox %s: refused its session socket: the process listening (pid %d) is not in the sandbox's cgroup", h.spec.ID, peer.Pid)
		}
		return nil
	}
	if ppid, err := parentOf(peer.Pid); err != nil || ppid != h.runscPid {
		return fmt.Errorf("sandbox %s: refused its session socket: the process listening (pid %d) is not runsc's", h.spec.ID, peer.Pid)
	}
	return nil
}

// parentOf is the parent of process pid.
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	f := bytes.Fields(b[i+1:])
	if i < 0 || len(f) < 2 {
		return 0, errors.New("unreadable /proc stat")
	}
	var ppid int
	_, err = fmt.Sscan(string(f[1]), &ppid)
	return ppid, err
}

// state is what a later process needs to reattach to a gVisor sandbox.
type state struct {
	Spec sandbox.Spec `json:"spec"`
	// Created is when the sandbox was made.
	Created time.Time `json:"created,omitzero"`
	// RunscPid and RunscStart name `runsc run`.
	RunscPid   int    `json:"runsc_pid"`
	RunscStart uint64 `json:"runsc_start"`
}

// DriverState is what a later process needs to reattach (Driver.Recover).
func (h *host) DriverState() ([]byte, error) {
	if !h.persistent {
		return nil, nil
	}
	if h.runscStart == 0 {
		h.runscStart, _ = procid.StartTime(h.runscPid)
	}
	return json.Marshal(state{Spec: h.spec, RunscPid: h.runscPid, RunscStart: h.runscStart, Created: h.created})
}

// Detach lets go of the sandbox: this process's copy of its lock closes
// (runsc holds it still) and the host stops watching runsc.
func (h *host) Detach() {
	h.Closing.Store(true)
	if h.watch != nil {
		h.watch.Stop()
	}
	h.lock.Drop()
}

// startInGroup starts cmd (runsc) inside the sandbox's host cgroup, so
// that runsc, its gofer, the Sentry and every stub process they fork are
// in it from their first instruction. runsc itself is told to leave
// cgroups alone (--ignore-cgroups): joining the host's cgroup v1
// hierarchies one by one, moving processes between them, costs it about
// 50 ms a start.
func (h *host) startInGroup(cmd *exec.Cmd) error {
	if h.group == nil {
		return cmd.Start()
	}
	return h.group.Start(cmd)
}

// startError explains why a sandbox did not start: runsc's own words, and
// whether it ran into the host's process limit.
func (h *host) startError(err error) error {
	// Give runsc a moment to fail all the way (its last words reach the
	// log once it has exited) and count what it hit.
	select {
	case <-h.Done():
	case <-time.After(time.Second):
	}
	if h.group != nil {
		if st, serr := h.group.Stats(); serr == nil && st.PidsMax > 0 {
			return fmt.Errorf("start the sandbox: gVisor's own processes and threads ran into the host's process limit of %d (pids): %w: %w%s",
				hostLimitsFor(h.spec.Limits, false).Pids, sandbox.ErrLimit, err, h.stderr())
		}
	}
	return fmt.Errorf("start the sandbox: %w%s", err, h.stderr())
}

// wait waits for `runsc run` to exit: the sandbox has ended. If nobody
// closed it, it died; the host's counters say why.
func (h *host) wait() { h.exited(h.cmd.Wait()) }

// exited records that runsc has exited, with err.
func (h *host) exited(err error) {
	if !h.Closing.Load() {
		dt := h.deathCause(err)
		h.SetEnded(dt)
		h.d.rc.Logger.Warn("gVisor sandbox ended by itself", "sandbox_id", h.spec.ID, "reason", dt.Reason, "err", dt.Msg)
	}
	h.CloseDone()
}

// deathCause reads why the sandbox died from the host's counters.
func (h *host) deathCause(waitErr error) *agentdriver.Death {
	if dt := agentdriver.CgroupDeath(h.group, h.spec.Limits, "gVisor's kernel", hostLimitsFor(h.spec.Limits, false).Pids); dt != nil {
		return dt
	}
	msg := "gVisor exited"
	if waitErr != nil {
		msg += ": " + waitErr.Error()
	}
	return &agentdriver.Death{Reason: sandbox.ReasonError, Msg: msg + h.stderr()}
}

// stderr returns what runsc and the agent wrote to standard error, for an
// error message.
func (h *host) stderr() string {
	b := h.log.Bytes()
	if h.persistent {
		b = agentdriver.Tail(h.logPath, 4<<10)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return ""
	}
	return ": " + string(b)
}

// waitDone waits up to d for the sandbox to end, and says whether it did:
// a broken connection is either a dead sandbox or a broken agent.
func (h *host) waitDone(d time.Duration) bool {
	select {
	case <-h.Done():
		return true
	case <-time.After(d):
		return false
	}
}

// Teardown ends the sandbox and removes everything it made on the host.
func (h *host) Teardown(context.Context) error {
	h.closeOnce.Do(func() {
		h.teardown()
		if left := h.leftovers(); len(left) > 0 {
			h.teardownErr = fmt.Errorf("sandbox %s: left on the host after close: %v", h.spec.ID, left)
		}
	})
	return h.teardownErr
}

// teardown stops the sandbox and removes what it made, whatever state it
// is in: a live one, a half-made one, a dead one, a stale one of an
// airlock process that died. In order: runsc is killed (a persistent
// sandbox's), or killed with everything in the host cgroup (a one-shot's
// with cgroups: its caller has the exec's outcome and wants nothing more
// of it), or the agent is told to go (it exits when its connection ends,
// and runsc with it, removing its own state) and runsc is killed if it
// lingers (the Sentry and the gofer die with it); whatever is left in the
// host cgroup is killed; runsc's state, the cgroups, the bundle and the
// lock are removed.
func (h *host) teardown() {
	h.teardownOnce.Do(func() {
		h.Closing.Store(true)
		log := h.d.rc.Logger.With("sandbox_id", h.spec.ID)
		var killErr error
		killed := false // the sandbox's processes were killed at once
		if h.conn != nil {
			h.conn.Close()
		}
		if h.persistent {
			// The agent outlives its sessions: runsc is killed at once.
			switch {
			case h.cmd != nil:
				_ = h.cmd.Process.Kill()
			case h.watch != nil:
				_ = h.watch.Kill()
			}
			if (h.cmd != nil || h.watch != nil) && !h.waitDone(10*time.Second) {
				log.Error("runsc did not exit after SIGKILL")
			}
		} else if h.cmd != nil && h.group != nil {
			// Nothing of a one-shot sandbox is wanted any more: runsc, the
			// Sentry and the gofer are killed at once with whatever else
			// is in the host cgroup, rather than waited for while the agent
			// sees its connection close and gVisor winds down.
			_ = h.cmd.Process.Kill()
			killErr = h.group.Kill(5*time.Second, os.Getpid())
			killed = true
			if !h.waitDone(10 * time.Second) {
				log.Error("runsc did not exit after SIGKILL")
			}
		} else if h.cmd != nil && !h.waitDone(5*time.Second) {
			log.Warn("runsc did not exit after its agent was told to: killing it")
			_ = h.cmd.Process.Kill()
			if h.group != nil {
				// A frozen sandbox dies only once thawed, which the
				// group's kill does.
				_ = h.group.Kill(5*time.Second, os.Getpid())
			}
			if !h.waitDone(10 * time.Second) {
				log.Error("runsc did not exit after SIGKILL")
			}
		}
		if h.group != nil && !killed {
			// This process is never the sandbox's, even should a thread of
			// it have been left in the group (see startInGroup).
			killErr = h.group.Kill(5*time.Second, os.Getpid())
		}
		if killErr != nil {
			log.Warn("kill what is left in the sandbox's cgroup", "err", killErr)
		}
		if h.d.runsc != nil && len(h.stateFiles()) > 0 {
			// A one-shot's runsc was killed before it removed its state:
			// with no process of the sandbox left (its cgroup is empty),
			// its files are all `runsc delete` would remove, and starting
			// runsc costs a 100 MB program's start.
			if !killed || killErr != nil {
				if _, err := h.d.runscCmd(10*time.Second, "delete", "--force", h.spec.ID); err != nil {
					log.Warn("delete the sandbox's runsc state", "err", err)
				}
			}
			for _, f := range h.stateFiles() {
				_ = os.Remove(f)
			}
		}
		if h.group != nil {
			if err := h.group.Remove(); err != nil {
				log.Warn("remove the sandbox's cgroup", "err", err)
			}
		}
		// runsc makes the controllers airlock does not use (cpuset,
		// devices…) itself and removes them when it exits cleanly.
		for _, dir := range cgroupDirs(h.d.rc.CgroupParent, h.spec.ID) {
			if err := removeCgroupTree(dir); err != nil {
				log.Warn("remove a cgroup runsc left", "dir", dir, "err", err)
			}
		}
		if h.bundle != "" {
			h.removeBundle(log)
		}
		// The layers go with the sandbox (after runsc's gofer let go of
		// their overlays): its pending changes with them.
		for _, l := range sandbox.CowLayers(h.d.rc.StateDir, h.spec) {
			if err := cow.Remove(l.Dir); err != nil {
				log.Warn("remove a cow layer", "dir", l.Dir, "err", err)
			}
		}
		if h.watch != nil {
			h.watch.Stop()
		}
		if h.lock == nil && h.persistent {
			// runsc held it: take it to remove it.
			var err error
			if h.lock, err = hostlock.WaitSandbox(h.d.rc.StateDir, h.spec.ID, 2*time.Second); err != nil {
				log.Warn("the sandbox's lock is still held after runsc was killed", "err", err)
			}
		}
		h.lock.Release()
		if h.cmd == nil {
			h.CloseDone()
		}
	})
}

// removeBundle removes the bundle, after detaching the mounts pinned in
// it; while anything is still mounted below it, it is left alone, so that
// removing it can never reach into a host directory the sandbox mounted.
func (h *host) removeBundle(log *slog.Logger) {
	if err := unpin(h.bundle); err != nil {
		log.Warn("detach the bundle's mounts", "err", err)
	}
	if left := mountsBelow(h.bundle); len(left) > 0 {
		log.Error("not removing the sandbox's bundle: something is still mounted in it", "mounts", left)
		return
	}
	if err := os.RemoveAll(h.bundle); err != nil {
		log.Warn("remove the sandbox's bundle", "err", err)
	}
}

// stateFiles lists runsc's state files of the sandbox.
func (h *host) stateFiles() []string {
	dir := h.d.stateDir()
	var out []string
	for _, pat := range []string{h.spec.ID + "_sandbox:*", "runsc-" + h.spec.ID + ".sock"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		out = append(out, m...)
	}
	return out
}

// leftovers lists what of the sandbox is still on the host.
func (h *host) leftovers() []string {
	var left []string
	left = append(left, h.stateFiles()...)
	left = append(left, cgroupDirs(h.d.rc.CgroupParent, h.spec.ID)...)
	if h.bundle != "" {
		left = append(left, mountsBelow(h.bundle)...)
		if _, err := os.Stat(h.bundle); err == nil {
			left = append(left, h.bundle)
		}
	}
	return left
}
