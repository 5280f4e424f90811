package forker

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// serveFD is the forker's end of its socket (a SOCK_SEQPACKET pair).
const serveFD = 3

// maxFDs is the most descriptors one request carries (the kernel's
// SCM_MAX_FD).
const maxFDs = 253

// request is one agent to start: what syscall.StartProcess takes, less
// what only a descriptor carries. The forker execs its own binary (the
// agent's): it starts nothing else. Its descriptors ride with it
// (SCM_RIGHTS): the first Files are the child's 0, 1, 2, …; one more, when
// CgroupFD is set, is the cgroup (v2) the child starts in.
type request struct {
	Argv       []string               `json:"argv"`
	Cloneflags uintptr                `json:"cloneflags"`
	UIDMap     []syscall.SysProcIDMap `json:"uid_map,omitempty"`
	GIDMap     []syscall.SysProcIDMap `json:"gid_map,omitempty"`
	Setgroups  bool                   `json:"setgroups,omitempty"`
	Setsid     bool                   `json:"setsid,omitempty"`
	Credential *syscall.Credential    `json:"credential,omitempty"`
	Files      int                    `json:"files"`
	CgroupFD   bool                   `json:"cgroup_fd,omitempty"`
}

// reply is the forker's answer: the child's pid, and its pidfd alongside
// (SCM_RIGHTS); or why it could not start it.
type reply struct {
	Pid   int    `json:"pid,omitempty"`
	Errno int    `json:"errno,omitempty"`
	Err   string `json:"err,omitempty"`
}

// Serve is the forker's main: it forks and execs agents as the host on
// descriptor 3 asks, one at a time, reaps them when they exit, and
// returns when the host closes its end (or dies: the forker has a
// parent-death signal too).
func Serve() int {
	// Forks come from the main thread, which never ends (a thread's uid
	// changes for each fork: see asOwner).
	runtime.LockOSThread()
	// The agents it starts get the descriptors they are handed and no
	// other.
	if _, err := unix.FcntlInt(serveFD, unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		fmt.Fprintf(os.Stderr, "airlock-agent: forker: %v\n", err)
		return 1
	}
	// Registered before the first fork: a SIGCHLD that came before it
	// would be lost, and its child left a zombie.
	exits := make(chan os.Signal, 1)
	signal.Notify(exits, unix.SIGCHLD)
	go reap(exits)
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*maxFDs))
	for {
		n, oobn, flags, _, err := unix.Recvmsg(serveFD, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			return 0 // the host is gone
		}
		fds, ferr := rights(oob[:oobn])
		rep, pidfd := serve(buf[:n], flags, fds, ferr)
		for _, fd := range fds {
			unix.Close(fd)
		}
		out, _ := json.Marshal(rep)
		var rts []byte
		if pidfd >= 0 {
			rts = unix.UnixRights(pidfd)
		}
		err = unix.Sendmsg(serveFD, out, rts, nil, unix.MSG_NOSIGNAL)
		if pidfd >= 0 {
			unix.Close(pidfd)
		}
		if err != nil {
			return 0
		}
	}
}

// serve starts the agent one request asks for.
func serve(msg []byte, flags int, fds []int, ferr error) (reply, int) {
	fail := func(err error) (reply, int) {
		r := reply{Err: err.Error()}
		var errno syscall.Errno
		if errors.As(err, &errno) {
			r.Errno = int(errno)
		}
		return r, -1
	}
	if ferr != nil {
		return fail(ferr)
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		return fail(errors.New("forker: the request was cut short"))
	}
	var req request
	if err := json.Unmarshal(msg, &req); err != nil {
		return fail(fmt.Errorf("forker: read the request: %w", err))
	}
	want := req.Files
	if req.CgroupFD {
		want++
	}
	if req.Files < 0 || len(fds) != want {
		return fail(fmt.Errorf("forker: the request names %d descriptors and carries %d", want, len(fds)))
	}
	pidfd := -1
	sys := &syscall.SysProcAttr{
		Cloneflags: req.Cloneflags, UidMappings: req.UIDMap, GidMappings: req.GIDMap,
		GidMappingsEnableSetgroups: req.Setgroups, Setsid: req.Setsid, Credential: req.Credential,
		PidFD: &pidfd,
	}
	if req.CgroupFD {
		sys.UseCgroupFD, sys.CgroupFD = true, fds[req.Files]
	}
	files := make([]uintptr, req.Files)
	for i := range files {
		files[i] = uintptr(fds[i])
	}
	pid, err := Start("/proc/self/exe", req.Argv, &syscall.ProcAttr{Env: []string{}, Files: files, Sys: sys})
	if err != nil {
		return fail(err)
	}
	if pidfd < 0 {
		return reply{Pid: pid}, -1
	}
	return reply{Pid: pid}, pidfd
}

// rights returns the descriptors a message's control data carries.
func rights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("forker: read the request's descriptors: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		fs, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		fds = append(fds, fs...)
	}
	return fds, nil
}

// reap reaps the agents as they exit (until the forker ends, when they
// pass to the host's init). A SIGCHLD that finds the channel full is
// dropped, but the one waiting there drains every exited child.
func reap(exits <-chan os.Signal) {
	for range exits {
		for {
			pid, err := unix.Wait4(-1, nil, unix.WNOHANG, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
		}
	}
}

// Start forks and execs path as attr says, from the calling thread, which
// must be locked to it and never end while the child lives when the
// child has a parent-death signal. A user namespace the child gets is
// owned by the host uid its root maps to (see asOwner).
func Start(path string, argv []string, attr *syscall.ProcAttr) (int, error) {
	var pid int
	err := asOwner(namespaceOwner(attr.Sys), func() error {
		var err error
		pid, _, err = syscall.StartProcess(path, argv, attr)
		return err
	})
	return pid, err
}

// namespaceOwner is the host uid that is to own the new user namespace sys
// makes: the one the sandbox's root maps to, or -1 when sys makes none.
//
// A user namespace's owner pays for it: the kernel charges what a process
// in it takes of the per-user pools (inotify instances and watches, pending
// signals, POSIX message queue bytes, locked shared memory) to its own user
// in its namespace and, at the host's level, to the namespace's owner. With
// root as the owner, every sandbox drew on root's pools, shared with the
// host's own services: one sandbox taking all 128 inotify instances made
// inotify_init1 fail with EMFILE for root everywhere on the host. Owned by
// its own uid range, each sandbox draws on a pool of its own.
func namespaceOwner(sys *syscall.SysProcAttr) int {
	if sys == nil || sys.Cloneflags&unix.CLONE_NEWUSER == 0 || len(sys.UidMappings) == 0 || sys.UidMappings[0].ContainerID != 0 {
		return -1
	}
	return sys.UidMappings[0].HostID
}

// asOwner runs f, which forks, with the calling thread's effective uid set
// to uid (none when uid is -1), so that a user namespace the fork makes is
// owned by uid. The thread keeps its capabilities meanwhile (it writes the
// child's uid map and puts it into its cgroup) and gets its own uid back
// afterwards. Only this thread changes: the calls are raw system calls,
// not the runtime's all-threads ones. The caller is locked to its thread.
func asOwner(uid int, f func() error) error {
	if uid < 0 || unix.Geteuid() != 0 {
		return f() // only root can own a namespace by another uid
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var caps [2]unix.CapUserData
	if err := unix.Capget(&hdr, &caps[0]); err != nil {
		return fmt.Errorf("read the forking thread's capabilities: %w", err)
	}
	keep := ^uintptr(0) // -1: leave the real and saved uids as they are
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(uid), keep); e != 0 {
		return fmt.Errorf("take uid %d to own the sandbox's user namespace: %w", uid, e)
	}
	// Back to uid 0 the kernel copies the permitted capabilities to the
	// effective ones again.
	defer func() {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, 0, keep); e != 0 {
			panic(fmt.Sprintf("forker: the forking thread cannot take back its uid: %v", e))
		}
	}()
	// Leaving uid 0 emptied the effective set; the permitted set is as
	// it was (the real and saved uids are still 0).
	if err := unix.Capset(&hdr, &caps[0]); err != nil {
		return fmt.Errorf("keep the forking thread's capabilities as uid %d: %w", uid, err)
	}
	return f()
}
