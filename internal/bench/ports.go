package bench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
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
// portsDownloads how many are made each way, direct and through the
// exposed port alternated (each row is their median: one download's rate
// on a shared machine moves twofold from run to run, and alternating
// puts both under the same load).
const (
	portsDownload  = 100 << 20
	portsDownloads = 5
)

// portsDownloadProbe downloads /big argv[4] times from the host's server
// on 127.0.0.1:argv[1] and as many through the daemon at argv[2] from the
// sandbox's (Host argv[3]), alternated; then as many through the bare
// relay at 127.0.0.1:argv[5] from the host's, alternated with as many
// direct ones again ("direct2"); then as many through the daemon from the
// server of a sandbox without a network (Host argv[6], "nonet"),
// alternated with direct ones ("direct3"). Each kind has its keep-alive
// connection (direct2's and direct3's are direct's); it prints
// "KIND BYTES SECONDS" a download. The relay has a phase of its own: taken
// in turn with the other two, it lowered the exposed row (decision 82);
// the first phase is the exposed row's as it always was, and the sandbox
// without a network has the last (decision 87).
const portsDownloadProbe = `
import http.client, sys, time
port, proxy, host, k, relay, nonet = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
ph, pp = proxy.rsplit(":", 1)
direct = (http.client.HTTPConnection("127.0.0.1", port), "/big")
conns = {"direct": direct, "direct2": direct, "direct3": direct,
         "exposed": (http.client.HTTPConnection(ph, int(pp)), "http://%s:%d/big" % (host, port)),
         "relay": (http.client.HTTPConnection("127.0.0.1", relay), "/big"),
         "nonet": (http.client.HTTPConnection(ph, int(pp)), "http://%s:%d/big" % (nonet, port))}
buf = bytearray(1 << 20)
mv = memoryview(buf)
out = []
rounds = [(("direct", "exposed") if i % 2 == 0 else ("exposed", "direct")) for i in range(k)]
rounds += [(("relay", "direct2") if i % 2 == 0 else ("direct2", "relay")) for i in range(k)]
rounds += [(("nonet", "direct3") if i % 2 == 0 else ("direct3", "nonet")) for i in range(k)]
for names in rounds:
    for name in names:
        conn, url = conns[name]
        t = time.perf_counter()
        conn.request("GET", url)
        r = conn.getresponse()
        got = 0
        while True:
            n = r.readinto(mv)
            if not n:
                break
            got += n
        out.append("%s %d %.6f" % (name, got, time.perf_counter() - t))
print("\n".join(out))
`

// portsDownloadResult reads portsDownloadProbe's output into the direct,
// the exposed and the relay download rows (dl[0:3]) and the row of the
// sandbox without a network (dl[3]): the median rate of each; the relay's
// and the last row's details give them against the direct downloads of
// their own phase.
func portsDownloadResult(dl []Row, out string) error {
	rates := map[string][]float64{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var name string
		var got int64
		var secs float64
		if _, err := fmt.Sscan(l, &name, &got, &secs); err != nil || got != portsDownload || secs <= 0 {
			return fmt.Errorf("the download probe printed %q, want a name, %d bytes and the seconds", l, portsDownload)
		}
		rates[name] = append(rates[name], float64(got)/(1<<20)/secs)
	}
	med := map[string]float64{}
	for _, name := range []string{"direct", "exposed", "relay", "direct2", "nonet", "direct3"} {
		r := rates[name]
		if len(r) != portsDownloads {
			return fmt.Errorf("the download probe timed %d %s downloads, want %d", len(r), name, portsDownloads)
		}
		slices.Sort(r)
		med[name] = r[len(r)/2]
	}
	for i, name := range []string{"direct", "exposed", "relay", "nonet"} {
		dl[i].Status, dl[i].Value = StatusOK, ptr(med[name])
	}
	dl[2].Detail = fmt.Sprintf("%.2fx the direct downloads alternated with it (%.0f MiB/s)", med["relay"]/med["direct2"], med["direct2"])
	dl[3].Detail = fmt.Sprintf("%.2fx the direct downloads alternated with it (%.0f MiB/s); target 0.8x, the bare relay's %.2fx the yardstick",
		med["nonet"]/med["direct3"], med["direct3"], med["relay"]/med["direct2"])
	return nil
}

// portsPort is where the rows' server listens, in the sandbox and on the
// host.
const portsPort = 18090

func portsTemplate() []Row {
	return []Row{
		{Section: "ports", ID: "ports/direct", What: "GET 1 KiB, python3 client and server both on the host, direct", Unit: UnitMS},
		{Section: "ports", ID: "ports/latency", What: "GET 1 KiB from a server in a sandbox through its exposed port (daemon listener, proxy, the connection handed over and spliced; native, sandbox with egress)", Unit: UnitMS,
			Compare: []Comparison{{Baseline: "ports/direct", Name: "direct"}}},
		{Section: "ports", ID: "ports/direct-download", What: "100 MiB download, server on the host, direct (median of 5, alternated with the next row's; higher is better)", Unit: UnitMiBps},
		{Section: "ports", ID: "ports/throughput", What: "100 MiB download from a server in a sandbox through its exposed port (native, sandbox with egress; median of 5; higher is better)", Unit: UnitMiBps,
			Compare: []Comparison{{Baseline: "ports/direct-download", Name: "direct"}}},
		{Section: "ports", ID: "ports/relay-download", What: "100 MiB download from the server on the host through a bare relay in the bench's process (splice both ways, nothing routed or counted): one more loopback TCP hop, the yardstick of the row above (median of 5, alternated with 5 more direct ones; higher is better)", Unit: UnitMiBps,
			Compare: []Comparison{{Baseline: "ports/direct-download", Name: "direct"}}},
		{Section: "ports", ID: "ports/throughput-no-network", What: "100 MiB download from a server in a sandbox without a network (airlock's default) through its exposed port (native: a tunnel channel opened on the first connection, the connection handed over and spliced; median of 5, alternated with 5 more direct ones; higher is better)", Unit: UnitMiBps,
			Compare: []Comparison{{Baseline: "ports/direct-download", Name: "direct"}}},
	}
}

func portsRows(ctx context.Context, o Options, drv sandbox.Driver, drvErr error, progress func(string, ...any)) []Row {
	rows := portsTemplate()
	// fail marks every row failed (from 0), or those measured with the
	// sandboxes (from 1: rows 1, 3, 4 and 5, beside their measured
	// baselines).
	fail := func(from int, err error) []Row {
		for i := from; i < len(rows); i++ {
			if from == 0 || i != 2 {
				rows[i].Status, rows[i].Detail = StatusFailed, err.Error()
			}
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
	run := func(args ...string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var out, errb bytes.Buffer
		cmd := exec.CommandContext(cctx, python, args...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("the probe: %w%s", err, stderrTail(errb.String()))
		}
		return out.String(), nil
	}
	// probe times the small requests (no download).
	probe := func(host, proxy string) (string, error) {
		return run("-c", tunnelProbe, host, strconv.Itoa(portsPort), proxy, strconv.Itoa(n), "0")
	}

	progress("ports: python3 on the host, %d requests, direct", n)
	srv := exec.CommandContext(ctx, python, "-c", portServer, strconv.Itoa(portsPort), strconv.Itoa(portsDownload))
	if err := srv.Start(); err != nil {
		return fail(0, err)
	}
	// The host's server stays up for the downloads, which alternate with
	// the exposed port's.
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	err = waitPort(ctx, "127.0.0.1:"+strconv.Itoa(portsPort))
	var out string
	if err == nil {
		out, err = probe("127.0.0.1", "")
	}
	if err == nil {
		err = tunnelResult(rows[0:], nil, out, n, portsDownload)
	}
	if err != nil {
		return fail(0, err)
	}
	if drvErr != nil {
		return fail(1, fmt.Errorf("the native driver cannot run here: %w", drvErr))
	}
	progress("ports: the same from a server in a sandbox, through its exposed port; then %d downloads of %d MiB each way, alternated; then as many through a bare relay, alternated with direct ones", portsDownloads, portsDownload>>20)
	relay, err := spliceRelay("127.0.0.1:" + strconv.Itoa(portsPort))
	if err != nil {
		return fail(1, err)
	}
	defer relay.Close()
	relayPort := strconv.Itoa(relay.Addr().(*net.TCPAddr).Port)
	var dlOut string
	out, err = exposedProbe(ctx, drv, func(host, nonet, proxy string) (string, error) {
		out, err := probe(host, proxy)
		if err == nil {
			dlOut, err = run("-c", portsDownloadProbe, strconv.Itoa(portsPort), proxy, host, strconv.Itoa(portsDownloads), relayPort, nonet)
		}
		return out, err
	})
	if err == nil {
		err = tunnelResult(rows[1:], nil, out, n, portsDownload)
	}
	if err == nil {
		err = portsDownloadResult(rows[2:], dlOut)
	}
	if err != nil {
		return fail(1, err)
	}
	rows[1].Detail = fmt.Sprintf("adds %.3f ms at p50", rows[1].Stats.P50-rows[0].Stats.P50)
	return rows
}

// exposedProbe serves the E2B endpoints over a supervisor with drv, as
// `airlock serve` does, starts portServer in a sandbox with a network and
// in one without, and runs probe with the daemon as its proxy and the
// names of both servers.
func exposedProbe(ctx context.Context, drv sandbox.Driver, probe func(host, nonet, proxy string) (string, error)) (string, error) {
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
	// The other has none, airlock's default: on native its exposed
	// connections take a tunnel channel opened for them (decision 87).
	cfg := supervisor.Config{Templates: []supervisor.Template{{Name: "default", CPUs: l.CPUs, Pids: l.Pids,
		Network: supervisor.TemplateNetwork{Mode: "egress", AllowHosts: []string{"bench.invalid"}}},
		{Name: "isolated", CPUs: l.CPUs, Pids: l.Pids}}}
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
	var hosts []string
	for _, tmpl := range []string{"default", "isolated"} {
		info, err := sup.Create(ctx, c, supervisor.CreateRequest{Template: tmpl})
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
				return "", fmt.Errorf("the server in the %s sandbox never answered through its exposed port (%w)", tmpl, err)
			}
		}
		hosts = append(hosts, host)
	}
	http.DefaultClient.CloseIdleConnections()
	return probe(hosts[0], hosts[1], ln.Addr().String())
}

// spliceRelay listens on a loopback port and joins each connection to one
// it makes to target, splicing both ways (TCPConn.ReadFrom of a TCPConn is
// splice(2) on Linux) until either end closes. It is the least any
// process between two TCP sockets can do, the yardstick of the exposed
// port's download (decision 82). Closing the listener stops it.
func spliceRelay(target string) (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go func() { _, _ = c.(*net.TCPConn).ReadFrom(s); c.Close(); s.Close() }()
			go func() { _, _ = s.(*net.TCPConn).ReadFrom(c); c.Close(); s.Close() }()
		}
	}()
	return ln, nil
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
