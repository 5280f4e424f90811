// Package agenttest builds the in-sandbox agent for tests, so that `go test`
// works without `make`.
package agenttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/agentbin"
)

// M is what Main runs: a *testing.M, or one wrapped to check more after
// the tests (leaks).
type M interface{ Run() int }

// Main builds cmd/airlock-agent (unless AIRLOCK_AGENT already names one),
// points agentbin at it, and runs the tests. Use it from TestMain:
//
//	func TestMain(m *testing.M) { agenttest.Main(m) }
func Main(m M) { os.Exit(Run(m)) }

// Run is Main that returns the exit code instead of exiting, for a TestMain
// that tears something down afterwards.
func Run(m M) int {
	code, err := run(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agenttest: %v\n", err)
		return 2
	}
	return code
}

func run(m M) (int, error) {
	if os.Getenv(agentbin.Env) == "" {
		dir, err := os.MkdirTemp("", "airlock-agent-")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "airlock-agent")
		cmd := exec.Command("go", "build", "-o", bin, "github.com/airlock-sandbox/airlock/cmd/airlock-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("build the agent: %w\n%s", err, out)
		}
		_ = os.Setenv(agentbin.Env, bin)
	}
	return m.Run(), nil
}
