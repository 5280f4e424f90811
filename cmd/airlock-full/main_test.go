package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentbin"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// The end-to-end tests run the real airlock binary, built once here as
// `make` builds it, with the agent named by AIRLOCK_AGENT instead of
// embedded.
var (
	binDir   string // holds airlock and airlock-agent
	buildErr error
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

// faultParallel is how many of the fault tests' drivers run at a time
// (-test.parallel, unless given). The fault tests TestServeRestart,
// TestServeHolderKilled, TestServeRestartEgress, TestServeRestartSnapshots
// and TestServeTTLWithoutDaemon are the package's only parallel tests:
// they run together after its other tests, each driver's half on its own
// daemon and state directory, and what they wait for is a daemon killed
// and started again, a TTL or the agent's timer, not this machine's CPU;
// they assert no duration but waits of 5-20 s for the daemon to act. At
// go test's default (GOMAXPROCS: 2 on the project's machine)
// TestServeRestart's two halves (about 60 s) held both places while the
// others waited; at 4 the others run beside them. TestServeRestartTTL
// stays out (its two halves side by side, among the package's other
// tests): its daemon must be back within about a second of the end of
// its 5 s away, before the agent's own idle timer (4 s and
// agent.LifetimeGrace after the last exec) ends the idle sandbox, and
// beside the others its native half missed that twice in two runs.
const faultParallel = 4

func testMain(m *testing.M) int {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(faultParallel)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	dir, err := os.MkdirTemp("", "airlock-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	binDir = dir
	buildErr = buildBinaries(dir)
	code := m.Run()
	for _, f := range afterTests {
		f()
	}
	return code
}

// afterTests run once every test has: they stop what tests started for
// the whole binary (a Docker engine).
var afterTests []func()

func buildBinaries(dir string, flags ...string) error {
	for _, b := range []struct{ out, pkg string }{
		{"airlock-agent", "github.com/airlock-sandbox/airlock/cmd/airlock-agent"},
		{"airlock", "github.com/airlock-sandbox/airlock/cmd/airlock-full"},
	} {
		args := append(append([]string{"build", "-trimpath"}, flags...), "-o", filepath.Join(dir, b.out), b.pkg)
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", b.pkg, err, out)
		}
	}
	return nil
}

// requireE2E skips (or fails) a test that needs to run sandboxes.
func requireE2E(t *testing.T) {
	t.Helper()
	testcap.Require(t, "root", "userns", "cgroupv1")
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// invocation is one run of the airlock binary.
type invocation struct {
	args  []string
	stdin io.Reader // nil: /dev/null
	env   []string  // added to the test's environment
	// bin is the directory of the airlock and airlock-agent binaries to
	// run; "" is binDir.
	bin string
}

type outcomeOf struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// airlockCmd prepares the airlock binary with args.
func airlockCmd(ctx context.Context, inv invocation) *exec.Cmd {
	dir := inv.bin
	if dir == "" {
		dir = binDir
	}
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "airlock"), inv.args...)
	cmd.Env = append(os.Environ(), agentbin.Env+"="+filepath.Join(dir, "airlock-agent"))
	cmd.Env = append(cmd.Env, inv.env...)
	cmd.Stdin = inv.stdin
	return cmd
}

// airlockRun runs the airlock binary to the end.
func airlockRun(t *testing.T, inv invocation) outcomeOf {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := airlockCmd(ctx, inv)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := startChild(cmd)
	if err == nil {
		err = cmd.Wait()
		forgetChild(cmd)
	}
	o := outcomeOf{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	if o.took > 5*time.Second {
		t.Logf("slow: airlock %s took %v", strings.Join(inv.args, " "), o.took)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		o.code = ee.ExitCode()
	default:
		t.Fatalf("airlock %s: %v (stderr %q)", strings.Join(inv.args, " "), err, o.stderr)
	}
	return o
}

// runArgs is `airlock run args...`.
func runArgs(args ...string) invocation { return invocation{args: append([]string{"run"}, args...)} }
