package testcap

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/hostcap"
)

// rigs maps each of rigNames to its probe.
var rigs = map[string]rigProbe{
	"docker":   {run: probeDocker, timeout: 30 * time.Second},
	"node":     {run: probeNode, timeout: 15 * time.Second},
	"chromium": {run: probeChromium, timeout: 30 * time.Second},
	"debroot":  {run: probeDebroot, timeout: 20 * time.Second},
	"jupyter":  {run: probeJupyter, timeout: 50 * time.Second},
	// Four 100 MB programs start once, cold.
	"kubernetes": {run: probeKubernetes, timeout: 60 * time.Second},
	"wasm":       {run: probeWasm, timeout: 60 * time.Second},
	"s3":         {run: probeS3, timeout: 40 * time.Second},
}

// Result is hostcap's: a test rig's probe answers as a host layer's does.
type Result = hostcap.Result

// ok is a working capability.
func ok(detail string) Result { return Result{OK: true, Detail: detail} }

// fail is a missing capability: why it is missing and how to get it.
func fail(why, fix string) Result { return Result{Why: why, Fix: fix} }

// isRoot says whether this process runs with effective uid 0.
func isRoot() bool { return os.Geteuid() == 0 }

// notRoot is appended to a Why when a step failed that needs root and the
// process is not root.
func notRoot() string {
	if isRoot() {
		return ""
	}
	return fmt.Sprintf(" (needs root; running as uid %d)", os.Geteuid())
}

// rootFix is the fix for a step that needs root.
const rootFix = "run the tests as root (sudo)"

// runTool runs a program under its own timeout and returns its combined
// output, trimmed. A failure includes the output.
func runTool(ctx context.Context, timeout time.Duration, path string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = "/"
	// Children that keep the output pipe open must not hold us past the timeout.
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w after %v", ctx.Err(), timeout)
		}
		if s != "" {
			return s, fmt.Errorf("%s %s: %w: %s", path, strings.Join(args, " "), err, lastLine(s))
		}
		return s, fmt.Errorf("%s %s: %w", path, strings.Join(args, " "), err)
	}
	return s, nil
}

// firstLine returns the first line of s.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

// lastLine returns the last non-empty line of s, usually the error.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[i+1:])
	}
	return s
}
