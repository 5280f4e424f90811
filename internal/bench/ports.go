package bench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/api/e2b"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// The ports section times an exposed port (E2B's getHost): python3 on the
// host asks a server in a native sandbox through the daemon's listener
// (Host PORT-ID.DOMAIN, the proxy, the agent's Dial stream), beside the
// same client asking the same server run on the host. The client is the
// egress rows' probe (tunnelProbe), given the daemon as its proxy: it
// sends absolute URLs, whose host names the sandbox's port.

// portServer serves /small (1 KiB) and /big (argv[2] bytes) with
// keep-alive, from memory, on 127.0.0.1:argv[1].
const portServer = `
import http.server, sys
port, size = int(sys.argv[1]), int(sys.argv[2])
chunk = b"x" * (1 << 20)
small = b"y" * 1024
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def log_message(self, *a):
        pass
    def do_GET(self):
        n = size if self.path.endswith("/big") else len(small)
        self.send_response(200)
        self.send_header("Content-Length", str(n))
        self.end_headers()
        if n == len(small):
            self.wfile.write(small)
            return
        left = n
        while left:
            k = min(left, len(chunk))
            self.wfile.write(chunk[:k])
            left -= k
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
`

// portsDownload is the size of the ports rows' download, and
// portsDownloads how many are made (each row is their median: one
// download's rate on a shared machine moves twofold from run to run).
const (
	portsDownload  = 100 << 20
	portsDownloads = 5
)

// portsPort is where the rows' server listens, in the sandbox and on the
// host.
const portsPort = 18090

func portsTemplate() []Row {
	return []Row{
		{Section: "ports", ID: "ports/direct", What: "GET 1 KiB, python3 client and server both on the host, direct", Unit: UnitMS},
		{Section: "ports", ID: "ports/latency", What: "GET 1 KiB from a server in a sandbox through its exposed port (daemon listener, proxy, the connection handed over and spliced; native, sandbox with egress)", Unit: UnitMS,
			Compare: []Comparison{{Baseline: "ports/direct", Name: "direct"}}},
		{Section: "ports", ID: "ports/direct-download", What: "100 MiB download, server on the host, direct (median of 5; higher is better)", Unit: UnitMiBps},
		{Section: "ports", ID: "ports/throughput", What: "100 MiB download from a server in a sandbox through its exposed port (native, sandbox with egress; median of 5; higher is better)", Unit: UnitMiBps,
			Compare: []Comparison{{Baseline: "ports/direct-download", Name: "direct"}}},
	}
}

func portsRows(ctx context.Context, o Options, drv sandbox.Driver, drvErr error, progress func(string, ...any)) []Row {
	rows := portsTemplate()
	// fail marks every row failed (from 0), or the exposed ones (from 1:
	// rows 1 and 3, beside their measured baselines).
	fail := func(from int, err error) []Row {
		for i := from; i < len(rows); i += from + 1 {
			rows[i].Status, rows[i].Detail = StatusFailed, err.Error()
		}
		return rows
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		for i := range rows {
			rows[i].Status, rows[i].Detail = StatusMissing, "no python3 on the host: apt-get install python3"
		}
		return rows
	}
	n := max(o.TrueRuns*10, 200)
	timeout := 2 * time.Minute
	probe := func(host, proxy string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var out, errb bytes.Buffer
		cmd := exec.CommandContext(cctx, python, "-c", tunnelProbe, host, strconv.Itoa(portsPort), proxy, strconv.Itoa(n), strconv.Itoa(portsDownloads))
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("the probe: %w%s", err, stderrTail(errb.String()))
		}
		return out.String(), nil
	}

	progress("ports: python3 on the host, %d requests and %d downloads of %d MiB, direct", n, portsDownloads, portsDownload>>20)
	srv := exec.CommandContext(ctx, python, "-c", portServer, strconv.Itoa(portsPort), strconv.Itoa(portsDownload))
	if err := srv.Start(); err != nil {
		return fail(0, err)
	}
	out, err := func() (string, error) {
		defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
		if err := waitPort(ctx, "127.0.0.1:"+strconv.Itoa(portsPort)); err != nil {
			return "", err
		}
		return probe("127.0.0.1", "")
	}()
	if err == nil {
		err = tunnelResult(rows[0:], rows[2:], out, n, portsDownload)
	}
	if err != nil {
		return fail(0, err)
	}
	if drvErr != nil {
		return fail(1, fmt.Errorf("the native driver cannot run here: %w", drvErr))
	}
	progress("ports: the same from a server in a sandbox, through its exposed port")
	out, err = exposedProbe(ctx, drv, probe)
	if err == nil {
		err = tunnelResult(rows[1:], rows[3:], out, n, portsDownload)
	}
	if err != nil {
		return fail(1, err)
	}
	rows[1].Detail = fmt.Sprintf("adds %.3f ms at p50", rows[1].Stats.P50-rows[0].Stats.P50)
	return rows
}

// exposedProbe serves the E2B endpoints over a supervisor with drv, as
// `airlock serve` does, starts portServer in a sandbox, and runs probe
// with the daemon as its proxy.
func exposedProbe(ctx context.Context, drv sandbox.Driver, probe func(host, proxy string) (string, error)) (string, error) {
	dir, err := os.MkdirTemp("", "airlock-bench-ports-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(dir, time.Second)
	if err != nil {
		return "", err
	}
	defer st.Close()
	l := liveSpec().Limits
	// The sandbox has a network (egress through the proxy, to no host), as
	// an E2B sandbox has by default (allowInternetAccess): on native that
	// gives it the tunnel channel, and its exposed connections are handed
	// to the host and spliced (decisions 61 and 62).
	cfg := supervisor.Config{Templates: []supervisor.Template{{Name: "default", CPUs: l.CPUs, Pids: l.Pids,
		Network: supervisor.TemplateNetwork{Mode: "egress", AllowHosts: []string{"bench.invalid"}}}}}
	sup, err := supervisor.New(supervisor.Options{Store: st, Drivers: map[string]sandbox.Driver{"native": drv}, Config: cfg, Metrics: supervisor.NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		return "", err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go sup.Run(sctx)
	defer sup.Close(context.WithoutCancel(ctx))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv, err := api.New(api.Options{Supervisor: sup, Store: st, ListenAddr: ln.Addr().String(), Gatherer: prometheus.NewRegistry()})
	if err != nil {
		return "", err
	}
	eh, err := e2b.New(e2b.Options{Supervisor: sup, Store: st, API: srv, Config: sup.Config().E2B})
	if err != nil {
		return "", err
	}
	defer eh.Close(context.WithoutCancel(ctx))
	hs := &http.Server{Handler: eh, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	k, _, err := st.NewKeyFormat(nil, "bench", store.RoleAgent, store.Quota{MaxSandboxes: 2},
		store.RateLimits{CreatesPerSecond: 1e6, CreateBurst: 1e6, ExecsPerSecond: 1e6, ExecBurst: 1e6, FilesPerSecond: 1e6, FileBurst: 1e6}, time.Now(), store.FormatE2B)
	if err != nil {
		return "", err
	}
	c := api.KeyCaller(k)
	info, err := sup.Create(ctx, c, supervisor.CreateRequest{Template: "default"})
	if err != nil {
		return "", err
	}
	defer func() { _ = sup.Kill(context.WithoutCancel(ctx), c, info.ID) }()
	if _, err := sup.StartProcess(ctx, c, info.ID, supervisor.StartRequest{ExecRequest: supervisor.ExecRequest{
		Argv: []string{"python3", "-c", portServer, strconv.Itoa(portsPort), strconv.Itoa(portsDownload)}}}); err != nil {
		return "", err
	}
	host := fmt.Sprintf("%d-%s.%s", portsPort, info.ID, e2b.DefaultDomain)
	// Wait for the server through the exposed port itself.
	url := fmt.Sprintf("http://%s/small", ln.Addr())
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the server in the sandbox never answered through its exposed port (%w)", err)
		}
	}
	return probe(host, ln.Addr().String())
}

// waitPort waits until something accepts connections at addr.
func waitPort(ctx context.Context, addr string) error {
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on %s: %w", addr, err)
		}
	}
}
