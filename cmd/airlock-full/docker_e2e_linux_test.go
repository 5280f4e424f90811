package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/airlock-sandbox/airlock/internal/driver/docker"
	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig/dockerd"
)

// The tests' Docker engine and image, found or made once.
var (
	dockerOnce  sync.Once
	dockerImage string
	dockerErr   error
)

// requireDocker skips (or fails) a test that needs a Docker engine, and
// returns the tests' image.
func requireDocker(t *testing.T) string {
	t.Helper()
	testcap.Require(t, "root")
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	dockerOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		eng, err := dockerd.Ensure(ctx, os.Stderr)
		if err == nil {
			os.Setenv("DOCKER_HOST", eng.Host)
			afterTests = append(afterTests, eng.Release)
			dockerImage, err = dockerd.TestImage(ctx, eng.Host, os.Stderr)
		}
		dockerErr = err
	})
	testcap.Require(t, "docker")
	if dockerErr != nil {
		t.Fatalf("the engine answers, but the tests' engine or image is missing: %v", dockerErr)
	}
	return dockerImage
}

// runContainers lists the containers of one-shot runs on this host.
func runContainers(t *testing.T) []string {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	host, _ := os.Hostname()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", docker.LabelDaemon+"="+docker.RunInstance(host))})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range list.Items {
		ids = append(ids, c.Labels[docker.LabelSandbox])
	}
	return ids
}

// TestE2EDocker runs the airlock binary with --driver docker.
func TestE2EDocker(t *testing.T) {
	image := requireDocker(t)
	t.Run("exit code and streams", func(t *testing.T) {
		o := airlockRun(t, runArgs("--driver", "docker", "--image", image, "--", "sh", "-c", "echo out; echo err >&2; exit 3"))
		if o.code != 3 || o.stdout != "out\n" || o.stderr != "err\n" {
			t.Errorf("got code %d, stdout %q, stderr %q; want 3, out, err", o.code, o.stdout, o.stderr)
		}
	})
	for _, rt := range []string{"runc", "runsc"} {
		t.Run("json layers "+rt, func(t *testing.T) {
			o := airlockRun(t, runArgs("--driver", "docker", "--image", image, "--runtime", rt, "--json", "--", "python3", "-c", "print(1)"))
			var out struct {
				ExitCode int      `json:"exit_code"`
				Stdout   string   `json:"stdout"`
				Message  string   `json:"message"`
				Layers   []string `json:"layers"`
			}
			if err := json.Unmarshal([]byte(o.stdout), &out); err != nil {
				t.Fatalf("decode %q: %v", o.stdout, err)
			}
			if out.ExitCode != 0 || out.Stdout != "1\n" {
				t.Fatalf("python3 print(1): %+v", out)
			}
			want := []string{"seccomp", "no_new_privs", "capabilities", "cgroups", "pidns", "netns"}
			if rt == "runsc" {
				want = append(want, "gvisor")
			}
			for _, w := range want {
				if !slices.Contains(out.Layers, w) {
					t.Errorf("layers %q lack %s", out.Layers, w)
				}
			}
		})
	}
	t.Run("timeout", func(t *testing.T) {
		o := airlockRun(t, runArgs("--driver", "docker", "--image", image, "--timeout", "1s", "--", "sleep", "5"))
		if o.code != 137 || !strings.Contains(o.stderr, "timed out") {
			t.Errorf("code %d, stderr %q; want 137 and a timeout message", o.code, o.stderr)
		}
	})
	t.Run("no image", func(t *testing.T) {
		o := airlockRun(t, runArgs("--driver", "docker", "--", "true"))
		if o.code != 125 || !strings.Contains(o.stderr, "--image") {
			t.Errorf("code %d, stderr %q; want 125 saying to give --image", o.code, o.stderr)
		}
	})
	t.Run("image for another driver", func(t *testing.T) {
		// The wasm driver runs no images (the others do, native's from
		// the image cache): refused before any pull.
		o := airlockRun(t, runArgs("--driver", "wasm", "--image", image, "--", "true"))
		if o.code != 125 || !strings.Contains(o.stderr, "not --driver wasm") || strings.Contains(o.stderr, "pulling") {
			t.Errorf("code %d, stderr %q; want 125 saying --image is not for --driver wasm, before any pull", o.code, o.stderr)
		}
	})
	t.Run("doctor", func(t *testing.T) {
		o := airlockRun(t, invocation{args: []string{"doctor", "--json"}})
		var r struct {
			Drivers []doctorDriver `json:"drivers"`
		}
		if err := json.Unmarshal([]byte(o.stdout), &r); err != nil {
			t.Fatalf("decode %q: %v", o.stdout, err)
		}
		i := slices.IndexFunc(r.Drivers, func(d doctorDriver) bool { return d.Name == "docker" })
		if i < 0 {
			t.Fatalf("doctor lists no docker driver: %s", o.stdout)
		}
		d := r.Drivers[i]
		if !d.OK || !strings.Contains(d.Note, "Docker Engine") || !strings.Contains(d.Note, "API 1.") || !strings.Contains(d.Note, "runtimes") || !strings.Contains(d.Note, "runsc") {
			t.Errorf("doctor on docker: %+v; want it to work, with the engine's version, API and runtimes", d)
		}
	})
	t.Run("nothing left", func(t *testing.T) {
		if left := runContainers(t); len(left) > 0 {
			t.Errorf("the runs left containers: %v", left)
		}
	})
}

// TestE2EDockerKilled kills `airlock run --driver docker` with SIGKILL while
// its command runs: its container goes (the engine closes the agent's
// input, the agent ends, the engine removes the container), and what would
// be left the next run's sweep removes.
func TestE2EDockerKilled(t *testing.T) {
	image := requireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := airlockCmd(ctx, runArgs("--driver", "docker", "--image", image, "--timeout", "60s", "--", "sleep", "100"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var ids []string
	for deadline := time.Now().Add(30 * time.Second); len(ids) == 0; ids = runContainers(t) {
		if time.Now().After(deadline) {
			t.Fatal("the run's container never showed up")
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if o := airlockRun(t, runArgs("--driver", "docker", "--image", image, "--", "true")); o.code != 0 {
		t.Fatalf("the next run: code %d, stderr %q", o.code, o.stderr)
	}
	deadline := time.Now().Add(10 * time.Second)
	for left := runContainers(t); len(left) > 0; left = runContainers(t) {
		if time.Now().After(deadline) {
			t.Fatalf("after the killed run and the next one, containers of runs remain: %v (the killed one's sandbox: %v)", left, ids)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// doctorDriver is a driver in `airlock doctor --json`.
type doctorDriver struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	Note string `json:"note"`
}

// TestServeRestartDocker is TestServeRestart on the docker driver: the
// daemon is killed with SIGKILL during a streaming exec, a background
// HTTP server and a half-done upload, and the next daemon reattaches to
// the container (its agent reached again through `docker exec`). Three
// rounds; afterwards no container of any of them is left.
func TestServeRestartDocker(t *testing.T) {
	image := requireDocker(t)
	f := newFault(t, "docker", "")
	conf := fmt.Sprintf("[[template]]\nname = \"default\"\ndriver = \"docker\"\nimage = %q\ntimeout = \"5m\"\n", image)
	if err := os.WriteFile(f.cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	f.start()
	var ids []string
	for i := range 3 {
		ids = append(ids, restartRound(t, f, i))
		if t.Failed() {
			break
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		left := sandboxContainers(t, ids)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("after the last DELETE, containers of these sandboxes remain: %v", left)
			break
		}
	}
}

// sandboxContainers lists the containers, of any daemon or run, that carry
// one of ids as their sandbox label.
func sandboxContainers(t *testing.T, ids []string) []string {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", docker.LabelSandbox)})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range list.Items {
		if id := c.Labels[docker.LabelSandbox]; slices.Contains(ids, id) {
			out = append(out, id+" ("+string(c.State)+")")
		}
	}
	return out
}
