package docker

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/agentbin/agenttest"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver/contained"
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

// newDriver is a driver of the tests' image and runtime, whose sandboxes
// outlive their process, as a daemon's (see TestOneShot for the other
// kind).
func newDriver(t *testing.T, runtime string) *Driver {
	t.Helper()
	d, err := New(Options{Image: testImage, Runtime: runtime, Instance: testInstance(), Persistent: true})
	if err != nil {
		t.Fatalf("docker.New: %v", err)
	}
	return d
}

// smallLimits are the limits of the tests' own sandboxes.
var smallLimits = sandbox.Limits{MemoryBytes: 128 << 20, CPUs: 1, Pids: 64, Timeout: 5 * time.Second, Lifetime: 5 * time.Minute}

// unsupportedCases are the suite's cases the driver cannot pass, and why
// (the same for every runtime).
func unsupportedCases(rt string) map[string]string {
	noCow := "the docker driver makes no copy-on-write mounts (Capabilities.CowMounts is false): the engine makes its binds; a cow mount is refused with ErrUnsupported"
	const noRoot = "the docker driver runs images: a sandbox's root is the image the engine has, never a host directory " +
		"(which a remote engine could not see); Spec.Root is refused (Capabilities.HostRoot is false)"
	m := map[string]string{
		"cow/apply": noCow, "cow/quota": noCow, "cow/hostile": noCow,
		"mounts/root": noRoot, "mounts/root_symlink_refused": noRoot,
		"mounts/swap_race": "the engine resolves a bind mount's source path itself when it starts the container, after airlock's " +
			"check that it is no symlink, and follows a symlink put there meanwhile; do not give docker sandboxes host " +
			"directories that someone untrusted can change",
	}
	if rt == "runc" {
		m["pools/inotify"] = "under runc without user namespaces every docker sandbox's commands run as host uid 1000, " +
			"whose inotify pool (128 instances) they share with each other and with the host's uid 1000: one sandbox can take " +
			"it all (measured: 128, then 0 for the next); the engine gives a container no user namespace of its own " +
			"(docs/decisions.md, 44)"
	}
	return m
}

// conformanceParallel is how many of the suite's cases run at a time: a
// case mostly waits on the engine (a container made, started, stopped and
// removed by dockerd and containerd), two at a time on this project's two
// cores. The cases that measure time run alone
// (sandboxtest.Options.Parallel).
const conformanceParallel = 2

func TestConformance(t *testing.T) {
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			requireRuntime(t, rt)
			sandboxtest.Run(t, func(t *testing.T) sandbox.Driver { return newDriver(t, rt) }, sandboxtest.Options{
				Unsupported: unsupportedCases(rt),
				Leaks:       checkLeaks,
				Egress: func(t *testing.T, proxy *egress.Proxy) sandbox.Driver {
					d, err := New(Options{Image: testImage, Runtime: rt, Instance: testInstance(), Egress: proxy, Persistent: true})
					if err != nil {
						t.Fatalf("docker.New: %v", err)
					}
					return d
				},
				FreezeAgent: freezeSandbox,
				KillAgent:   killAgent,
				Parallel:    conformanceParallel,
			})
		})
	}
}

// killAgent kills the container's first process, the agent (SIGKILL from
// outside its namespaces).
func killAgent(t *testing.T, sb sandbox.Instance) {
	pid := hostOf(t, sb).pid
	if pid <= 0 {
		t.Fatal("the engine runs elsewhere: no agent process on this host to kill")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the agent: %v", err)
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

// holdSandboxes is the helper of the restart tests, a daemon in
// miniature: it makes as many sandboxes as the environment says, writes a
// file in each and starts a background command that beats (appends to
// /tmp/hb every 100 ms), prints each one's state, and holds them until it
// is killed.
func holdSandboxes() int {
	n, _ := strconv.Atoi(strings.TrimSuffix(os.Getenv(holderEnv), "-oneshot"))
	persistent := !strings.HasSuffix(os.Getenv(holderEnv), "-oneshot")
	d, err := New(Options{Image: os.Getenv("AIRLOCK_DOCKER_TEST_IMAGE"), Instance: testInstance(), Persistent: persistent})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	ctx := context.Background()
	for range n {
		sb, err := d.Create(ctx, sandbox.Spec{Limits: smallLimits})
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		if err := sb.Files().WriteFile(ctx, "/workspace/before", strings.NewReader("made before the kill\n"), 0o644); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		if _, err := sb.Start(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", heartbeat}, Background: true}); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		// The host's own state: a one-shot sandbox's instance keeps none.
		st, err := sb.(*agentdriver.Instance).Host().(*host).DriverState()
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("state", sb.ID(), base64.StdEncoding.EncodeToString(st))
	}
	fmt.Println("ready")
	time.Sleep(10 * time.Minute)
	return 0
}

// heartbeat appends a line to /tmp/hb every 100 ms.
const heartbeat = "while :; do echo beat >> /tmp/hb; sleep 0.1; done"

// holder is a running holdSandboxes: the sandboxes it made, by id, with
// their states.
type holder struct {
	cmd    *exec.Cmd
	states map[string][]byte
	ids    []string
}

// startHolder starts a holder of n sandboxes and waits until they run.
// Their driver is persistent unless oneShot.
func startHolder(t *testing.T, n int, oneShot bool) *holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	arg := strconv.Itoa(n)
	if oneShot {
		arg += "-oneshot"
	}
	cmd.Env = append(os.Environ(), holderEnv+"="+arg, "AIRLOCK_DOCKER_TEST_IMAGE="+testImage)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	h := &holder{cmd: cmd, states: map[string][]byte{}}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 3 && f[0] == "state":
			b, err := base64.StdEncoding.DecodeString(f[2])
			if err != nil {
				t.Fatalf("holder state: %v", err)
			}
			h.states[f[1]] = b
			h.ids = append(h.ids, f[1])
		case len(f) == 1 && f[0] == "ready":
			return h
		default:
			t.Fatalf("holder: %s", sc.Text())
		}
	}
	t.Fatalf("the holder ended before its sandboxes were ready: %v", sc.Err())
	return nil
}

// kill9 kills the holder as a crash would, and waits for it to be gone.
func (h *holder) kill9(t *testing.T) {
	t.Helper()
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = h.cmd.Wait()
}

// running says whether the container of sandbox id runs.
func running(t *testing.T, cli *client.Client, id string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cli.ContainerInspect(ctx, containerName(id), client.ContainerInspectOptions{})
	return err == nil && r.Container.State != nil && r.Container.State.Running
}

// TestRestart is a daemon's restart after `kill -9`, at the driver's
// level: the process that made three sandboxes is killed; their containers
// live on. The next one reattaches to the sandbox whose record is live
// (its file is there, its background command still beats, new commands
// and files work), leaves alone the one whose record is gone and the one
// whose time ran out while nobody watched, and one sweep removes those two
// and nothing else.
func TestRestart(t *testing.T) {
	requireRuntime(t, DefaultRuntime)
	cli := engineClient(t)
	h := startHolder(t, 3, false)
	live, gone, expired := h.ids[0], h.ids[1], h.ids[2]
	t.Cleanup(func() {
		for _, id := range h.ids {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, _ = cli.ContainerRemove(ctx, containerName(id), client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
			cancel()
		}
	})
	h.kill9(t)
	for _, id := range h.ids {
		if !running(t, cli, id) {
			t.Fatalf("sandbox %s's container stopped when the process that made it was killed", id)
		}
	}
	// The registry of the next daemon: the record of gone was removed, and
	// expired's lifetime ran out while the daemon was down.
	records := map[string]struct {
		state   []byte
		expires time.Time
	}{
		live:    {h.states[live], time.Now().Add(time.Hour)},
		expired: {h.states[expired], time.Now().Add(-time.Second)},
	}
	d := newDriver(t, DefaultRuntime)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var sb sandbox.Instance
	for id, r := range records {
		if time.Now().After(r.expires) {
			continue
		}
		var err error
		if sb, err = d.Recover(ctx, id, r.state); err != nil {
			t.Fatalf("recover sandbox %s: %v", id, err)
		}
		t.Cleanup(func() { _ = sb.Close(context.Background()) })
	}
	if err := d.Sweep(ctx); err != nil {
		t.Errorf("sweep: %v", err)
	}
	for _, id := range []string{gone, expired} {
		if left := containersOf(t, cli, id); len(left) > 0 {
			t.Errorf("sandbox %s has no live record, but its container is still there after a sweep: %v", id, left)
		}
		if _, err := os.Stat("/run/airlock/sandboxes/" + id + ".lock"); err == nil {
			t.Errorf("sandbox %s's lock is still there after a sweep", id)
		}
	}
	if !running(t, cli, live) {
		t.Fatalf("the sweep stopped sandbox %s, whose record is live", live)
	}

	var out strings.Builder
	if err := sb.Files().ReadFile(ctx, "/workspace/before", 0, 0, &out); err != nil || out.String() != "made before the kill\n" {
		t.Errorf("the file made before the kill: %q, %v", out.String(), err)
	}
	beats := func() int {
		var b strings.Builder
		if err := sb.Files().ReadFile(ctx, "/tmp/hb", 0, 0, &b); err != nil {
			t.Fatalf("read the heartbeat: %v", err)
		}
		return strings.Count(b.String(), "beat")
	}
	n := beats()
	time.Sleep(time.Second)
	if m := beats(); m <= n {
		t.Errorf("the background command started before the kill stopped beating (%d beats, then %d)", n, m)
	}
	var echo strings.Builder
	res, err := sandbox.Run(ctx, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", "cat /workspace/before; ps -eo args | grep -c '^sh -c while'"}, Stdout: &echo})
	if err != nil || res.ExitCode != 0 || echo.String() != "made before the kill\n1\n" {
		t.Errorf("a command after the reattach: %+v, %v, stdout %q", res, err, echo.String())
	}
	if err := sb.Files().WriteFile(ctx, "/workspace/after", strings.NewReader("x"), 0o644); err != nil {
		t.Errorf("write a file after the reattach: %v", err)
	}
	// A reattached sandbox cannot be recovered twice at once.
	if _, err := d.Recover(ctx, live, h.states[live]); !errors.Is(err, sandbox.ErrExists) {
		t.Errorf("a second Recover of a sandbox in use: %v, want ErrExists", err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Errorf("close the reattached sandbox: %v", err)
	}
	checkLeaks(t, live)
	// What is gone cannot be recovered.
	if _, err := d.Recover(ctx, gone, h.states[gone]); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Recover of a swept sandbox: %v, want ErrNotFound", err)
	}
}

// TestHardening: the engine made the container as the driver asked: read-
// only root, no capabilities but the agent's, no_new_privs, no network,
// memory without swap, CPU and pids limits, no privilege, no host paths, a
// cgroup namespace of its own, the labels.
func TestHardening(t *testing.T) {
	requireRuntime(t, DefaultRuntime)
	d := newDriver(t, DefaultRuntime)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := d.Create(ctx, sandbox.Spec{Limits: smallLimits})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	r, err := engineClient(t).ContainerInspect(ctx, containerName(sb.ID()), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc, cfg := r.Container.HostConfig, r.Container.Config
	mem := smallLimits.MemoryBytes + contained.AgentMemory
	checks := []struct {
		what string
		ok   bool
	}{
		{"read-only root", hc.ReadonlyRootfs},
		{"CapDrop ALL", slices.Equal(hc.CapDrop, []string{"ALL"})},
		{"CapAdd is the agent's list", len(hc.CapAdd) == len(agent.ContainedCaps)},
		{"no-new-privileges", slices.Contains(hc.SecurityOpt, "no-new-privileges")},
		{"no seccomp=unconfined", !slices.ContainsFunc(hc.SecurityOpt, func(s string) bool { return strings.HasPrefix(s, "seccomp") })},
		{"network none", string(hc.NetworkMode) == "none"},
		{"not privileged", !hc.Privileged},
		{"no binds", len(hc.Binds) == 0 && !slices.ContainsFunc(hc.Mounts, func(m mount.Mount) bool { return m.Type == mount.TypeBind })},
		{"memory limit", hc.Memory == mem},
		{"no swap", hc.MemorySwap == mem},
		{"CPU limit", hc.NanoCPUs == int64(smallLimits.CPUs*1e9)},
		{"pids limit", hc.PidsLimit != nil && *hc.PidsLimit == int64(smallLimits.Pids+contained.AgentPids)},
		{"private cgroup namespace", hc.CgroupnsMode == container.CgroupnsModePrivate},
		{"runtime runc", hc.Runtime == "runc"},
		{"tmpfs /workspace and /tmp", hc.Tmpfs[sandbox.Workspace] != "" && hc.Tmpfs["/tmp"] != ""},
		{"label airlock.sandbox", cfg.Labels[LabelSandbox] == sb.ID()},
		{"label airlock.daemon", cfg.Labels[LabelDaemon] == testInstance()},
		{"user root (the agent)", cfg.User == "0:0"},
		{"image", cfg.Image == testImage},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("the container lacks %s: %+v", c.what, hc)
		}
	}
}

// TestMounts: a host directory is read-only inside unless the spec says
// writable.
func TestMounts(t *testing.T) {
	requireRuntime(t, DefaultRuntime)
	ro, rw := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "data"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(rw, 0o777); err != nil {
		t.Fatal(err)
	}
	d := newDriver(t, DefaultRuntime)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := d.Create(ctx, sandbox.Spec{Limits: smallLimits, Mounts: []sandbox.Mount{
		{Source: ro, Target: "/mnt/ro"}, {Source: rw, Target: "/mnt/rw", Writable: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	var out strings.Builder
	res, err := sandbox.Run(ctx, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c",
		"cat /mnt/ro/data; touch /mnt/ro/x 2>/dev/null && echo wrote-ro; echo hi > /mnt/rw/y && echo wrote-rw"}, Stdout: &out})
	if err != nil || out.String() != "from the host\nwrote-rw\n" {
		t.Errorf("mounts: %+v, %v, stdout %q; want the file read, the read-only mount refused, the writable one written", res, err, out.String())
	}
	if b, err := os.ReadFile(filepath.Join(rw, "y")); err != nil || string(b) != "hi\n" {
		t.Errorf("the writable mount's file on the host: %q, %v", b, err)
	}
}

// TestCreateErrors: what cannot be made says why, and leaves nothing.
func TestCreateErrors(t *testing.T) {
	requireRuntime(t, DefaultRuntime)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tests := []struct {
		name string
		opts Options
		spec sandbox.Spec
		is   error
		say  string
	}{
		{"no image", Options{}, sandbox.Spec{}, sandbox.ErrUnsupported, "needs an image"},
		// A registry on loopback that does not answer: the engine's pull fails.
		{"image missing", Options{}, sandbox.Spec{Image: "127.0.0.1:1/airlock-test/no-such-image:1"}, sandbox.ErrNotFound, "could not pull it"},
		{"runtime missing", Options{Image: testImage}, sandbox.Spec{Runtime: "no-such-runtime"}, sandbox.ErrUnsupported, "register it with the engine"},
		{"root directory", Options{Image: testImage}, sandbox.Spec{Root: "/"}, sandbox.ErrUnsupported, "runs images"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Instance = testInstance()
			d, err := New(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			tt.spec.ID = sandbox.NewID()
			_, err = d.Create(ctx, tt.spec)
			if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.say) {
				t.Errorf("Create: %v; want %v saying %q", err, tt.is, tt.say)
			}
			checkLeaks(t, tt.spec.ID)
		})
	}
}

// TestProbeNoEngine: Probe says, within its bound, that no engine answers.
func TestProbeNoEngine(t *testing.T) {
	d, err := New(Options{Host: "unix://" + filepath.Join(t.TempDir(), "none.sock")})
	if err != nil {
		t.Fatal(err)
	}
	err = d.Probe(context.Background())
	if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "cannot reach the Docker engine") {
		t.Errorf("Probe with no engine: %v; want ErrUnsupported saying it cannot reach the engine", err)
	}
}

// TestOneShot: the container of a driver that is not persistent (a one-shot
// run's) dies with the process that made it, killed or not, and is gone
// without a sweep; it cannot be reattached.
func TestOneShot(t *testing.T) {
	requireRuntime(t, DefaultRuntime)
	cli := engineClient(t)
	h := startHolder(t, 1, true)
	id := h.ids[0]
	if !running(t, cli, id) {
		t.Fatalf("sandbox %s does not run", id)
	}
	h.kill9(t)
	deadline := time.Now().Add(15 * time.Second)
	for len(containersOf(t, cli, id)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("15 s after its process was killed, sandbox %s's container is still there: %v", id, containersOf(t, cli, id))
		}
		time.Sleep(100 * time.Millisecond)
	}
	d, err := New(Options{Image: testImage, Instance: testInstance()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Recover(context.Background(), id, h.states[id]); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("Recover with a one-shot driver: %v, want ErrUnsupported", err)
	}
}
