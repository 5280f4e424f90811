//go:build linux

package fsroot

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// identity is a thread's file-system identity: what the kernel checks file
// permissions against.
type identity struct {
	fsuid, fsgid int
	groups       []int
	setGroups    bool // groups were changed and must be put back
}

// asIdentity runs f on a locked OS thread whose fsuid and fsgid are uid and
// gid (-1 keeps the caller's), with no supplementary groups when gid is set,
// as a workload started with that uid and gid has. setfsuid, setfsgid and
// setgroups are raw per-thread system calls here, so no other thread of the
// process changes. f runs on a fresh goroutine, so the thread is restored
// before it serves anything else; if restoring fails, the goroutine returns
// still locked and the Go runtime ends the thread with it.
func asIdentity(uid, gid int, f func() error) error {
	if uid < 0 && gid < 0 {
		return f()
	}
	type result struct {
		err   error
		panic any
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		var res result
		var old identity
		func() {
			defer func() { res.panic = recover() }()
			var err error
			old, err = become(uid, gid)
			if err != nil {
				res.err = err
				return
			}
			res.err = f()
		}()
		if err := old.restore(); err != nil {
			res.err = errors.Join(res.err, err)
			done <- res
			return // still locked: this thread dies with the goroutine
		}
		runtime.UnlockOSThread()
		done <- res
	}()
	res := <-done
	if res.panic != nil {
		panic(res.panic)
	}
	return res.err
}

// become switches the calling thread to uid and gid and returns what to
// restore; it is filled in even on error, with everything it changed.
func become(uid, gid int) (identity, error) {
	old := identity{fsuid: currentFsuid(), fsgid: currentFsgid()}
	if gid >= 0 {
		groups, err := unix.Getgroups()
		if err != nil {
			return old, fmt.Errorf("read supplementary groups: %w", err)
		}
		if len(groups) > 0 {
			old.groups, old.setGroups = groups, true
			if err := unix.Setgroups(nil); err != nil {
				return old, fmt.Errorf("drop supplementary groups for the file operation: %w", err)
			}
		}
		_, _ = unix.SetfsgidRetGid(gid) // always "succeeds": check the result instead
		if got := currentFsgid(); got != gid {
			return old, fmt.Errorf("set fsgid to %d: still %d", gid, got)
		}
	}
	if uid >= 0 {
		_, _ = unix.SetfsuidRetUid(uid)
		if got := currentFsuid(); got != uid {
			return old, fmt.Errorf("set fsuid to %d: still %d", uid, got)
		}
	}
	return old, nil
}

// restore puts the calling thread's identity back to id.
func (id identity) restore() error {
	_, _ = unix.SetfsuidRetUid(id.fsuid)
	if got := currentFsuid(); got != id.fsuid {
		return fmt.Errorf("restore fsuid %d: still %d", id.fsuid, got)
	}
	_, _ = unix.SetfsgidRetGid(id.fsgid)
	if got := currentFsgid(); got != id.fsgid {
		return fmt.Errorf("restore fsgid %d: still %d", id.fsgid, got)
	}
	if id.setGroups {
		if err := unix.Setgroups(id.groups); err != nil {
			return fmt.Errorf("restore supplementary groups: %w", err)
		}
	}
	return nil
}

// currentFsuid returns the thread's fsuid: setfsuid(-1) changes nothing and
// returns the current value.
func currentFsuid() int {
	prev, _ := unix.SetfsuidRetUid(-1)
	return prev
}

// currentFsgid returns the thread's fsgid, as currentFsuid does.
func currentFsgid() int {
	prev, _ := unix.SetfsgidRetGid(-1)
	return prev
}
