package bench

import (
	"fmt"
	"math"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/hosttasks"
)

// Thousands of sandboxes reach two host limits before memory: the open
// files of this process (RLIMIT_NOFILE, a limit of this process, which it
// may raise) and the kernel's tasks (kernel.pid_max, a sysctl, which the
// bench never changes: it stops and names it).

// fdsPerSandbox is what the host holds open for one idle native sandbox
// (its connection and the agent's pidfd: 2; a sandbox with egress, its
// tunnel channel too), with room for an exec's pipes and sockets.
const fdsPerSandbox = 8

// raiseOpenFiles lets this process hold n sandboxes' descriptors. It
// returns a note when it raised the limit, or why it could not.
func raiseOpenFiles(n int) string {
	need := uint64(n*fdsPerSandbox + 1024)
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur >= need {
		return ""
	}
	old := l.Cur
	l.Cur = need
	l.Max = max(l.Max, need)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Sprintf("this process may open %d files, about %d sandboxes' worth, and could not raise that to %d (%v): run `ulimit -n %d` first", old, old/fdsPerSandbox, need, err, need)
	}
	return fmt.Sprintf("raised this process's open-file limit (RLIMIT_NOFILE) from %d to %d for %d sandboxes", old, need, n)
}

// taskGuard stops the density test before the host runs out of pids.
type taskGuard struct {
	host hosttasks.Counter
	// perSandbox is how many tasks one more sandbox is expected to add.
	perSandbox float64
}

// newTaskGuard reads the host's; until one is measured it expects an
// agent's threads and the host's share.
func newTaskGuard() *taskGuard { return &taskGuard{host: hosttasks.Host, perSandbox: 10} }

// check says why one more sandbox would not fit, or "".
func (g *taskGuard) check(live int) string {
	if err := g.host.Check(int(math.Ceil(g.perSandbox))); err != nil {
		return fmt.Sprintf("stopped at %d sandboxes, at %.1f tasks per sandbox: %v", live, g.perSandbox, err)
	}
	return ""
}

// learn takes the measured tasks per sandbox, with one for the host.
func (g *taskGuard) learn(perSandbox float64) {
	if perSandbox > 0 {
		g.perSandbox = perSandbox + 1
	}
}
