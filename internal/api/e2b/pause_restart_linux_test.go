package e2b_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// pauseServer keeps a random secret only in its memory and serves it on
// 127.0.0.1:8000; pauseFetch reads it.
const (
	pauseServer = `import http.server, os
secret = os.urandom(8).hex()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(secret.encode())
    def log_message(self, *a): pass
http.server.HTTPServer(('127.0.0.1', 8000), H).serve_forever()
`
	pauseFetch = `import urllib.request, time
for i in range(150):
    try:
        print(urllib.request.urlopen('http://127.0.0.1:8000', timeout=5).read().decode()); break
    except OSError:
        time.sleep(0.05)
`
)

// TestPauseRestartGVisor: a gVisor sandbox paused through airlock's own
// API stays paused across a kill -9 of the daemon, and the next daemon
// resumes it: its background server answers with the secret it held in
// memory, and is listed again.
func TestPauseRestartGVisor(t *testing.T) {
	testcap.Require(t, "root", "userns", "cgroupv1", "seccomp", "runsc")
	ctx := context.Background()
	s := newServeState(t, "gvisor")
	d := s.launch(t)
	c, err := client.New(d.url, s.key)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.StartProcess(ctx, sb.ID, client.StartProcessRequest{ExecRequest: client.ExecRequest{Argv: []string{"python3", "-c", pauseServer}}})
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(c *client.Client) string {
		t.Helper()
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"python3", "-c", pauseFetch}, Timeout: 10 * time.Second})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("fetch: %v %+v", err, r)
		}
		return strings.TrimSpace(string(r.Stdout))
	}
	before := fetch(c)
	if len(before) != 16 {
		t.Fatalf("the server answered %q", before)
	}
	if ps, err := c.PauseSandbox(ctx, sb.ID); err != nil || ps.State != client.StatePaused {
		t.Fatalf("pause: %+v %v", ps, err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.done

	d = s.launch(t)
	c, err = client.New(d.url, s.key)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetSandbox(ctx, sb.ID); err != nil || got.State != client.StatePaused || got.Paused == nil || got.Paused.StoredBytes == 0 {
		t.Fatalf("after the restart: %+v %v", got, err)
	}
	if rs, err := c.ResumeSandbox(ctx, sb.ID); err != nil || rs.State != client.StateRunning {
		t.Fatalf("resume: %+v %v", rs, err)
	}
	if after := fetch(c); after != before {
		t.Fatalf("after the resume the server answered %q, before %q", after, before)
	}
	procs, err := c.ListProcesses(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, q := range procs {
		found = found || q.ID == p.ID && q.Running
	}
	if !found {
		t.Errorf("the background server %s is not listed running after the resume: %+v", p.ID, procs)
	}
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}
