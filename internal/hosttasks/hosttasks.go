// Package hosttasks reads how many kernel tasks (processes and threads)
// the host has and how many it allows (kernel.pid_max), so that the
// daemon and the bench stop before the host runs out of pids: a Go
// program (the daemon, every sandbox's agent) that cannot start a thread
// dies ("failed to create new OS thread"), and a fork fails with EAGAIN.
// Neither ever changes the limit; they name it.
package hosttasks

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Reserve is how many pids are left to everything else on the host.
const Reserve = 1024

// Fix says how to raise the host's task limits.
const Fix = "raise it as root with `sysctl -w kernel.pid_max=4194304` (and kernel.threads-max if it is the lower), or in /etc/sysctl.d to keep it"

// Counter reads the host's tasks and their limit; its fields are files,
// so that tests can point them elsewhere.
type Counter struct {
	PidMax     string // kernel.pid_max
	ThreadsMax string // kernel.threads-max
	LoadAvg    string // /proc/loadavg: its fourth field is running/total tasks
}

// Host reads the running kernel's.
var Host = Counter{
	PidMax:     "/proc/sys/kernel/pid_max",
	ThreadsMax: "/proc/sys/kernel/threads-max",
	LoadAvg:    "/proc/loadavg",
}

// Limit is the most tasks the host allows: the lower of kernel.pid_max
// and kernel.threads-max, and which of the two it is; 0 when neither can
// be read (not Linux).
func (c Counter) Limit() (int, string) {
	limit, name := 0, ""
	for _, l := range []struct{ path, name string }{{c.PidMax, "kernel.pid_max"}, {c.ThreadsMax, "kernel.threads-max"}} {
		b, err := os.ReadFile(l.path)
		if err != nil {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || n <= 0 {
			continue
		}
		if limit == 0 || n < limit {
			limit, name = n, l.name
		}
	}
	return limit, name
}

// Count is how many tasks the host has now; 0 when it cannot tell.
func (c Counter) Count() int {
	b, err := os.ReadFile(c.LoadAvg)
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

// Check says why need more tasks would leave fewer than Reserve of the
// host's limit free, or nil (also when the host cannot tell).
func (c Counter) Check(need int) error {
	limit, name := c.Limit()
	used := c.Count()
	if limit == 0 || used == 0 || used+need+Reserve <= limit {
		return nil
	}
	return fmt.Errorf("the host has %d tasks (processes and threads) of the %d its %s allows, and %d more with %d kept free do not fit; %s",
		used, limit, name, need, Reserve, Fix)
}

// Explain adds to err, a fork or clone that failed, the host's task count
// and limit when err is EAGAIN and the host is near that limit: what a
// failed fork cannot say itself.
func (c Counter) Explain(err error) error {
	if !errors.Is(err, syscall.EAGAIN) {
		return err
	}
	limit, name := c.Limit()
	used := c.Count()
	if limit == 0 || used == 0 || used+Reserve < limit {
		return err
	}
	return fmt.Errorf("%w: the host has %d tasks of the %d its %s allows; %s", err, used, limit, name, Fix)
}
