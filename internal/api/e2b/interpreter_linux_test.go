package e2b

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/native"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// execLine is one NDJSON line of /execute, as the SDKs read it.
type execLine struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	Name      string `json:"name"`
	Value     string `json:"value"`
	Count     int    `json:"execution_count"`
	PNG       string `json:"png"`
	MainFlag  bool   `json:"is_main_result"`
	Traceback string `json:"traceback"`
}

// execute runs code in the sandbox's interpreter and returns its lines.
func (e *env) execute(ctx context.Context, sb sandboxJSON, body string) ([]execLine, int) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", e.url+"/execute", strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", interpreterPort)
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0
		}
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	var lines []execLine
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var l execLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			e.t.Fatalf("/execute sent a line that is not JSON: %q", sc.Text())
		}
		lines = append(lines, l)
	}
	return lines, res.StatusCode
}

func find(lines []execLine, typ string) *execLine {
	for i := range lines {
		if lines[i].Type == typ {
			return &lines[i]
		}
	}
	return nil
}

// TestInterpreter runs a real kernel in a native sandbox, in process:
// runs and their state, an interrupt by a caller who leaves and by the
// time limit, contexts, and output a hostile cell forges into the
// bridge's stream.
func TestInterpreter(t *testing.T) {
	testcap.Require(t, "root", "userns", "cgroupv1", "seccomp", "landlock", "jupyter")
	drv, err := native.New(native.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := supervisor.Config{Templates: []supervisor.Template{{Name: "default", Timeout: supervisor.Duration(4 * time.Second)}}}
	e := newEnvWith(t, drv, cfg, func(o *Options) {
		o.Config.Interpreter = []string{"base"} // the kernel starts with the sandbox
	})
	sb := e.create(e.key, `{"templateID":"base"}`)
	ctx := context.Background()

	lines, st := e.execute(ctx, sb, `{"code":"x = 41\nx + 1"}`)
	if st != 200 || find(lines, "result") == nil || find(lines, "result").Text != "42" || !find(lines, "result").MainFlag ||
		find(lines, "number_of_executions") == nil || lines[len(lines)-1].Type != "end_of_execution" {
		t.Fatalf("x + 1: %d %+v", st, lines)
	}

	// A caller who leaves interrupts the run; the kernel keeps its state.
	cctx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
	e.execute(cctx, sb, `{"code":"import time\ntime.sleep(30)"}`)
	cancel()
	start := time.Now()
	lines, _ = e.execute(ctx, sb, `{"code":"x"}`)
	if r := find(lines, "result"); r == nil || r.Text != "41" || time.Since(start) > 8*time.Second {
		t.Fatalf("after an abandoned run (%s): %+v", time.Since(start), lines)
	}

	// The sandbox's time limit (4 s) interrupts a run too.
	start = time.Now()
	lines, _ = e.execute(ctx, sb, `{"code":"import time\ntime.sleep(30)"}`)
	if er := find(lines, "error"); er == nil || er.Name != "KeyboardInterrupt" || time.Since(start) > 10*time.Second {
		t.Fatalf("a run past the time limit (%s): %+v", time.Since(start), lines)
	}

	// What a cell writes into the bridge's own output is data: forged
	// lines of another run, broken JSON and a long line change nothing.
	// (Where the host's Yama setting keeps a process from its parent's
	// descriptors, the cell cannot even open it; either way the run ends
	// as it should.)
	forge := strings.Join([]string{
		"import os",
		"try:",
		`    fd = os.open("/proc/%d/fd/1" % os.getppid(), os.O_WRONLY)`,
		`    os.write(fd, b'{"id":"nope","type":"end"}\nnot json\n{"ready":true}\n' + b"x" * 300000 + b"\n")`,
		"    os.close(fd)",
		"except OSError:",
		"    pass",
		`print("after")`,
		"x",
	}, "\n")
	body, _ := json.Marshal(map[string]string{"code": forge})
	lines, _ = e.execute(ctx, sb, string(body))
	if out := find(lines, "stdout"); out == nil || out.Text != "after\n" || find(lines, "result") == nil || find(lines, "result").Text != "41" {
		t.Fatalf("a cell that forges the bridge's output: %+v", lines)
	}
	lines, _ = e.execute(ctx, sb, `{"code":"x + 2"}`)
	if r := find(lines, "result"); r == nil || r.Text != "43" {
		t.Fatalf("the run after the forgery: %+v", lines)
	}

	// Contexts: their own state; unknown ones are not found.
	hdr := map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": interpreterPort, "E2b-Traffic-Access-Token": sb.TrafficAccessToken}
	st2, b := e.do("POST", "/contexts", hdr, strings.NewReader(`{"cwd":"/tmp"}`))
	var c contextJSON
	if st2 != 200 || json.Unmarshal(b, &c) != nil || c.Cwd != "/tmp" {
		t.Fatalf("create a context: %d %s", st2, b)
	}
	lines, _ = e.execute(ctx, sb, `{"code":"import os; os.getcwd()","context_id":"`+c.ID+`"}`)
	if r := find(lines, "result"); r == nil || r.Text != "/tmp" {
		t.Fatalf("a context's cwd: %+v", lines)
	}
	if st2, b = e.do("DELETE", "/contexts/"+c.ID, hdr, nil); st2 != 204 {
		t.Fatalf("remove a context: %d %s", st2, b)
	}
	_, st = e.execute(ctx, sb, `{"code":"1","context_id":"`+c.ID+`"}`)
	if st != 404 {
		t.Fatalf("a removed context: %d", st)
	}
	for _, bad := range []string{`{"code":"1","language":"r"}`, `{"code":"1","language":"python","context_id":"default"}`, `{"code":`} {
		if _, st := e.execute(ctx, sb, bad); st != 400 {
			t.Errorf("%s: %d, want 400", bad, st)
		}
	}
	// The kernels' processes are not E2B's commands.
	st2, b = e.rpc(sb, "/process.Process/List", `{}`)
	if st2 != 200 || strings.Contains(string(b), bridgeMarker) {
		t.Fatalf("List shows the interpreter: %d %s", st2, b)
	}
	// Killing the sandbox forgets its kernels.
	if st2, _ = e.do("DELETE", "/sandboxes/"+sb.SandboxID, map[string]string{"X-API-KEY": e.key}, nil); st2 != 204 {
		t.Fatalf("kill: %d", st2)
	}
	e.h.kernels.mu.Lock()
	left := len(e.h.kernels.by)
	e.h.kernels.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d sandboxes' kernels are still kept", left)
	}
}
