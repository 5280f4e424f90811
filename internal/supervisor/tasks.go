package supervisor

import (
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/hosttasks"
)

// restTasks is the room admission wants for one more sandbox's tasks at
// rest, beyond what the host has now: a native sandbox's agent is about 5
// (the bench's density/tasks row), a gVisor or microVM sandbox more.
const restTasks = 16

// hostTasks reads the host's tasks and their limit. A variable for tests.
var hostTasks = hosttasks.Host

// checkTasks refuses a sandbox when the host is within hosttasks.Reserve
// of its task limit (kernel.pid_max): past it, forks fail and every Go
// program that needs a thread, the daemon and the live sandboxes' agents,
// dies. It names the limit and how to raise it; the daemon never changes
// it.
func checkTasks() error {
	if err := hostTasks.Check(restTasks); err != nil {
		return fmt.Errorf("%w: %w", ErrCapacity, err)
	}
	return nil
}
