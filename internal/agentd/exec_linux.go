package agentd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/sandbox"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/confine"
)

// engine starts and tracks the sandbox's commands.
type engine struct {
	cfg      *agent.Config
	reaper   *reaper
	workload *cgroup.Group // nil when cgroups were left out
	filter   *confine.Filter
	landlock bool
	// workloadRoot, when set (> 0), is a descriptor of the directory
	// commands are chrooted into (see setupContained).
	workloadRoot int

	// execs holds every exec the host may still attach to.
	execs execBook

	mu       sync.Mutex
	procs    map[string]*proc
	next     *spawner // ready for the next command
	spawnSeq atomic.Int64
	// protected is set when the host gave the agent oom_score_adj -1000;
	// forkMu serializes the switch to 0 and back around each fork.
	protected bool
	forkMu    sync.Mutex
}

// proc is one running exec.
type proc struct {
	id         string
	pid        int
	group      *cgroup.Group
	cgroupName string
	status     <-chan unix.WaitStatus
	reason     atomic.Value // sandbox.Reason, set by whoever kills it first
	stopped    chan struct{}
	started    time.Time
}

func newEngine(cfg *agent.Config) (*engine, error) {
	e := &engine{cfg: cfg, reaper: newReaper(), procs: map[string]*proc{}}
	if !skipped(cfg, sandbox.LayerCgroups) && len(cfg.Cgroup.FDs) > 0 {
		h := &cgroup.Hierarchy{V2: cfg.Cgroup.V2, Mounts: map[string]string{}}
		for i, fd := range cfg.Cgroup.FDs {
			for _, c := range cfg.Cgroup.Controllers[i] {
				h.Mounts[c] = "/proc/self/fd/" + strconv.Itoa(fd)
			}
		}
		e.workload = h.Open("")
	}
	if !skipped(cfg, sandbox.LayerSeccomp) {
		workload := confine.Workload
		if cfg.Cgroup.V2 && e.workload != nil {
			workload = confine.WorkloadWithClone3 // see its doc: setup forbids new user namespaces
		}
		f, err := workload()
		if err != nil {
			return nil, fmt.Errorf("build the seccomp filter: %w", err)
		}
		e.filter = f
	}
	e.landlock = !skipped(cfg, sandbox.LayerLandlock) && confine.LandlockABI() > 0
	if b, err := os.ReadFile("/proc/self/oom_score_adj"); err == nil && strings.TrimSpace(string(b)) == "-1000" {
		e.protected = true
	}
	go e.prepare()
	return e, nil
}

func skipped(cfg *agent.Config, l sandbox.Layer) bool {
	for _, s := range cfg.Skip {
		if s == l {
			return true
		}
	}
	return false
}

// startError is a command that could not start; Code is 126 or 127.
type startError = sandbox.CommandError

// spawner is a goroutine locked to an OS thread that already sits in a
// fresh exec cgroup, waiting for the command it will fork. Moving a thread
// between cgroup v1 groups costs an RCU grace period when no move happened
// lately (milliseconds), so the engine keeps one spawner ready and pays
// that cost between commands instead of during one.
type spawner struct {
	group *cgroup.Group // nil without cgroups
	name  string
	jobs  chan spawnJob
	ready chan error // the move's outcome, then closed
}

type spawnJob struct {
	path, dir string
	argv, env []string
	stdin     *os.File
	stdout    *os.File
	stderr    *os.File
	// tty says stdin is a terminal, to become the controlling terminal
	// of the command's new session.
	tty   bool
	reply chan spawnResult
}

type spawnResult struct {
	pid    int
	status <-chan unix.WaitStatus
	err    error
}

// newSpawner starts a spawner; its thread moves into a new exec group.
func (e *engine) newSpawner() *spawner {
	n := e.spawnSeq.Add(1)
	sp := &spawner{name: "x" + strconv.FormatInt(n, 10), jobs: make(chan spawnJob), ready: make(chan error, 1)}
	if e.workload != nil {
		sp.group = e.workload.Child(sp.name)
	}
	go func() {
		// This thread takes on a command's confinement and dies with this
		// goroutine: it is never unlocked.
		runtime.LockOSThread()
		err := sp.enter(e.cfg.Cgroup.V2)
		sp.ready <- err
		close(sp.ready)
		if err != nil {
			return
		}
		job, ok := <-sp.jobs
		if !ok {
			return
		}
		pid, status, err := e.forkOnThisThread(sp, job)
		job.reply <- spawnResult{pid, status, err}
	}()
	return sp
}

// enter creates the spawner's group and moves the calling thread into it
// (v1). On v2 the child is cloned straight into the group instead.
func (sp *spawner) enter(v2 bool) error {
	if sp.group == nil {
		return nil
	}
	if err := sp.group.Create(); err != nil {
		return fmt.Errorf("create the exec's cgroup: %w", err)
	}
	if v2 {
		return nil
	}
	return enterThread(sp.group)
}

// takeSpawner returns the ready spawner, if any, else a new one.
func (e *engine) takeSpawner() *spawner {
	e.mu.Lock()
	sp := e.next
	e.next = nil
	e.mu.Unlock()
	if sp == nil {
		sp = e.newSpawner()
	}
	return sp
}

// prepare makes a spawner ready for the next command.
func (e *engine) prepare() {
	sp := e.newSpawner()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.next != nil {
		close(sp.jobs)
		return
	}
	e.next = sp
}

// start starts the command of s with the given standard streams.
func (e *engine) start(s *agent.ExecStart, stdin, stdout, stderr *os.File) (*proc, error) {
	dir := s.Dir
	if dir == "" {
		dir = sandbox.HomeOf(e.cfg.Home)
	}
	env := e.env(s.Env, s.PTY != nil, dir)
	path, err := lookPath(s.Argv[0], env)
	if err != nil {
		return nil, err
	}
	sp := e.takeSpawner()
	err = <-sp.ready
	if err != nil {
		close(sp.jobs)
		if sp.group != nil {
			_ = sp.group.Remove()
		}
		return nil, err
	}
	p := &proc{id: s.ID, group: sp.group, cgroupName: sp.name, stopped: make(chan struct{})}
	e.mu.Lock()
	if _, dup := e.procs[s.ID]; dup {
		e.mu.Unlock()
		close(sp.jobs)
		return nil, fmt.Errorf("exec %s: %w", s.ID, sandbox.ErrExists)
	}
	e.procs[s.ID] = p
	e.mu.Unlock()

	// The agent keeps oom_score_adj -1000; its commands must not inherit it.
	// The switch is process-wide, so forks are serialized around it.
	e.forkMu.Lock()
	if e.protected {
		_ = os.WriteFile("/proc/self/oom_score_adj", []byte("0"), 0)
	}
	reply := make(chan spawnResult, 1)
	sp.jobs <- spawnJob{path: path, dir: dir, argv: s.Argv, env: env, stdin: stdin, stdout: stdout, stderr: stderr, tty: s.PTY != nil, reply: reply}
	r := <-reply
	if e.protected {
		_ = os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0)
	}
	e.forkMu.Unlock()
	if r.err != nil {
		e.remove(p)
		return nil, r.err
	}
	p.pid, p.status, p.started = r.pid, r.status, time.Now()
	return p, nil
}

// forkOnThisThread confines the calling (locked) thread and forks the
// command from it; the child inherits the confinement.
func (e *engine) forkOnThisThread(sp *spawner, job spawnJob) (int, <-chan unix.WaitStatus, error) {
	sys := &syscall.SysProcAttr{
		Setsid:     true,
		Credential: &syscall.Credential{Uid: uint32(e.cfg.UID), Gid: uint32(e.cfg.GID), Groups: []uint32{}},
		// The terminal (the child's fd 0) becomes the new session's
		// controlling terminal: Ctrl-C typed into it reaches the
		// foreground process group.
		Setctty: job.tty,
		Ctty:    0,
	}
	if sp.group != nil {
		if e.cfg.Cgroup.V2 {
			fd, err := unix.Open(sp.group.Path("memory"), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return 0, nil, fmt.Errorf("open the exec's cgroup: %w", err)
			}
			defer unix.Close(fd)
			sys.UseCgroupFD, sys.CgroupFD = true, fd
		} else if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			// The command sees its own exec group as its cgroup root.
			return 0, nil, fmt.Errorf("enter the exec's cgroup namespace: %w", err)
		}
	}
	if e.workloadRoot > 0 {
		if err := chrootThread(e.workloadRoot); err != nil {
			return 0, nil, err
		}
	}
	if err := confine.SetNoNewPrivs(); err != nil {
		return 0, nil, err
	}
	if err := confine.DropBoundingSet(); err != nil {
		return 0, nil, err
	}
	if e.landlock {
		// The sandbox's own terminals (/dev/pts is its devpts instance;
		// /dev/tty is the caller's controlling terminal): a program may
		// reopen its terminal and set its modes (IOCTL_DEV).
		rw := []string{sandbox.Workspace, "/tmp", "/dev/shm", "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/pts", "/dev/tty"}
		for _, m := range e.cfg.Mounts {
			if m.Writable {
				rw = append(rw, m.Target)
			}
		}
		if _, err := (confine.Landlock{ReadExec: []string{"/"}, ReadWrite: rw}).RestrictThread(); err != nil {
			return 0, nil, fmt.Errorf("apply landlock: %w", err)
		}
	}
	if e.filter != nil {
		if err := e.filter.InstallThread(); err != nil {
			return 0, nil, fmt.Errorf("apply seccomp: %w", err)
		}
	}
	attr := &syscall.ProcAttr{
		Dir:   job.dir,
		Env:   job.env,
		Files: []uintptr{job.stdin.Fd(), job.stdout.Fd(), job.stderr.Fd()},
		Sys:   sys,
	}
	pid, status, err := e.reaper.spawn(func() (int, error) { return syscall.ForkExec(job.path, job.argv, attr) })
	if err != nil {
		return 0, nil, execError(job.argv[0], job.dir, err)
	}
	// Back to the agent's own group: a thread of the agent must never be
	// in a group that gets frozen for a kill (a frozen thread stops the
	// whole Go runtime at its next stop-the-world). The descriptors were
	// opened before Landlock, which checks only at open.
	if sp.group != nil && !e.cfg.Cgroup.V2 {
		if err := writeZero(e.cfg.AgentTasks, false); err != nil {
			_ = unix.Kill(pid, unix.SIGKILL)
			return 0, nil, fmt.Errorf("leave the exec's cgroup: %w", err)
		}
	}
	return pid, status, nil
}

// chrootThread gives the calling thread a file-system context of its own
// (root, working directory) and makes the directory fd its root. The
// command forked from it inherits that root; see setupContained for why.
func chrootThread(fd int) error {
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare the file-system context: %w", err)
	}
	if err := unix.Fchdir(fd); err != nil {
		return fmt.Errorf("enter the commands' root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot into the commands' root: %w", err)
	}
	return nil
}

// enterThread moves the calling thread (not the process) into group on
// every v1 hierarchy, so that the child it forks starts there. It writes
// "0" (the writing thread) to tasks: moving only oneself spares the kernel
// the global lock, and the RCU grace period, that moving a process takes.
func enterThread(g *cgroup.Group) error {
	for _, c := range cgroup.V1Controllers {
		f := filepath.Join(g.Path(c), "tasks")
		if err := os.WriteFile(f, []byte("0"), 0); err != nil {
			return fmt.Errorf("enter the exec's cgroup (%s): %w", c, err)
		}
	}
	return nil
}

func execError(name, dir string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		if _, serr := os.Stat(dir); serr != nil {
			return &startError{Code: 126, Msg: fmt.Sprintf("working directory %s does not exist in the sandbox", dir)}
		}
		return &startError{Code: 127, Msg: fmt.Sprintf("%s: not found in the sandbox", name)}
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.ENOEXEC), errors.Is(err, unix.EISDIR), errors.Is(err, unix.EPERM):
		return &startError{Code: 126, Msg: fmt.Sprintf("%s: cannot be executed in the sandbox: %v", name, err)}
	case errors.Is(err, unix.EAGAIN):
		return &startError{Code: 126, Msg: fmt.Sprintf("%s: cannot start: the sandbox's process limit is reached", name)}
	}
	return fmt.Errorf("start %s: %w", name, err)
}

// lookPath finds name on the PATH of env, as execvp does.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	pathVar := sandbox.DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	denied := false
	for _, dir := range filepath.SplitList(pathVar) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() {
			continue
		}
		if fi.Mode()&0o111 == 0 {
			denied = true
			continue
		}
		return p, nil
	}
	if denied {
		return "", &startError{Code: 126, Msg: fmt.Sprintf("%s: found on PATH but not executable", name)}
	}
	return "", &startError{Code: 127, Msg: fmt.Sprintf("%s: command not found in the sandbox (PATH=%s)", name, pathVar)}
}

// env returns a command's environment: the defaults, the sandbox's, then
// the request's, later entries replacing earlier ones with the same key. A
// command on a terminal gets TERM too.
func (e *engine) env(req []string, tty bool, dir string) []string {
	all := []string{"PATH=" + sandbox.DefaultPath, "HOME=" + sandbox.HomeOf(e.cfg.Home), "LANG=C.UTF-8", "USER=" + sandbox.UserOf(e.cfg.Home), "HOSTNAME=" + e.cfg.Hostname}
	if e.cfg.Home != "" {
		// As E2B's envd sets it: a shell sets its own, other programs
		// read it.
		all = append(all, "PWD="+dir)
	}
	if tty {
		all = append(all, "TERM="+defaultTerm)
	}
	all = append(all, e.cfg.Env...)
	all = append(all, req...)
	seen := map[string]int{}
	var out []string
	for _, kv := range all {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := seen[k]; ok {
			out[i] = kv
			continue
		}
		seen[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// defaultTerm is a terminal command's TERM unless the sandbox or the
// request sets one: what most terminal emulators are, and what a Debian
// root's terminfo knows.
const defaultTerm = "xterm-256color"

// kill ends every process of p, with reason unless one was already given.
func (e *engine) kill(p *proc, reason sandbox.Reason) {
	p.reason.CompareAndSwap(nil, reason)
	if p.group != nil {
		_ = p.group.Kill(5 * time.Second)
		return
	}
	// Without cgroups: the session and the process group; double-forked
	// survivors end only when the sandbox does.
	_ = unix.Kill(-p.pid, unix.SIGKILL)
	_ = unix.Kill(p.pid, unix.SIGKILL)
}

func (e *engine) signal(id string, sig unix.Signal) error {
	e.mu.Lock()
	p := e.procs[id]
	e.mu.Unlock()
	if p == nil {
		return fmt.Errorf("exec %s: %w", id, sandbox.ErrNotFound)
	}
	if sig == unix.SIGKILL {
		e.kill(p, sandbox.ReasonKilled)
		return nil
	}
	return unix.Kill(p.pid, sig)
}

func (e *engine) remove(p *proc) {
	e.mu.Lock()
	delete(e.procs, p.id)
	e.mu.Unlock()
	if p.group != nil && !e.cfg.KeepExecCgroups {
		_ = p.group.Remove()
	}
}
