package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Start starts cmd inside the group, so that the process and everything it
// forks are in it from their first instruction. On v2 the child is cloned
// straight into the group (CLONE_INTO_CGROUP). On v1 a locked thread moves
// itself into the group (which spares the kernel the global lock and RCU
// grace period a process move takes), forks cmd from there, and moves back
// to where it was. cmd.SysProcAttr must be set.
func (g *Group) Start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		return fmt.Errorf("start %s in cgroup %s: the command has no SysProcAttr", cmd.Path, g.rel)
	}
	if g.h.V2 {
		fd, err := unix.Open(g.Path("memory"), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open cgroup %s: %w", g.rel, err)
		}
		defer unix.Close(fd)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		return cmd.Start()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := threadCgroups(g.h)
		if err != nil {
			errc <- err
			runtime.UnlockOSThread()
			return
		}
		moved := false
		for _, c := range V1Controllers {
			if err = enterThread(filepath.Join(g.Path(c), "tasks")); err != nil {
				err = fmt.Errorf("enter cgroup %s (%s): %w", g.rel, c, err)
				break
			}
			moved = true
		}
		if err == nil {
			err = cmd.Start()
		}
		for _, tasks := range home {
			if moved && enterThread(tasks) != nil {
				// Stuck in the group: the thread must not run anything
				// else. It ends with this goroutine (Go parks the main
				// thread instead; a kill of the group must spare this
				// process).
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
func threadCgroups(h *Hierarchy) ([]string, error) {
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
			if !ok || !slices.Contains(V1Controllers, c) {
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
		return nil, fmt.Errorf("read the thread's cgroups: none of %v in %q", V1Controllers, b)
	}
	return out, nil
}
