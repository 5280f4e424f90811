package docker

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/airlock-sandbox/airlock/internal/agentbin/agenttest"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig/dockerd"
)

// The engine and image of the tests, found or made by TestMain.
var (
	testImage string
	rigErr    error
)

// holderEnv makes the test binary a helper that makes sandboxes and holds
// them until it is killed (see holdSandboxes).
const holderEnv = "AIRLOCK_DOCKER_TEST_HOLDER"

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" {
		os.Exit(holdSandboxes())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	eng, err := dockerd.Ensure(ctx, os.Stderr)
	if err == nil {
		os.Setenv("DOCKER_HOST", eng.Host)
		testImage, err = dockerd.TestImage(ctx, eng.Host, os.Stderr)
	}
	cancel()
	rigErr = err
	code := agenttest.Run(m)
	eng.Release()
	os.Exit(code)
}

// requireDocker skips (or fails, under AIRLOCK_TEST_REQUIRE) unless an
// engine runs containers here, and fails when the tests' image could not
// be made for it.
func requireDocker(t *testing.T) {
	t.Helper()
	testcap.Require(t, "root", "docker")
	if rigErr != nil {
		t.Fatalf("the engine answers, but the tests' engine or image is missing: %v", rigErr)
	}
}

// requireRuntime also needs the engine to have runtime.
func requireRuntime(t *testing.T, runtime string) {
	t.Helper()
	requireDocker(t)
	d := newDriver(t, runtime)
	if err := d.Probe(context.Background()); err != nil {
		if runtime != DefaultRuntime {
			testcap.Require(t, "runsc")
		}
		t.Fatalf("the engine cannot run %s containers: %v", runtime, err)
	}
}

// testInstance labels the tests' containers.
func testInstance() string {
	name, _ := os.Hostname()
	return "test@" + name
}

func newDriver(t *testing.T, runtime string) *Driver {
	t.Helper()
	d, err := New(Options{Image: testImage, Runtime: runtime, Instance: testInstance()})
	if err != nil {
		t.Fatalf("docker.New: %v", err)
	}
	return d
}

// smallLimits are the limits of the tests' own sandboxes.
var smallLimits = sandbox.Limits{MemoryBytes: 128 << 20, CPUs: 1, Pids: 64, Timeout: 5 * time.Second, Lifetime: 5 * time.Minute}

// unsupported are the suite's cases a runtime cannot pass here, and why.
func unsupportedCases(runtime string) map[string]string {
	return map[string]string{}
}

func TestConformance(t *testing.T) {
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			requireRuntime(t, rt)
			sandboxtest.Run(t, func(t *testing.T) sandbox.Driver { return newDriver(t, rt) }, sandboxtest.Options{
				Unsupported: unsupportedCases(rt),
				Leaks:       checkLeaks,
				Egress: func(t *testing.T, proxy *egress.Proxy) sandbox.Driver {
					d, err := New(Options{Image: testImage, Runtime: rt, Instance: testInstance(), Egress: proxy})
					if err != nil {
						t.Fatalf("docker.New: %v", err)
					}
					return d
				},
				FreezeAgent: freezeSandbox,
			})
		})
	}
}

// hostOf is the driver's side of a Docker sandbox.
func hostOf(t *testing.T, sb sandbox.Instance) *host {
	t.Helper()
	ai, ok := sb.(*agentdriver.Instance)
	if !ok {
		t.Fatalf("%T is not a docker sandbox", sb)
	}
	return ai.Host().(*host)
}

// freezeSandbox freezes the container's cgroup: the agent stops answering.
func freezeSandbox(t *testing.T, sb sandbox.Instance) func() {
	g := hostOf(t, sb).group
	if g == nil {
		t.Fatal("the sandbox's container has no cgroup on this host to freeze")
	}
	if err := g.Freeze(5 * time.Second); err != nil {
		t.Fatalf("freeze the sandbox: %v", err)
	}
	return func() { g.Thaw() }
}

// engineClient is a client of the tests' engine.
func engineClient(t *testing.T) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatalf("docker client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// containersOf lists the containers labelled with sandbox id.
func containersOf(t *testing.T, cli *client.Client, id string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelSandbox+"="+id)})
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	var out []string
	for _, c := range list.Items {
		out = append(out, fmt.Sprintf("%s (%s, %s)", c.ID[:12], c.State, strings.Join(c.Names, " ")))
	}
	return out
}

// checkLeaks fails t when anything of sandbox id remains: its container
// (and so its anonymous volumes, which go with it), its lock.
func checkLeaks(t *testing.T, id string) {
	t.Helper()
	cli := engineClient(t)
	if left := containersOf(t, cli, id); len(left) > 0 {
		t.Errorf("sandbox %s left containers after Close: %v", id, left)
	}
	if _, err := os.Stat("/run/airlock/sandboxes/" + id + ".lock"); err == nil {
		t.Errorf("sandbox %s left its lock after Close", id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.ContainerInspect(ctx, containerName(id), client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("sandbox %s: its container %s is still there after Close (%v)", id, containerName(id), err)
	}
}

// holdSandboxes is the helper of the restart tests: it makes the
// sandboxes the environment asks for, prints each one's id and state, and
// holds them until it is killed.
func holdSandboxes() int {
	return 0
}
