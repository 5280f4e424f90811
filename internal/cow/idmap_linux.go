//go:build linux

package cow

import (
	"fmt"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// IDMap shows the host directory's owner to the sandbox as one of its own
// uids, so that its workload may write what the owner may: the host uid
// and gid the workload runs as. Zero: no mapping (the sandbox writes only
// what the host's modes let others write).
type IDMap struct {
	UID, GID int
}

// userns makes a user namespace mapping uid and gid (inside) to m's
// (outside), for an idmapped mount, and returns its descriptor. The
// namespace needs a process to exist: one is started stopped at its exec
// (ptrace) and killed once its namespace is open.
func (m IDMap) userns(uid, gid int) (int, error) {
	// This very program (also when it runs from a memory file): it stops
	// at its exec and never runs.
	cmd := &exec.Cmd{
		Path: "/proc/self/exe",
		Args: []string{"airlock-idmap"},
		Env:  []string{},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: m.UID, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: m.GID, Size: 1}},
			Ptrace:      true,
			Pdeathsig:   syscall.SIGKILL,
		},
	}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("make the id mapping's user namespace: %w", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	fd, err := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the id mapping's user namespace: %w", err)
	}
	return fd, nil
}

// idmapped returns a detached clone of the directory src (O_PATH) whose
// owner uid and gid show as m's, or -1 and the reason it cannot be made
// (a file system without idmapped mounts).
func (m IDMap) idmapped(src int, uid, gid int) (int, error) {
	ns, err := m.userns(uid, gid)
	if err != nil {
		return -1, err
	}
	defer unix.Close(ns)
	mfd, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return -1, fmt.Errorf("clone the host directory's mount: %w", err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_RDONLY, Userns_fd: uint64(ns)}
	if err := unix.MountSetattr(mfd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		unix.Close(mfd)
		return -1, fmt.Errorf("idmap the host directory's mount: %w", err)
	}
	return mfd, nil
}
