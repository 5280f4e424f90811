package agentd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
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
	cfg *agent.Config
	// noSpares says no spawner is prepared ahead: a one-shot run's
	// sandbox, whose one command takes its own.
	noSpares bool
	reaper   *reaper
	workload *cgroup.Group // nil when cgroups were left out
	filter   *confine.Filter
	landlock bool
	// ruleset is the commands' Landlock ruleset, built by the first
	// spawner (inside the commands' root) and used by every later one;
	// rulesetMu guards it.
	rulesetMu sync.RWMutex
	ruleset   *confine.LandlockRuleset
	// workloadRoot, when set (> 0), is a descriptor of the directory
	// commands are chrooted into (see setupContained).
	workloadRoot int

	// execs holds every exec the host may still attach to.
	execs execBook

	mu    sync.Mutex
	procs map[string]*proc
	// spare are the spawners ready for the next commands; preparing
	// counts those being made.
	spare     []*spawner
	preparing int
	spawnSeq  atomic.Int64
	// spawning holds a token for each spawner whose thread is alive
	// (maxSpawners at most); nil means no bound.
	spawning chan struct{}
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
	// left is closed once the spawner's thread has left the exec's
	// group (v1): a kill freezes the group, and must not freeze a thread
	// of the agent, nor find the agent among the group's processes.
	left <-chan struct{}
}

func newEngine(cfg *agent.Config) (*engine, error) {
	e := &engine{cfg: cfg, reaper: newReaper(), procs: map[string]*proc{}, spawning: make(chan struct{}, maxSpawners)}
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
// fresh exec cgroup and already carries the command's confinement (the
// commands' root, no_new_privs, an empty bounding set, its own Landlock
// domain, the seccomp filter), waiting for the command it will fork. All
// of that is done ahead, off the exec's path: an exec hands the ready
// spawner its job, and what remains is fork, exec and (v1) the thread's
// move back to the agent's group. Each spawner forks once and its thread
// dies with it, so every exec keeps a Landlock domain of its own (sibling
// domains: one exec cannot read another's /proc/PID/mem or environ), as
// when the confinement was applied at the exec. Moving a thread between
// cgroup v1 groups also costs an RCU grace period when no move happened
// lately (milliseconds), another reason to do it ahead.
type spawner struct {
	group *cgroup.Group // nil without cgroups
	name  string
	// cgroupFD (v2) is the group's directory, opened before Landlock, for
	// CLONE_INTO_CGROUP; -1 otherwise.
	cgroupFD int
	jobs     chan spawnJob
	ready    chan error // the preparation's outcome, then closed
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
	// left is closed once the thread is out of the exec's group (proc.left).
	left chan struct{}
}

type spawnResult struct {
	pid    int
	status <-chan unix.WaitStatus
	err    error
}

// spareSpawners is how many prepared spawners the engine keeps ready: one
// serves a sandbox used by one client at a time, and each costs an idle
// sandbox a thread (a task of the host's pid_max budget). The next is
// prepared once an exec's result is out: preparing it sooner takes the
// agent's one P from the exec under way.
const spareSpawners = 1

// maxSpawners is how many spawners' threads may be alive at once. Each
// thread is a task of the sandbox's process limit, and after its fork it
// needs one more turn on the agent's one P (on v1 it yields, then leaves
// the exec's group) before it ends. A yielded goroutine waits in the
// runtime's global run queue, which the scheduler serves once in 61 turns
// while the P's own queue has work: with exec sockets keeping the P busy,
// execs came faster than that and each left its thread waiting (91
// spawners at runtime.Gosched in one goroutine dump, the agent at 96
// threads; 260 in a quiet bench, past the sandbox's pids limit:
// docs/decisions.md, 80). Past the bound a new exec waits for a spawner
// to end, and the P goes to the ones waiting. Forks are serialized anyway
// (forkMu).
const maxSpawners = 8

// newSpawner starts a spawner; its thread moves into a new exec group and
// confines itself. It waits while maxSpawners are alive.
func (e *engine) newSpawner() *spawner {
	if e.spawning != nil {
		e.spawning <- struct{}{}
	}
	n := e.spawnSeq.Add(1)
	sp := &spawner{name: "x" + strconv.FormatInt(n, 10), cgroupFD: -1, jobs: make(chan spawnJob), ready: make(chan error, 1)}
	if e.workload != nil {
		sp.group = e.workload.Child(sp.name)
	}
	go func() {
		// This thread takes on a command's confinement and dies with this
		// goroutine: it is never unlocked.
		runtime.LockOSThread()
		if e.spawning != nil {
			defer func() { <-e.spawning }()
		}
		err := sp.enter(e.cfg.Cgroup.V2)
		if err == nil {
			err = e.confineThread(sp)
		}
		sp.ready <- err
		close(sp.ready)
		if err != nil {
			sp.closeFD()
			return
		}
		job, ok := <-sp.jobs
		if !ok {
			// Not wanted after all: the thread ends with this goroutine,
			// and its group once the thread has left it.
			sp.closeFD()
			if sp.group != nil {
				go func() { _ = sp.group.Remove() }()
			}
			return
		}
		pid, status, err := e.forkOnThisThread(sp, job)
		sp.closeFD()
		job.reply <- spawnResult{pid, status, err}
		if err == nil && sp.group != nil && !e.cfg.Cgroup.V2 {
			// The command is started: its exec goes on while this thread
			// moves back to the agent's own group, which on v1 costs a
			// cgroup migration per hierarchy. Yield first, so that the
			// exec's goroutine runs (the agent has one P).
			runtime.Gosched()
			if err := writeZero(e.cfg.AgentTasks, false); err != nil {
				// Never seen; the thread leaves the group as it ends, right
				// after this, and the command must not outlive the fault.
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		close(job.left)
	}()
	return sp
}

func (sp *spawner) closeFD() {
	if sp.cgroupFD >= 0 {
		_ = unix.Close(sp.cgroupFD)
		sp.cgroupFD = -1
	}
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

// takeSpawner returns a ready spawner, if any, else a new one. While
// other execs run (concurrent clients), the next is prepared at once: the
// next exec is likely to come before this one's result is out.
func (e *engine) takeSpawner() *spawner {
	e.mu.Lock()
	var sp *spawner
	if n := len(e.spare); n > 0 {
		sp = e.spare[n-1]
		e.spare = e.spare[:n-1]
	}
	busy := len(e.procs) > 0
	e.mu.Unlock()
	if sp == nil {
		sp = e.newSpawner()
	}
	if busy {
		go e.prepare()
	}
	return sp
}

// prepare makes spawners ready for the next commands, up to spareSpawners.
func (e *engine) prepare() {
	e.mu.Lock()
	if e.noSpares || len(e.spare)+e.preparing >= spareSpawners {
		e.mu.Unlock()
		return
	}
	e.preparing++
	e.mu.Unlock()
	sp := e.newSpawner()
	// Its thread's work, not this goroutine's: counted as preparing until
	// done. One that failed is not kept (its thread is gone, and the
	// outcome is read once): the exec prepares its own and reports why.
	err := <-sp.ready
	e.mu.Lock()
	defer e.mu.Unlock()
	e.preparing--
	if err != nil {
		return
	}
	if len(e.spare) >= spareSpawners {
		close(sp.jobs)
		return
	}
	e.spare = append(e.spare, sp)
}

// discardSpawners drops the prepared spawners and the Landlock ruleset:
// they were built from what the sandbox was (a template's, before it
// became a sandbox), and later ones are built from what it is now.
func (e *engine) discardSpawners() {
	e.rulesetMu.Lock()
	if e.ruleset != nil {
		e.ruleset.Close()
		e.ruleset = nil
	}
	e.rulesetMu.Unlock()
	e.mu.Lock()
	old := e.spare
	e.spare = nil
	e.mu.Unlock()
	for _, sp := range old {
		close(sp.jobs)
	}
	go e.prepare()
}

// start starts the command of s with the given standard streams.
func (e *engine) start(s *agent.ExecStart, stdin, stdout, stderr *os.File) (*proc, error) {
	dir := s.Dir
	if dir == "" {
		dir = e.cfg.WorkDir
	}
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
	left := make(chan struct{})
	p := &proc{id: s.ID, group: sp.group, cgroupName: sp.name, stopped: make(chan struct{}), left: left}
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
	sp.jobs <- spawnJob{path: path, dir: dir, argv: s.Argv, env: env, stdin: stdin, stdout: stdout, stderr: stderr, tty: s.PTY != nil, reply: reply, left: left}
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

// confineThread gives the calling (locked) thread the confinement of a
// command, in the order a command's start always had: the exec's cgroup
// (its directory opened, v2, or its own cgroup namespace, v1), the
// commands' root, no_new_privs, the bounding set, Landlock, seccomp. The
// children it forks inherit all of it.
func (e *engine) confineThread(sp *spawner) error {
	if sp.group != nil {
		if e.cfg.Cgroup.V2 {
			fd, err := unix.Open(sp.group.Path("memory"), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("open the exec's cgroup: %w", err)
			}
			sp.cgroupFD = fd
		} else if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			// The command sees its own exec group as its cgroup root.
			return fmt.Errorf("enter the exec's cgroup namespace: %w", err)
		}
	}
	if e.workloadRoot > 0 {
		if err := chrootThread(e.workloadRoot); err != nil {
			return err
		}
	}
	if err := confine.SetNoNewPrivs(); err != nil {
		return err
	}
	if err := confine.DropBoundingSet(); err != nil {
		return err
	}
	if e.landlock {
		if err := e.restrictThread(); err != nil {
			return fmt.Errorf("apply landlock: %w", err)
		}
	}
	if e.filter != nil {
		if err := e.filter.InstallThread(); err != nil {
			return fmt.Errorf("apply seccomp: %w", err)
		}
	}
	return nil
}

// restrictThread puts the calling thread in a Landlock domain of its own,
// made from the commands' ruleset, which it builds if none is built yet.
// The thread must be in the commands' root already: the paths resolve
// relative to it.
func (e *engine) restrictThread() error {
	e.rulesetMu.RLock()
	r := e.ruleset
	if r != nil {
		defer e.rulesetMu.RUnlock()
		return r.RestrictThread()
	}
	e.rulesetMu.RUnlock()
	e.rulesetMu.Lock()
	defer e.rulesetMu.Unlock()
	if e.ruleset == nil {
		// The sandbox's own terminals (/dev/pts is its devpts instance;
		// /dev/tty is the caller's controlling terminal): a program may
		// reopen its terminal and set its modes (IOCTL_DEV).
		rw := []string{sandbox.Workspace, "/tmp", "/dev/shm", "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/pts", "/dev/tty"}
		for _, m := range e.cfg.Mounts {
			if m.Writable {
				rw = append(rw, m.Target)
			}
		}
		r, err := confine.Landlock{ReadExec: []string{"/"}, ReadWrite: rw}.Build()
		if err != nil {
			return err
		}
		e.ruleset = r
	}
	return e.ruleset.RestrictThread()
}

// forkOnThisThread forks the command from the calling thread, which
// confineThread confined.
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
	if sp.cgroupFD >= 0 {
		sys.UseCgroupFD, sys.CgroupFD = true, sp.cgroupFD
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
	// The thread goes back to the agent's own group after the reply (see
	// newSpawner): a thread of the agent must never be in a group that gets
	// frozen for a kill (a frozen thread stops the whole Go runtime at its
	// next stop-the-world), so kills wait for proc.left. The descriptors
	// were opened before Landlock, which checks only at open.
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
		<-p.left
		_ = p.group.Kill(5 * time.Second)
		return
	}
	// Without cgroups: the session and the process group; double-forked
	// survivors end only when the sandbox does.
	_ = unix.Kill(-p.pid, unix.SIGKILL)
	_ = unix.Kill(p.pid, unix.SIGKILL)
}

// killTree ends what a foreground command left running in its group once
// it has ended. The spawner's thread may still be moving out of the group
// (v1): if nothing but the agent is in it, there is nothing to kill and
// no need to wait for the thread; else the kill waits until the thread
// is out, as a freeze must not catch it.
func (e *engine) killTree(p *proc) {
	select {
	case <-p.left:
	default:
		if pids, err := p.group.Procs(); err == nil && !slices.ContainsFunc(pids, func(pid int) bool { return pid != os.Getpid() }) {
			return
		}
		<-p.left
	}
	_ = p.group.Kill(5 * time.Second)
}

// prepareDelay is how long after an exec no stream follows the next spawner
// is prepared.
const prepareDelay = 5 * time.Millisecond

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
