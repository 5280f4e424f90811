package api

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/driver/native"
	"github.com/airlock-sandbox/airlock/internal/hostcap"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// nativeEnv starts the API over the real native driver, or skips (fails
// under AIRLOCK_TEST_REQUIRE) where this host cannot run its sandboxes.
func nativeEnv(t testing.TB, o envOptions) *testEnv {
	t.Helper()
	cg := "cgroupv1"
	if hostcap.CgroupMode() == "v2" {
		cg = "cgroupv2"
	}
	testcap.Require(t, "root", "userns", cg, "seccomp", "landlock")
	drv, err := native.New(native.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return startEnv(t, drv, o)
}

// TestSandboxRoutes drives every sandbox route through the SDK against
// real sandboxes.
func TestSandboxRoutes(t *testing.T) {
	e := nativeEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := e.agent()

	sb, err := c.CreateSandbox(ctx, client.CreateRequest{Limits: client.Limits{MemoryBytes: 128 << 20}, Env: map[string]string{"FOO": "bar"}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != client.StateRunning || sb.Limits.MemoryBytes != 128<<20 || len(sb.Layers) == 0 || time.Until(sb.ExpiresAt) > time.Minute {
		t.Fatalf("created %+v", sb)
	}
	t.Run("get and list", func(t *testing.T) {
		got, err := c.GetSandbox(ctx, sb.ID)
		if err != nil || got.ID != sb.ID || got.State != client.StateRunning {
			t.Fatalf("get: %+v, %v", got, err)
		}
		l, err := c.ListSandboxes(ctx, client.ListOptions{State: client.StateRunning, Template: "default"})
		if err != nil || len(l) != 1 || l[0].ID != sb.ID {
			t.Fatalf("list: %+v, %v", l, err)
		}
		if l, _ := c.ListSandboxes(ctx, client.ListOptions{Template: "other"}); len(l) != 0 {
			t.Fatalf("template filter: %+v", l)
		}
	})
	t.Run("exec", func(t *testing.T) {
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"sh", "-c", "echo $FOO $BAZ; echo err >&2; exit 3"}, Env: map[string]string{"BAZ": "qux"}})
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Stdout) != "bar qux\n" || string(r.Stderr) != "err\n" || r.ExitCode != 3 || r.Reason != "exit" {
			t.Fatalf("exec: %q %q %+v", r.Stdout, r.Stderr, r.Result)
		}
		r, err = c.Exec(ctx, sb.ID, client.ExecRequest{Code: "import sys; print(6*7); print(sys.stdin.read())", Language: "python", Stdin: []byte("from stdin")})
		if err != nil || string(r.Stdout) != "42\nfrom stdin\n" {
			t.Fatalf("python: %q %q %+v %v", r.Stdout, r.Stderr, r, err)
		}
		r, err = c.Exec(ctx, sb.ID, client.ExecRequest{Code: "printf '\\377\\000x'", Language: "bash", Cwd: "/tmp"})
		if err != nil || !bytes.Equal(r.Stdout, []byte{0xff, 0, 'x'}) {
			t.Fatalf("binary output: %q, %v", r.Stdout, err)
		}
		r, err = c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"sleep", "5"}, Timeout: 200 * time.Millisecond})
		if err != nil || r.Reason != "timeout" {
			t.Fatalf("timeout: %+v, %v", r, err)
		}
		r, err = c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"no-such-command"}})
		if err != nil || r.ExitCode != 127 {
			t.Fatalf("missing command: %+v, %v", r, err)
		}
	})
	t.Run("exec stream", func(t *testing.T) {
		type stamped struct {
			ev client.Event
			at time.Time
		}
		var evs []stamped
		start := time.Now()
		res, err := c.ExecStream(ctx, sb.ID, client.ExecRequest{Argv: []string{"sh", "-c", "echo a; sleep 0.3; echo b >&2"}}, func(ev client.Event) error {
			evs = append(evs, stamped{ev, time.Now()})
			return nil
		})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("stream: %+v, %v", res, err)
		}
		if len(evs) != 2 || evs[0].ev.Type != "stdout" || string(evs[0].ev.Data) != "a\n" || evs[1].ev.Type != "stderr" || string(evs[1].ev.Data) != "b\n" {
			t.Fatalf("events: %+v", evs)
		}
		// The first line arrived while the command still slept: streamed,
		// not buffered to the end.
		if gap := time.Since(evs[0].at); gap < 200*time.Millisecond {
			t.Errorf("output was not streamed: the first event came %v before the result (%v after the start)", gap, evs[0].at.Sub(start))
		}
		st, h, body := e.raw("POST", "/v1/sandboxes/"+sb.ID+"/exec", "", nil, nil)
		_ = h
		if st != 401 {
			t.Fatalf("stream without key: %d %s", st, body)
		}
	})
	t.Run("exec SSE", func(t *testing.T) {
		_, sec, _ := e.st.NewKey("sse", "agent", storeQuota(), storeRate(), time.Now())
		// The sandbox belongs to another key: first check that, then use an
		// operator's key.
		st, _, _ := e.raw("POST", "/v1/sandboxes/"+sb.ID+"/exec", string(sec), strings.NewReader(`{"argv":["true"]}`), map[string]string{"Accept": "text/event-stream"})
		if st != 403 {
			t.Fatalf("SSE exec with another key's sandbox: %d", st)
		}
		_, op, _ := e.st.NewKey("op", "operator", storeQuota(), storeRate(), time.Now())
		st, h, body := e.raw("POST", "/v1/sandboxes/"+sb.ID+"/exec", string(op), strings.NewReader(`{"argv":["echo","hi"]}`), map[string]string{"Accept": "text/event-stream"})
		if st != 200 || h.Get("Content-Type") != "text/event-stream" || !strings.HasPrefix(string(body), "event: start\ndata: {\"type\":\"start\",\"id\":\"e") ||
			!strings.Contains(string(body), "event: stdout\ndata: {\"type\":\"stdout\",\"data\":\"hi\\n\",\"offset\":0}\n\n") || !strings.Contains(string(body), "event: result\n") {
			t.Fatalf("SSE: %d %q", st, body)
		}
	})
	t.Run("processes", func(t *testing.T) {
		p, err := c.StartProcess(ctx, sb.ID, client.StartProcessRequest{ExecRequest: client.ExecRequest{Argv: []string{"cat"}, Stdin: []byte("hello ")}, KeepStdinOpen: true})
		if err != nil || !p.Running {
			t.Fatalf("start: %+v, %v", p, err)
		}
		if err := c.WriteStdin(ctx, sb.ID, p.ID, []byte("world"), true); err != nil {
			t.Fatal(err)
		}
		w, err := c.WaitProcess(ctx, sb.ID, p.ID, 10*time.Second)
		if err != nil || w.Running || w.Result == nil || w.Result.ExitCode != 0 || string(w.Stdout) != "hello world" {
			t.Fatalf("wait: %+v %q, %v", w, w.Stdout, err)
		}
		s, err := c.StartProcess(ctx, sb.ID, client.StartProcessRequest{ExecRequest: client.ExecRequest{Argv: []string{"sleep", "60"}}})
		if err != nil {
			t.Fatal(err)
		}
		w, err = c.WaitProcess(ctx, sb.ID, s.ID, 100*time.Millisecond)
		if err != nil || !w.Running {
			t.Fatalf("wait with a timeout on a running process: %+v, %v", w, err)
		}
		// The list holds every process, the execs before them included.
		ps, err := c.ListProcesses(ctx, sb.ID)
		if err != nil || len(ps) < 2 {
			t.Fatalf("list: %+v, %v", ps, err)
		}
		if last, prev := ps[len(ps)-1], ps[len(ps)-2]; last.ID != s.ID || !last.Running || !last.Background || prev.ID != p.ID || prev.Running {
			t.Fatalf("list: %+v", ps)
		}
		if ps[0].Background || ps[0].Running {
			t.Fatalf("the first exec is listed as %+v", ps[0])
		}
		if err := c.Signal(ctx, sb.ID, s.ID, "TERM"); err != nil {
			t.Fatal(err)
		}
		w, err = c.WaitProcess(ctx, sb.ID, s.ID, 10*time.Second)
		if err != nil || w.Running || w.Result.Signal != "SIGTERM" {
			t.Fatalf("signalled: %+v, %v", w, err)
		}
		_, err = c.WaitProcess(ctx, sb.ID, "e999", 0)
		apiError(t, err, 404, "not_found")
	})
	t.Run("files", func(t *testing.T) {
		if err := c.WriteFile(ctx, sb.ID, "/workspace/a.txt", strings.NewReader("hi there"), 0o600); err != nil {
			t.Fatal(err)
		}
		if b, err := c.ReadFile(ctx, sb.ID, "a.txt"); err != nil || string(b) != "hi there" {
			t.Fatalf("read: %q, %v", b, err)
		}
		fi, err := c.Stat(ctx, sb.ID, "/workspace/a.txt")
		if err != nil || fi.Size != 8 || fi.Mode.Perm() != 0o600 || fi.Type != "file" {
			t.Fatalf("stat: %+v, %v", fi, err)
		}
		if err := c.Mkdir(ctx, sb.ID, "/workspace/d/e", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := c.Move(ctx, sb.ID, "/workspace/a.txt", "/workspace/d/b.txt"); err != nil {
			t.Fatal(err)
		}
		ents, err := c.ListFiles(ctx, sb.ID, "/workspace/d")
		if err != nil || len(ents) != 2 {
			t.Fatalf("list: %+v, %v", ents, err)
		}
		_, err = c.ReadFile(ctx, sb.ID, "/workspace/d")
		apiError(t, err, 400, "is_directory")
		_, err = c.ReadFile(ctx, sb.ID, "/workspace/../../etc/shadow")
		apiError(t, err, 400, "path_outside")
		if err := c.Remove(ctx, sb.ID, "/workspace/d"); err != nil {
			t.Fatal(err)
		}
		_, err = c.Stat(ctx, sb.ID, "/workspace/d")
		if !client.IsNotFound(err) {
			t.Fatalf("stat after remove: %v", err)
		}
		// Symlinks lead nowhere outside the sandbox.
		if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"ln", "-s", "/proc/1/root/etc/hostname", "/workspace/esc"}}); err != nil {
			t.Fatal(err)
		}
		if b, err := c.ReadFile(ctx, sb.ID, "/workspace/esc"); err == nil && strings.Contains(string(b), hostname(t)) && hostname(t) != "sandbox" {
			t.Fatalf("a symlink read the host's hostname: %q", b)
		}
	})
	t.Run("archive", func(t *testing.T) {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(&tar.Header{Name: "src/", Typeflag: tar.TypeDir, Mode: 0o755})
		tw.WriteHeader(&tar.Header{Name: "src/main.py", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 12})
		tw.Write([]byte("print('hi')\n"))
		tw.WriteHeader(&tar.Header{Name: "src/link", Typeflag: tar.TypeSymlink, Linkname: "main.py"})
		tw.Close()
		res, err := c.UploadArchive(ctx, sb.ID, "/workspace/proj", &buf)
		if err != nil || res.Entries != 3 || res.Bytes != 12 {
			t.Fatalf("upload: %+v, %v", res, err)
		}
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"sh", "-c", "python3 /workspace/proj/src/link; stat -c %a /workspace/proj/src/main.py"}})
		if err != nil || string(r.Stdout) != "hi\n755\n" {
			t.Fatalf("extracted tree: %q %q, %v", r.Stdout, r.Stderr, err)
		}
		var out bytes.Buffer
		if err := c.DownloadArchive(ctx, sb.ID, "/workspace/proj", &out); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		tr := tar.NewReader(&out)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(tr)
			got[h.Name] = string(h.Typeflag) + ":" + string(b) + h.Linkname
		}
		want := map[string]string{"./": "5:", "src/": "5:", "src/main.py": "0:print('hi')\n", "src/link": "2:main.py"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("downloaded %v, want %v", got, want)
		}
		for name, hdr := range map[string]*tar.Header{
			"traversal": {Name: "../evil", Typeflag: tar.TypeReg},
			"absolute":  {Name: "/etc/evil", Typeflag: tar.TypeReg},
			"link out":  {Name: "x", Typeflag: tar.TypeSymlink, Linkname: "../../etc"},
			"device":    {Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3},
		} {
			var b bytes.Buffer
			tw := tar.NewWriter(&b)
			tw.WriteHeader(hdr)
			tw.Close()
			_, err := c.UploadArchive(ctx, sb.ID, "", &b)
			apiError(t, err, 400, "archive_refused")
			_ = name
		}
		_, err = c.UploadArchive(ctx, sb.ID, "", strings.NewReader("not a tar archive, clearly not one at all"))
		apiError(t, err, 400, "bad_archive")
	})
	t.Run("timeout", func(t *testing.T) {
		got, err := c.SetTimeout(ctx, sb.ID, 10*time.Minute)
		if err != nil || time.Until(got.ExpiresAt) < 9*time.Minute {
			t.Fatalf("extend: %+v, %v", got, err)
		}
	})
	t.Run("delete", func(t *testing.T) {
		if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		got, err := c.GetSandbox(ctx, sb.ID)
		if err != nil || got.State != client.StateDestroyed || got.EndReason != "deleted" {
			t.Fatalf("after delete: %+v, %v", got, err)
		}
		_, err = c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"true"}})
		apiError(t, err, 409, "not_running")
		if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Fatalf("second delete: %v", err)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		_, _, body := e.raw("GET", "/metrics", "", nil, nil)
		for _, want := range []string{`airlock_sandbox_creates_total{result="ok",template="default"} 1`, "airlock_exec_duration_seconds_count", `airlock_sandbox_kills_total{reason="deleted"} 1`, `airlock_sandboxes_live{driver="native"} 0`} {
			if !strings.Contains(string(body), want) {
				t.Errorf("metrics lack %q", want)
			}
		}
	})
}

func hostname(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func storeQuota() store.Quota     { return store.Quota{} }
func storeRate() store.RateLimits { return store.RateLimits{} }

// TestConcurrentExecs runs 200 execs at once across 20 sandboxes; each
// prints a token of its own on both streams, and every result must carry
// exactly its own tokens.
func TestConcurrentExecs(t *testing.T) {
	e := nativeEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	defer cancel()
	c := e.agent()
	const nSandboxes, perSandbox = 20, 10
	ids := make([]string, nSandboxes)
	var wg sync.WaitGroup
	errs := make(chan error, nSandboxes*perSandbox)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := c.CreateSandbox(ctx, client.CreateRequest{Limits: client.Limits{MemoryBytes: 64 << 20, DiskBytes: 16 << 20, TmpBytes: 16 << 20}})
			if err != nil {
				errs <- err
				return
			}
			ids[i] = sb.ID
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	start := time.Now()
	for i, id := range ids {
		for j := 0; j < perSandbox; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tok := fmt.Sprintf("tok-%s-%d-%d", id, i, j)
				r, err := c.Exec(ctx, id, client.ExecRequest{Argv: []string{"sh", "-c", `echo "$0"; echo "$0-err" >&2`, tok}})
				if err != nil {
					errs <- fmt.Errorf("%s: %w", tok, err)
					return
				}
				if string(r.Stdout) != tok+"\n" || string(r.Stderr) != tok+"-err\n" || r.ExitCode != 0 {
					errs <- fmt.Errorf("%s: got stdout %q stderr %q result %+v", tok, r.Stdout, r.Stderr, r.Result)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		n++
		if n <= 5 {
			t.Error(err)
		}
	}
	if n > 0 {
		t.Fatalf("%d of %d execs failed", n, nSandboxes*perSandbox)
	}
	t.Logf("%d execs across %d sandboxes in %v", nSandboxes*perSandbox, nSandboxes, time.Since(start))
}
