package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Thousands of sandboxes reach two host limits before memory: the open
// files of this process (RLIMIT_NOFILE, a limit of this process, which it
// may raise) and the kernel's tasks (kernel.pid_max, a sysctl, which the
// bench never changes: it stops and names it).

// fdsPerSandbox is what the host holds open for one idle native sandbox
// (its connection, two locks, the agent's pidfd and its stderr: 5), with
// room for an exec's pipes.
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
	pidMax int
	// perSandbox is how many tasks one more sandbox is expected to add.
	perSandbox float64
}

// newTaskGuard reads kernel.pid_max; without it (not Linux) it lets
// everything through.
func newTaskGuard() *taskGuard {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return &taskGuard{}
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	// Until one is measured: an agent's threads and the host's share.
	return &taskGuard{pidMax: n, perSandbox: 10}
}

// taskReserve is the number of pids left to everything else on the host.
const taskReserve = 1024

// check says why one more sandbox would not fit, or "".
func (g *taskGuard) check(live int) string {
	if g.pidMax == 0 {
		return ""
	}
	used := hostTasks()
	if used == 0 || float64(used)+g.perSandbox+taskReserve <= float64(g.pidMax) {
		return ""
	}
	return fmt.Sprintf("stopped at %d sandboxes: %d of kernel.pid_max's %d tasks are in use, at %.1f per sandbox with %d kept free: raise it (sysctl -w kernel.pid_max=4194304)",
		live, used, g.pidMax, g.perSandbox, taskReserve)
}

// learn takes the measured tasks per sandbox, with one for the host.
func (g *taskGuard) learn(perSandbox float64) {
	if perSandbox > 0 {
		g.perSandbox = perSandbox + 1
	}
}

// hostTasks is how many tasks (threads) the host has, from /proc/loadavg;
// 0 when it cannot tell.
func hostTasks() int {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return 0
	}
	_, total, ok := strings.Cut(f[3], "/")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(total)
	return n
}
