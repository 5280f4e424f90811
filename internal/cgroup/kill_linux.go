package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const syscallODirectory = unix.O_DIRECTORY

// Kill kills every process in the group and its descendants and waits until
// the group is empty or timeout passes. A process forking in a loop cannot
// outrun it: v2 kills the whole group atomically (cgroup.kill); v1 freezes
// the group first, so nothing forks while the kill goes round. Processes
// named in spare are neither killed nor waited for (a thread of the agent
// may pass through a group it made).
func (g *Group) Kill(timeout time.Duration, spare ...int) error {
	deadline := time.Now().Add(timeout)
	if pids, err := g.procs(spare); err == nil && len(pids) == 0 {
		return nil
	}
	if g.h.V2 && len(spare) == 0 {
		if err := writeFile(filepath.Join(g.Path("pids"), "cgroup.kill"), "1"); err == nil {
			return g.waitEmpty(deadline, spare)
		}
	}
	for {
		// Killed processes must be thawed to die, whether the freeze
		// finished or not, in this group and in any frozen below it.
		if !g.h.V2 {
			// A freeze that does not finish soon (a process stuck in
			// the kernel) must not hold the kill up.
			_ = g.freeze(time.Now().Add(100 * time.Millisecond))
		}
		pids, err := g.procs(spare)
		for _, p := range pids {
			_ = unix.Kill(p, unix.SIGKILL)
		}
		g.thaw()
		if err != nil {
			return fmt.Errorf("kill cgroup %s: %w", g.rel, err)
		}
		if len(pids) == 0 || time.Now().After(deadline) {
			return g.waitEmpty(deadline, spare)
		}
		if g.waitEmpty(time.Now().Add(20*time.Millisecond), spare) == nil {
			return nil
		}
	}
}

// procs lists the group's processes but those in spare.
func (g *Group) procs(spare []int) ([]int, error) {
	pids, err := g.Procs()
	if len(spare) == 0 {
		return pids, err
	}
	out := pids[:0]
	for _, p := range pids {
		if !slices.Contains(spare, p) {
			out = append(out, p)
		}
	}
	return out, err
}

func (g *Group) freeze(deadline time.Time) error {
	state := filepath.Join(g.Path("freezer"), "freezer.state")
	if err := writeFile(state, "FROZEN"); err != nil {
		return err
	}
	for i := 0; ; {
		b, err := os.ReadFile(state)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(b)) == "FROZEN" {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("freeze timed out")
		}
		time.Sleep(time.Millisecond)
		if i++; i%50 == 0 {
			// v1 tries to freeze each task once per write: a task that
			// was busy (forking, in a system call) is tried again.
			if err := writeFile(state, "FROZEN"); err != nil {
				return err
			}
		}
	}
}

// thaw thaws the group and every group below it (v1).
func (g *Group) thaw() {
	if g.h.V2 {
		return
	}
	_ = filepath.WalkDir(g.Path("freezer"), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = writeFile(filepath.Join(p, "freezer.state"), "THAWED")
		}
		return nil
	})
}

// waitEmpty waits until no process is left in the group. Killed processes
// stay until their parent reaps them.
func (g *Group) waitEmpty(deadline time.Time, spare []int) error {
	for delay := 100 * time.Microsecond; ; delay = min(delay*2, 10*time.Millisecond) {
		pids, err := g.procs(spare)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has %d processes after the kill", g.rel, len(pids))
		}
		time.Sleep(delay)
	}
}

// rmdir removes a cgroup directory, retrying briefly while the kernel still
// counts a process that has just died.
func rmdir(dir string) error {
	var err error
	for i := 0; i < 50; i++ {
		if err = unix.Rmdir(dir); !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(time.Duration(i+1) * time.Millisecond)
	}
	if err != nil {
		return &os.PathError{Op: "rmdir", Path: dir, Err: err}
	}
	return nil
}

// Freeze stops every process of the group (and below it) and waits, up to
// timeout, until they are stopped.
func (g *Group) Freeze(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if !g.h.V2 {
		return g.freeze(deadline)
	}
	if err := writeFile(filepath.Join(g.Path("pids"), "cgroup.freeze"), "1"); err != nil {
		return err
	}
	for {
		b, err := os.ReadFile(filepath.Join(g.Path("pids"), "cgroup.events"))
		if err != nil {
			return err
		}
		if keyed(b, "frozen") == 1 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("freeze timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// Thaw lets the processes of a frozen group run again.
func (g *Group) Thaw() {
	if g.h.V2 {
		_ = writeFile(filepath.Join(g.Path("pids"), "cgroup.freeze"), "0")
		return
	}
	g.thaw()
}
