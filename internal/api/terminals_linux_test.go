package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/driver/gvisor"
	"github.com/airlock-sandbox/airlock/internal/hostcap"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// gvisorEnv starts the API over the real gVisor driver, or skips (fails
// under AIRLOCK_TEST_REQUIRE) where this host cannot run runsc.
func gvisorEnv(t testing.TB, o envOptions) *testEnv {
	t.Helper()
	cg := "cgroupv1"
	if hostcap.CgroupMode() == "v2" {
		cg = "cgroupv2"
	}
	testcap.Require(t, "root", cg, "runsc")
	drv, err := gvisor.New(gvisor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return startEnv(t, drv, o)
}

// eachDriver runs f against the API over every real agent driver.
func eachDriver(t *testing.T, o envOptions, f func(t *testing.T, e *testEnv)) {
	t.Run("native", func(t *testing.T) { f(t, nativeEnv(t, o)) })
	t.Run("gvisor", func(t *testing.T) { f(t, gvisorEnv(t, o)) })
}

// agentKey makes an agent key with generous limits, and returns a client
// that uses it and the secret.
func (e *testEnv) agentKey() (*client.Client, string) {
	e.t.Helper()
	_, sec, err := e.st.NewKey(e.t.Name(), store.RoleAgent, store.Quota{MaxSandboxes: 64}, store.RateLimits{CreatesPerSecond: 1000, CreateBurst: 1000, ExecsPerSecond: 10000, ExecBurst: 10000}, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := client.New(e.url, string(sec))
	if err != nil {
		e.t.Fatal(err)
	}
	return c, string(sec)
}

// apiTerm is a process on a terminal, driven through the API as a person
// at a terminal would: keys go in by WriteStdin, the screen comes from
// its events.
type apiTerm struct {
	t       *testing.T
	c       *client.Client
	sb, pid string

	mu     sync.Mutex
	screen []byte
	seen   int
	result chan *client.Result
}

// startAPITerm runs events (an exec or a follow stream) in the background
// and returns once the start event named the process.
func startAPITerm(t *testing.T, c *client.Client, sb string, events iter.Seq2[client.Event, error]) *apiTerm {
	t.Helper()
	tm := &apiTerm{t: t, c: c, sb: sb, result: make(chan *client.Result, 1)}
	started := make(chan string, 1)
	go func() {
		defer close(tm.result)
		for ev, err := range events {
			if err != nil {
				t.Errorf("terminal stream: %v", err)
				return
			}
			switch ev.Type {
			case "start":
				if ev.PTY == nil {
					t.Errorf("the start event of a process on a terminal has no pty: %+v", ev)
				}
				started <- ev.ID
			case "pty":
				tm.mu.Lock()
				tm.screen = append(tm.screen, ev.Data...)
				tm.mu.Unlock()
			case "result":
				tm.result <- ev.Result
				return
			default:
				t.Errorf("a process on a terminal sent an event of type %q", ev.Type)
			}
		}
	}()
	select {
	case tm.pid = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no start event within 30 s")
	}
	return tm
}

func (tm *apiTerm) typeIn(s string) {
	tm.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tm.c.WriteStdin(ctx, tm.sb, tm.pid, []byte(s), false); err != nil {
		tm.t.Fatalf("type %q: %v", s, err)
	}
}

func (tm *apiTerm) expect(want string) {
	tm.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		tm.mu.Lock()
		screen := string(tm.screen)
		tm.mu.Unlock()
		if i := strings.Index(screen[tm.seen:], want); i >= 0 {
			tm.seen += i + len(want)
			return
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("the terminal did not show %q within 20 s; it showed %q", want, screen[tm.seen:])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (tm *apiTerm) command(line string) {
	tm.t.Helper()
	tm.expect("pty$ ")
	tm.typeIn(line + "\n")
}

func (tm *apiTerm) wait() *client.Result {
	tm.t.Helper()
	select {
	case r := <-tm.result:
		if r == nil {
			tm.t.Fatal("the terminal's stream ended without a result")
		}
		return r
	case <-time.After(20 * time.Second):
		tm.t.Fatal("no result within 20 s")
	}
	return nil
}

var termSize = &client.TermSize{Rows: 24, Cols: 80}

// TestTerminalAPI drives interactive programs on terminals through the
// API, on every driver: the E2B way (start on a pty, type, resize,
// follow) and the exec stream's way.
func TestTerminalAPI(t *testing.T) {
	eachDriver(t, envOptions{}, func(t *testing.T, e *testEnv) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		c, _ := e.agentKey()
		sb, err := c.CreateSandbox(ctx, client.CreateRequest{TTL: 2 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer c.DeleteSandbox(context.Background(), sb.ID)

		t.Run("python repl on an exec stream", func(t *testing.T) {
			tm := startAPITerm(t, c, sb.ID, c.ExecEvents(ctx, sb.ID, client.ExecRequest{Argv: []string{"python3", "-i", "-q"}, PTY: termSize}))
			tm.expect(">>> ")
			tm.typeIn("1+1\n")
			tm.expect("1+1\r\n2\r\n>>> ")
			tm.typeIn("exit(3)\n")
			if r := tm.wait(); r.ExitCode != 3 || r.Reason != "exit" {
				t.Errorf("exit(3): %+v", r)
			}
		})

		t.Run("shell on a started process", func(t *testing.T) {
			p, err := c.StartProcess(ctx, sb.ID, client.StartProcessRequest{ExecRequest: client.ExecRequest{Argv: []string{"sh", "-i"}, Env: map[string]string{"PS1": "pty$ "}, PTY: termSize}})
			if err != nil {
				t.Fatal(err)
			}
			if p.PTY == nil || *p.PTY != *termSize || !p.Background {
				t.Fatalf("started: %+v", p)
			}
			tm := startAPITerm(t, c, sb.ID, c.FollowProcess(ctx, sb.ID, p.ID, client.Offsets{}))
			tm.command("stty size")
			tm.expect("\n24 80\r\n")
			if err := c.Resize(ctx, sb.ID, p.ID, client.TermSize{Rows: 50, Cols: 160}); err != nil {
				t.Fatal(err)
			}
			tm.command("stty size")
			tm.expect("\n50 160\r\n")
			if ps, _ := c.ListProcesses(ctx, sb.ID); len(ps) == 0 || ps[len(ps)-1].PTY == nil || *ps[len(ps)-1].PTY != (client.TermSize{Rows: 50, Cols: 160}) {
				t.Errorf("the list does not show the new size: %+v", ps)
			}
			err = c.Resize(ctx, sb.ID, p.ID, client.TermSize{Rows: 0, Cols: 10})
			apiError(t, err, 400, "invalid")

			tm.command("sleep 30")
			tm.expect("sleep 30\r\n")
			time.Sleep(300 * time.Millisecond)
			start := time.Now()
			tm.typeIn("\x03")
			tm.command("echo alive-$((40+2))")
			tm.expect("alive-42\r\n")
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("Ctrl-C took %v to end sleep", d)
			}
			tm.command("exit 7")
			if r := tm.wait(); r.ExitCode != 7 || r.Reason != "exit" {
				t.Errorf("exit 7: %+v", r)
			}
			err = c.Resize(ctx, sb.ID, p.ID, client.TermSize{Rows: 10, Cols: 10})
			apiError(t, err, 409, "not_running")
		})

		t.Run("resize without a terminal", func(t *testing.T) {
			p, err := c.StartProcess(ctx, sb.ID, client.StartProcessRequest{ExecRequest: client.ExecRequest{Argv: []string{"sleep", "10"}}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Signal(ctx, sb.ID, p.ID, "KILL")
			err = c.Resize(ctx, sb.ID, p.ID, client.TermSize{Rows: 10, Cols: 10})
			if ae := apiError(t, err, 400, "invalid"); !strings.Contains(ae.Message, "no terminal") {
				t.Errorf("message: %q", ae.Message)
			}
		})

		t.Run("flood hits the output limit", func(t *testing.T) {
			var n int
			res, err := c.ExecStream(ctx, sb.ID, client.ExecRequest{Argv: []string{"yes", "flood"}, PTY: termSize}, func(ev client.Event) error {
				if ev.Type != "pty" {
					t.Errorf("event of type %q from a terminal", ev.Type)
				}
				n += len(ev.Data)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Reason != "output_limit" || !res.StdoutTruncated || n != 1<<20 {
				t.Errorf("yes on a terminal: %d bytes, %+v", n, res)
			}
		})
	})
}

// jsonEvent is an event as the wire carries it.
type jsonEvent struct {
	Type       string          `json:"type"`
	ID         string          `json:"id"`
	Data       string          `json:"data"`
	DataBase64 string          `json:"data_base64"`
	Offset     *int64          `json:"offset"`
	Missed     int64           `json:"missed"`
	Result     *client.Result  `json:"result"`
	Error      json.RawMessage `json:"error"`
}

// follower reads one stream of events and checks each output chunk
// against the stream the process prints.
type follower struct {
	name     string
	want     []byte // the whole stdout the process prints
	next     int64  // the offset the next chunk must start at (plus missed)
	got      int64  // bytes received
	missed   int64  // bytes the daemon said were dropped
	result   *client.Result
	finished time.Time
	err      error
}

func (f *follower) event(ev jsonEvent) error {
	switch ev.Type {
	case "start", "keepalive":
		return nil
	case "result":
		f.result = ev.Result
		return nil
	case "stdout":
	default:
		return fmt.Errorf("%s: unexpected event %+v", f.name, ev)
	}
	if ev.Offset == nil || ev.DataBase64 != "" {
		return fmt.Errorf("%s: an output event without an offset, or not text: %+v", f.name, ev)
	}
	if *ev.Offset != f.next+ev.Missed {
		return fmt.Errorf("%s: a chunk at %d after %d bytes missed, but the last one ended at %d", f.name, *ev.Offset, ev.Missed, f.next)
	}
	end := *ev.Offset + int64(len(ev.Data))
	if end > int64(len(f.want)) || ev.Data != string(f.want[*ev.Offset:end]) {
		return fmt.Errorf("%s: the chunk at %d (%d bytes) is not what the process printed there", f.name, *ev.Offset, len(ev.Data))
	}
	f.missed += ev.Missed
	f.got += int64(len(ev.Data))
	f.next = end
	return nil
}

// follow reads the events of GET …/output from offset, pausing as told.
func (e *testEnv) follow(ctx context.Context, f *follower, key, sb, pid string, offset int64, pause func(n int) time.Duration) {
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/sandboxes/%s/processes/%s/output?stdout_offset=%d", e.url, sb, pid, offset), nil)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.err = err
		return
	}
	defer resp.Body.Close()
	f.next = offset
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 0; sc.Scan(); n++ {
		var ev jsonEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			f.err = err
			return
		}
		if f.err = f.event(ev); f.err != nil || f.result != nil {
			f.finished = time.Now()
			return
		}
		if d := pause(n); d > 0 {
			time.Sleep(d)
		}
	}
	f.err = fmt.Errorf("%s: the stream ended without a result: %w", f.name, sc.Err())
}

// numbered is what the followed process prints: lines of their numbers.
func numbered(lines int) []byte {
	var b bytes.Buffer
	for i := range lines {
		fmt.Fprintf(&b, "%09d\n", i)
	}
	return b.Bytes()
}

// TestFollowers follows one process with two callers from different
// offsets, one of which stops reading until the process has ended: both
// see exactly what the process printed, apart from the gaps they are told
// of, and the stalled one never held the process up.
func TestFollowers(t *testing.T) {
	const lines = 1_600_000 // 16 MB: more than the ring and every socket buffer
	cfg := supervisor.Config{Templates: []supervisor.Template{{Name: "default", OutputLimit: 32 << 20, OutputBuffer: 256 << 10}}}
	eachDriver(t, envOptions{cfg: cfg}, func(t *testing.T, e *testEnv) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		c, key := e.agentKey()
		sb, err := c.CreateSandbox(ctx, client.CreateRequest{TTL: 2 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer c.DeleteSandbox(context.Background(), sb.ID)
		want := numbered(lines)
		// It waits for a go-ahead, so that both followers are there from
		// the start.
		prog := fmt.Sprintf("import sys\nsys.stdin.readline()\nw = sys.stdout.write\nfor i in range(%d): w('%%09d\\n' %% i)\n", lines)
		p, err := c.StartProcess(ctx, sb.ID, client.StartProcessRequest{ExecRequest: client.ExecRequest{Code: prog, Language: "python"}, KeepStdinOpen: true})
		if err != nil {
			t.Fatal(err)
		}
		fast := &follower{name: "the fast follower", want: want}
		slow := &follower{name: "the stalled follower", want: want}
		ended := make(chan time.Time, 1)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			e.follow(ctx, fast, key, sb.ID, p.ID, 0, func(int) time.Duration { return 0 })
		}()
		go func() {
			defer wg.Done()
			// It reads one event, then nothing until the process has ended.
			e.follow(ctx, slow, key, sb.ID, p.ID, 1000, func(n int) time.Duration {
				if n == 0 {
					select {
					case at := <-ended:
						ended <- at
					case <-ctx.Done():
					}
				}
				return 0
			})
		}()
		time.Sleep(500 * time.Millisecond) // both attach
		if err := c.WriteStdin(ctx, sb.ID, p.ID, []byte("go\n"), true); err != nil {
			t.Fatal(err)
		}
		w, err := c.WaitProcess(ctx, sb.ID, p.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		ended <- time.Now()
		wg.Wait()
		if w.Result == nil || w.Result.ExitCode != 0 || w.Result.Reason != "exit" {
			t.Fatalf("the process: %+v", w.Result)
		}
		// The wait's tail is the end of the output, at its offset.
		if tail := want[w.StdoutOffset:]; !bytes.Equal(w.Stdout, tail) || len(tail) != 256<<10 {
			t.Errorf("wait returned %d bytes from %d; want the last 256 KiB", len(w.Stdout), w.StdoutOffset)
		}
		for _, f := range []*follower{fast, slow} {
			if f.err != nil {
				t.Fatal(f.err)
			}
			if f.result == nil || f.result.ExitCode != 0 || f.next != int64(len(want)) {
				t.Errorf("%s ended at %d of %d with %+v", f.name, f.next, len(want), f.result)
			}
			t.Logf("%s: %d bytes received, %d missed", f.name, f.got, f.missed)
		}
		if fast.got+fast.missed != int64(len(want)) || slow.got+slow.missed != int64(len(want))-1000 {
			t.Errorf("received and missed bytes do not add up: fast %d+%d, stalled %d+%d of %d", fast.got, fast.missed, slow.got, slow.missed, len(want))
		}
		if slow.missed == 0 {
			t.Errorf("the stalled follower missed nothing of 16 MB printed while it read nothing: did it hold up the process?")
		}
		if wall := time.Duration(w.Result.Usage.WallMS) * time.Millisecond; wall > 60*time.Second {
			t.Errorf("the process took %v", wall)
		}
	})
}

// TestReattach drops an exec stream's connection mid-way and comes back
// by the id of its first event: the rest of the output comes from where
// the first stream stopped, none missing, then the result.
func TestReattach(t *testing.T) {
	eachDriver(t, envOptions{}, func(t *testing.T, e *testEnv) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c, key := e.agentKey()
		sb, err := c.CreateSandbox(ctx, client.CreateRequest{TTL: 2 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer c.DeleteSandbox(context.Background(), sb.ID)
		script := "for i in $(seq 1 30); do echo line$i; sleep 0.05; done; exit 4"
		var want strings.Builder
		for i := 1; i <= 30; i++ {
			fmt.Fprintf(&want, "line%d\n", i)
		}

		// A raw stream, dropped after a few lines.
		sctx, drop := context.WithCancel(ctx)
		req, _ := http.NewRequestWithContext(sctx, "POST", e.url+"/v1/sandboxes/"+sb.ID+"/exec", strings.NewReader(fmt.Sprintf(`{"argv":["sh","-c",%q]}`, script)))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Accept", "application/x-ndjson")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		var pid string
		var got []byte
		for sc.Scan() {
			var ev jsonEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Type == "start" {
				pid = ev.ID
				continue
			}
			got = append(got, ev.Data...)
			if strings.Count(string(got), "\n") >= 3 {
				break
			}
		}
		drop()
		resp.Body.Close()
		if pid == "" {
			t.Fatal("the exec stream's first event carried no id")
		}
		time.Sleep(600 * time.Millisecond) // it prints on meanwhile

		f := &follower{name: "the returning caller", want: []byte(want.String())}
		e.follow(ctx, f, key, sb.ID, pid, int64(len(got)), func(int) time.Duration { return 0 })
		if f.err != nil {
			t.Fatal(f.err)
		}
		if f.missed != 0 || f.next != int64(want.Len()) || f.result == nil || f.result.ExitCode != 4 {
			t.Errorf("came back at %d: missed %d, ended at %d of %d, result %+v", len(got), f.missed, f.next, want.Len(), f.result)
		}

		// Through the SDK: a stream that breaks leaves the command running
		// and says by which id to come back; ending ctx kills it.
		bc, err := client.New(e.url, key, client.WithHTTPClient(&http.Client{Transport: breakAfter{n: 300}}))
		if err != nil {
			t.Fatal(err)
		}
		var spid string
		var serr error
		for ev, err := range bc.ExecEvents(ctx, sb.ID, client.ExecRequest{Argv: []string{"sh", "-c", script}}) {
			if err != nil {
				serr = err
				break
			}
			if ev.Type == "start" {
				spid = ev.ID
			}
		}
		if !errors.Is(serr, client.ErrStreamBroken) || spid == "" || !strings.Contains(serr.Error(), spid) {
			t.Fatalf("a broken stream: %v (id %q)", serr, spid)
		}
		var tail []byte
		var res *client.Result
		for ev, err := range c.FollowProcess(ctx, sb.ID, spid, client.Offsets{}) {
			if err != nil {
				t.Fatal(err)
			}
			tail = append(tail, ev.Data...)
			res = ev.Result
		}
		if string(tail) != want.String() || res == nil || res.ExitCode != 4 {
			t.Errorf("after a broken stream the command printed %q and ended %+v", tail, res)
		}

		kctx, kcancel := context.WithCancel(ctx)
		var kpid string
		for ev, err := range c.ExecEvents(kctx, sb.ID, client.ExecRequest{Argv: []string{"sh", "-c", script}}) {
			if err != nil {
				break
			}
			if ev.Type == "start" {
				kpid = ev.ID
				kcancel()
			}
		}
		kcancel()
		w, err := c.WaitProcess(ctx, sb.ID, kpid, 10*time.Second)
		if err != nil || w.Running || w.Result.Reason != "killed" {
			t.Errorf("an exec whose caller ended its context: %+v, %v", w, err)
		}
	})
}

// breakAfter is a transport whose response bodies fail after n bytes, as
// a dropped connection does.
type breakAfter struct{ n int }

func (b breakAfter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || r.Method != "POST" {
		return resp, err
	}
	resp.Body = &brokenBody{ReadCloser: resp.Body, left: b.n}
	return resp, nil
}

type brokenBody struct {
	io.ReadCloser
	left int
}

func (b *brokenBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errors.New("connection reset (test)")
	}
	n, err := b.ReadCloser.Read(p[:min(len(p), b.left)])
	b.left -= n
	return n, err
}

// BenchmarkTerminalEcho: a key typed into a program on a terminal (POST
// …/stdin) until the program's answer comes back on a follower's stream,
// what a person at `airlock sandbox exec -t` waits for at every key. The
// program is cat on a raw terminal: it writes back each byte it reads.
func BenchmarkTerminalEcho(b *testing.B) {
	_, c := benchEnv(b, envOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.DeleteSandbox(context.Background(), sb.ID)
	p, err := c.StartProcess(ctx, sb.ID, client.StartProcessRequest{ExecRequest: client.ExecRequest{Argv: []string{"sh", "-c", "stty raw -echo && echo ready && exec cat"}, PTY: termSize}})
	if err != nil {
		b.Fatal(err)
	}
	echoed := make(chan int, 1024)
	go func() {
		ready := false
		for ev, err := range c.FollowProcess(ctx, sb.ID, p.ID, client.Offsets{}) {
			if err != nil {
				return
			}
			switch {
			case !ready && strings.Contains(string(ev.Data), "ready"):
				ready = true
				echoed <- 0
			case ready && len(ev.Data) > 0:
				echoed <- len(ev.Data)
			}
		}
	}()
	select {
	case <-echoed:
	case <-time.After(20 * time.Second):
		b.Fatal("the terminal did not get ready")
	}
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := c.WriteStdin(ctx, sb.ID, p.ID, []byte("x"), false); err != nil {
			b.Fatal(err)
		}
		select {
		case <-echoed:
		case <-time.After(10 * time.Second):
			b.Fatal("no echo within 10 s")
		}
		ds = append(ds, time.Since(start))
	}
	b.StopTimer()
	reportLatencies(b, ds)
}
