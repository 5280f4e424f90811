package agentd

import (
	"fmt"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// idThreadCount is how many file operations run at once on idThreads.
const idThreadCount = 4

// idThreads runs file operations on a few OS threads that are the
// workload's user altogether: real, effective and saved uid and gid, no
// supplementary groups, and so no capabilities. gVisor has no setfsuid, so
// fsroot cannot switch only the file-system identity there; a thread that
// has become the workload for good does the same job, and cannot turn back.
//
// Each thread is locked and never unlocked, so it serves nothing else and
// dies with its goroutine; the Go runtime starts new threads from a clean
// template thread, never from a locked one, so no other thread inherits
// these credentials. The calls are raw system calls, which change the
// calling thread only (the libc wrappers change every thread).
type idThreads struct {
	uid, gid int

	once sync.Once
	jobs chan func()
	err  error
}

// do runs f on one of the threads and returns its error.
func (p *idThreads) do(f func() error) error {
	p.once.Do(p.start)
	if p.err != nil {
		return p.err
	}
	done := make(chan error, 1)
	p.jobs <- func() { done <- f() }
	return <-done
}

// start starts the threads; the first one that cannot become the workload
// is the error of every later call.
func (p *idThreads) start() {
	p.jobs = make(chan func())
	ready := make(chan error, idThreadCount)
	for range idThreadCount {
		go func() {
			runtime.LockOSThread() // never unlocked: see idThreads
			err := becomeWorkload(p.uid, p.gid)
			ready <- err
			if err != nil {
				return
			}
			for job := range p.jobs {
				job()
			}
		}()
	}
	for range idThreadCount {
		if err := <-ready; err != nil && p.err == nil {
			p.err = err
		}
	}
}

// becomeWorkload makes the calling thread uid and gid, with no groups.
func becomeWorkload(uid, gid int) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		return fmt.Errorf("file operations: drop groups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return fmt.Errorf("file operations: become gid %d: %w", gid, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return fmt.Errorf("file operations: become uid %d: %w", uid, e)
	}
	r, e, s := unix.Getresuid()
	if r != uid || e != uid || s != uid {
		return fmt.Errorf("file operations: uids are %d %d %d after becoming %d", r, e, s, uid)
	}
	return nil
}
