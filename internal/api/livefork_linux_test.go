package api

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/driver/gvisor"
	"github.com/airlock-sandbox/airlock/internal/driver/native"
	"github.com/airlock-sandbox/airlock/internal/hostcap"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// secretServer keeps a random number only in its memory and serves it on
// 127.0.0.1:8000; fetchSecret asks it (waiting for it to listen).
const (
	secretServer = `import http.server, os
secret = os.urandom(8).hex()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(secret.encode())
    def log_message(self, *a): pass
http.server.HTTPServer(('127.0.0.1', 8000), H).serve_forever()
`
	fetchSecret = `import urllib.request, time
for i in range(600):
    try:
        print(urllib.request.urlopen('http://127.0.0.1:8000', timeout=5).read().decode()); break
    except OSError:
        time.sleep(0.05)
`
	// identityCmd prints the machine id, the host name and 32 random bytes.
	identityCmd = "cat /etc/machine-id; hostname; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo"
)

func cgroupCap() string {
	if hostcap.CgroupMode() == "v2" {
		return "cgroupv2"
	}
	return "cgroupv1"
}

// execOut runs argv in sandbox id and returns its output, failing t
// unless it exits 0.
func execOut(t *testing.T, c *client.Client, id string, argv ...string) string {
	t.Helper()
	res, err := c.Exec(context.Background(), id, client.ExecRequest{Argv: argv})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%s: %v: %v %+v %s", id, argv, err, res, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// TestLiveForkGVisor forks a 256 MiB gVisor sandbox serving a secret from
// its memory into two clones through the API and the Go SDK: the source
// runs on, all three answer the secret, and each has a machine id, a host
// name and random bytes of its own; the image is gone afterwards.
func TestLiveForkGVisor(t *testing.T) {
	testcap.Require(t, "root", cgroupCap(), "runsc")
	drv, err := gvisor.New(gvisor.Options{Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	e := startEnv(t, drv, envOptions{cfg: supervisor.Config{StateDir: state}})
	c, _ := e.client(store.RoleAgent, store.Quota{}, store.RateLimits{})
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{Limits: client.Limits{MemoryBytes: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartProcess(ctx, sb.ID, client.StartProcessRequest{ExecRequest: client.ExecRequest{Argv: []string{"python3", "-c", secretServer}}}); err != nil {
		t.Fatal(err)
	}
	secret := execOut(t, c, sb.ID, "python3", "-c", fetchSecret)
	if len(secret) != 16 {
		t.Fatalf("the server answered %q", secret)
	}
	before := strings.Fields(execOut(t, c, sb.ID, "sh", "-c", identityCmd))

	t0 := time.Now()
	res, err := c.LiveFork(ctx, sb.ID, client.LiveForkRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("live fork into 2: %v (checkpoint %d ms, image %d bytes)", time.Since(t0), res.CheckpointMS, res.ImageBytes)
	if res.Source != sb.ID || len(res.Sandboxes) != 2 || res.ImageBytes == 0 {
		t.Fatalf("fork: %+v", res)
	}
	ids := []string{sb.ID, res.Sandboxes[0].ID, res.Sandboxes[1].ID}
	seen := map[string]string{}
	for i, id := range ids {
		if got := execOut(t, c, id, "python3", "-c", fetchSecret); got != secret {
			t.Errorf("%s answered %q, the source %q before the fork", id, got, secret)
		}
		f := strings.Fields(execOut(t, c, id, "sh", "-c", identityCmd))
		if len(f) != 3 || len(f[0]) != 32 {
			t.Fatalf("%s's identity: %v", id, f)
		}
		if i == 0 && (f[0] != before[0] || f[1] != before[1]) {
			t.Errorf("the source's identity changed: %v, before %v", f, before)
		}
		for _, v := range f {
			if other, ok := seen[v]; ok {
				t.Errorf("%s and %s share %q", id, other, v)
			}
			seen[v] = id
		}
	}
	if info, err := c.GetSandbox(ctx, sb.ID); err != nil || info.State != client.StateRunning {
		t.Errorf("the source after the fork: %+v %v", info, err)
	}
	if left, _ := filepath.Glob(state + "/forks/*"); len(left) > 0 {
		t.Errorf("the fork's image was left: %v", left)
	}
	for _, id := range ids {
		if err := c.DeleteSandbox(ctx, id); err != nil {
			t.Error(err)
		}
	}
}

// TestLiveForkRefusedNative: a driver without live_fork is refused with
// its reason, and the sandbox runs on.
func TestLiveForkRefusedNative(t *testing.T) {
	testcap.Require(t, "root", "userns", cgroupCap(), "seccomp", "landlock")
	drv, err := native.New(native.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, drv, envOptions{cfg: supervisor.Config{StateDir: t.TempDir()}})
	c, _ := e.client(store.RoleAgent, store.Quota{}, store.RateLimits{})
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSandbox(ctx, sb.ID)
	_, err = c.LiveFork(ctx, sb.ID, client.LiveForkRequest{})
	apiError(t, err, http.StatusNotImplemented, "unsupported")
	if !strings.Contains(err.Error(), "native") {
		t.Errorf("the refusal does not name the driver: %v", err)
	}
	execOut(t, c, sb.ID, "true")
	if l, _ := c.ListSandboxes(ctx, client.ListOptions{}); len(l) != 1 {
		t.Errorf("%d sandboxes after a refused fork", len(l))
	}
}
