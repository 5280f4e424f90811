package agentdriver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Host sessions with an agent that outlives the process that made its
// sandbox (agent.Config.Listen): where their sockets live, how the host
// reaches one and checks who answers, and how it notices that the holder
// of a sandbox it did not start has died.

// SessionDir makes (or checks) the directory of the agents' session
// sockets below stateDir: root's alone (0700), so that nobody else can
// reach a sandbox's agent, and returns its path.
func SessionDir(stateDir string) (string, error) {
	dir := filepath.Join(stateDir, "sessions")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("make the session directory: %w", err)
	}
	// An older directory with looser rights is tightened.
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", fmt.Errorf("make the session directory root's alone: %w", err)
	}
	return dir, nil
}

// DialSession connects to the session socket at path. A socket that is not
// there yet or not listening yet (the holder is starting) is tried again
// every few milliseconds until ctx ends or gone is closed (the holder
// died).
func DialSession(ctx context.Context, path string, gone <-chan struct{}) (*net.UnixConn, error) {
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			return c.(*net.UnixConn), nil
		}
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ECONNREFUSED) {
			return nil, fmt.Errorf("connect to the sandbox's agent: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to the sandbox's agent: %w (%w)", ctx.Err(), err)
		case <-gone:
			return nil, fmt.Errorf("connect to the sandbox's agent: it has exited (%w)", err)
		case <-time.After(2 * time.Millisecond):
		}
	}
}
