package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const syscallODirectory = unix.O_DIRECTORY

// Kill kills every process in the group and its descendants and waits until
// the group is empty or timeout passes. A process forking in a loop cannot
// outrun it: v2 kills the whole group atomically (cgroup.kill); v1 freezes
// the group first, so nothing forks while the kill goes round.
func (g *Group) Kill(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if g.h.V2 {
		if err := writeFile(filepath.Join(g.Path("pids"), "cgroup.kill"), "1"); err == nil {
			return g.waitEmpty(deadline)
		}
	}
	for {
		frozen := !g.h.V2 && g.freeze(deadline) == nil
		pids, err := g.Procs()
		for _, p := range pids {
			_ = unix.Kill(p, unix.SIGKILL)
		}
		if frozen {
			g.thaw()
		}
		if err != nil {
			return fmt.Errorf("kill cgroup %s: %w", g.rel, err)
		}
		if len(pids) == 0 || time.Now().After(deadline) {
			return g.waitEmpty(deadline)
		}
		if g.waitEmpty(time.Now().Add(20*time.Millisecond)) == nil {
			return nil
		}
	}
}

func (g *Group) freeze(deadline time.Time) error {
	state := filepath.Join(g.Path("freezer"), "freezer.state")
	if err := writeFile(state, "FROZEN"); err != nil {
		return err
	}
	for {
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
	}
}

func (g *Group) thaw() {
	if !g.h.V2 {
		_ = writeFile(filepath.Join(g.Path("freezer"), "freezer.state"), "THAWED")
	}
}

// waitEmpty waits until no process is left in the group. Killed processes
// stay until their parent reaps them.
func (g *Group) waitEmpty(deadline time.Time) error {
	for delay := 100 * time.Microsecond; ; delay = min(delay*2, 10*time.Millisecond) {
		pids, err := g.Procs()
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
