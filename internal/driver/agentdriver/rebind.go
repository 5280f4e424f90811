package agentdriver

import "github.com/airlock-sandbox/airlock/internal/agent"

// Rebind makes c the sandbox's agent session in place of the one before,
// which its driver ended (a microVM's save that failed or let the
// sandbox run on: the agent took a new session on the same port).
// Commands followed over the old session end their Wait with an error;
// they run on, and Processes lists them. No call may be in flight: the
// caller holds the sandbox (the supervisor's pause does).
func (in *Instance) Rebind(c *agent.Client) {
	in.mu.Lock()
	old := in.client
	in.client = c
	in.mu.Unlock()
	if old != c {
		_ = old.Close()
	}
}
