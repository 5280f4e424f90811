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
// (its connection and the agent's pidfd: 2, decision 62; 5,083 with 2,536
// live), with one to spare. An exec's descriptors come and go; the 1,024
// added to the total cover them.
const fdsPerSandbox = 3

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

// tasksAtRest is what one idle native sandbox adds to the host's tasks,
// its agent's threads (5.15 at 1,000 idle sandboxes, 6.0 at 2,536 right
// after an exec in each) and a share of the host's, for the forecast.
const tasksAtRest = 7

// forecast says, before the test grows to n sandboxes, when the host's
// task limit will stop it first, and how to raise it; "" when n fits.
func (g *taskGuard) forecast(n int) string {
	limit, name := g.host.Limit()
	used := g.host.Count()
	need := n * tasksAtRest
	if limit == 0 || used == 0 || used+need+hosttasks.Reserve <= limit {
		return ""
	}
	fit := max(0, (limit-hosttasks.Reserve-used)/tasksAtRest)
	return fmt.Sprintf("%d sandboxes at about %d tasks each need %d tasks beside the host's %d, and %s is %d: the test will stop near %d; %s",
		n, tasksAtRest, need, used, name, limit, fit, hosttasks.Fix)
}

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
