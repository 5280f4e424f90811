package testcap

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/hostcap"
)

// minNodeMajor is the oldest Node.js the npm-based tests support.
const minNodeMajor = 18

// probeNode runs node and npm and checks node's version: the tests that
// drive airlock from npm packages (MCP clients) need both.
func probeNode(ctx context.Context) Result {
	const fix = "apt-get install nodejs npm (Node.js 18 or later)"
	node, err := exec.LookPath("node")
	if err != nil {
		return fail("node is not installed (not found on PATH)", fix)
	}
	out, err := hostcap.RunTool(ctx, 5*time.Second, node, "-e", "console.log(process.versions.node)")
	if err != nil {
		return fail("node does not run: "+err.Error(), fix)
	}
	version := hostcap.FirstLine(out)
	major, _ := strconv.Atoi(strings.SplitN(version, ".", 2)[0])
	if major < minNodeMajor {
		return fail("node "+version+" is older than "+strconv.Itoa(minNodeMajor), fix)
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fail("npm is not installed (not found on PATH)", fix)
	}
	npmVersion, err := hostcap.RunTool(ctx, 10*time.Second, npm, "--version")
	if err != nil {
		return fail("npm does not run: "+err.Error(), fix)
	}
	return ok("node " + version + ", npm " + hostcap.FirstLine(npmVersion))
}
