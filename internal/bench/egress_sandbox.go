package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/native"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// tunnelProbe is the client of the tunnel rows: Python's http.client on one
// keep-alive connection, to the server directly or through the sandbox's
// proxy port (the HTTP_PROXY every command in egress mode gets). It prints
// the time of each small request in microseconds, one a line, then the
// bytes of one large download and the seconds it took (of argv[5]
// downloads, one a line, when given). The same script runs on the host
// and in the sandbox, so what differs is the path.
const tunnelProbe = `
import http.client, sys, time
host, port, proxy, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
if proxy:
    ph, pp = proxy.rsplit(":", 1)
    conn = http.client.HTTPConnection(ph, int(pp))
    base = "http://%s:%d" % (host, port)
else:
    conn = http.client.HTTPConnection(host, port)
    base = ""
out = []
for i in range(n):
    t = time.perf_counter()
    conn.request("GET", base + "/small")
    conn.getresponse().read()
    out.append("%.1f" % ((time.perf_counter() - t) * 1e6))
buf = bytearray(1 << 20)
mv = memoryview(buf)
for i in range(int(sys.argv[5]) if len(sys.argv) > 5 else 1):
    t = time.perf_counter()
    conn.request("GET", base + "/big")
    r = conn.getresponse()
    got = 0
    while True:
        k = r.readinto(mv)
        if not k:
            break
        got += k
    out.append("%d %.6f" % (got, time.perf_counter() - t))
print("\n".join(out))
`

// tunnelRows are the egress rows of a real sandbox: python3 in a native
// sandbox in network mode egress reaches the loopback server through its
// agent's tunnel (the proxy port inside, an HTTP/2 stream of the agent
// connection) and the host's egress proxy, beside the same python3 on the
// host going direct. rows[0] and rows[2] are the direct baselines.
func tunnelRows(ctx context.Context, o Options, srvAddr string, size int64, progress func(string, ...any)) []Row {
	rows := tunnelTemplate()
	fail := func(from int, err error) []Row {
		for i := from; i < len(rows); i++ {
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
	host, port, err := splitAddr(srvAddr)
	if err != nil {
		return fail(0, err)
	}
	n := max(o.TrueRuns*10, 200)
	args := func(proxy string) []string {
		return []string{"-c", tunnelProbe, host, strconv.Itoa(port), proxy, strconv.Itoa(n)}
	}
	timeout := 2 * time.Minute

	progress("egress: python3 on the host, %d requests and a %d MiB download, direct", n, size>>20)
	var out, errb bytes.Buffer
	cctx, cancel := context.WithTimeout(ctx, timeout)
	cmd := exec.CommandContext(cctx, python, args("")...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	cancel()
	if err != nil {
		return fail(0, fmt.Errorf("python3 on the host: %w%s", err, stderrTail(errb.String())))
	}
	if err := tunnelResult(rows[0:], rows[2:], out.String(), n, size); err != nil {
		return fail(0, err)
	}

	// The proxy's limits are the daemon's to set; here they must not be
	// what is measured.
	proxy := egress.New(egress.Options{Limits: egress.Limits{RequestsPerSecond: 1e9, Burst: 1 << 30, MaxBytes: 1 << 50, MaxConns: 1 << 20}})
	d, err := native.New(native.Options{Egress: proxy})
	if err == nil {
		err = d.Probe(ctx)
	}
	if err != nil {
		return fail(1, err)
	}
	spec := liveSpec()
	spec.Network = sandbox.Network{Mode: sandbox.NetworkEgress, AllowAddresses: []string{srvAddr}}
	progress("egress: python3 in a sandbox, the same through its agent tunnel")
	in, err := d.Create(ctx, spec)
	if err != nil {
		return fail(1, err)
	}
	g := &guarded{sb: in}
	defer func() { _ = g.close(ctx) }()
	out.Reset()
	errb.Reset()
	res, err := sandbox.Run(ctx, in, sandbox.ExecRequest{Argv: append([]string{"python3"}, args(proxyPort)...),
		Stdout: &out, Stderr: &errb, Timeout: timeout})
	if err == nil && (res.Reason != sandbox.ReasonExit || res.ExitCode != 0) {
		err = fmt.Errorf("exit %d (%s) %s", res.ExitCode, res.Reason, res.Message)
	}
	if err != nil {
		return fail(1, fmt.Errorf("python3 in the sandbox: %w%s", err, stderrTail(errb.String())))
	}
	if err := tunnelResult(rows[1:], rows[3:], out.String(), n, size); err != nil {
		return fail(1, err)
	}
	rows[1].Detail = fmt.Sprintf("adds %.3f ms at p50", rows[1].Stats.P50-rows[0].Stats.P50)
	return rows
}

// proxyPort is the sandbox's proxy port as the probe takes it.
const proxyPort = "127.0.0.1:3128"

// tunnelResult reads the probe's output into a latency row and a download
// row (the median of the downloads' rates, when it made several; none
// when dl is nil).
func tunnelResult(lat, dl []Row, out string, n int, size int64) error {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if want := n + min(len(dl), 1); len(lines) < want {
		return fmt.Errorf("the probe printed %d lines, want at least %d", len(lines), want)
	}
	ds := make([]time.Duration, 0, n)
	for _, l := range lines[:n] {
		us, err := strconv.ParseFloat(l, 64)
		if err != nil {
			return fmt.Errorf("the probe printed %q: %w", l, err)
		}
		ds = append(ds, time.Duration(us*float64(time.Microsecond)))
	}
	// The first tenth warms the connection and the interpreter up.
	lat[0] = latencyRow(lat[0], series{samples: ds[n/10:]})
	if dl == nil {
		return nil
	}
	rates := make([]float64, 0, len(lines)-n)
	for _, l := range lines[n:] {
		var got int64
		var secs float64
		if _, err := fmt.Sscan(l, &got, &secs); err != nil || got != size || secs <= 0 {
			return fmt.Errorf("the probe's download printed %q, want %d bytes and the seconds", l, size)
		}
		rates = append(rates, float64(size)/(1<<20)/secs)
	}
	slices.Sort(rates)
	dl[0].Status, dl[0].Value = StatusOK, ptr(rates[len(rates)/2])
	return nil
}

func splitAddr(a string) (string, int, error) {
	i := strings.LastIndexByte(a, ':')
	if i < 0 {
		return "", 0, errors.New("no port in " + a)
	}
	p, err := strconv.Atoi(a[i+1:])
	return a[:i], p, err
}

func stderrTail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 400 {
		s = s[len(s)-400:]
	}
	if s == "" {
		return ""
	}
	return ": " + s
}

// tunnelTemplate returns the tunnel rows, not measured yet.
func tunnelTemplate() []Row {
	return []Row{
		{Section: "egress", ID: "egress/client-direct", What: "GET 1 KiB on loopback, python3 on the host, direct", Unit: UnitMS},
		{Section: "egress", ID: "egress/sandbox-latency", What: "GET 1 KiB on loopback, python3 in a sandbox, through its agent tunnel and the proxy (native)", Unit: UnitMS,
			Compare: []Comparison{{Baseline: "egress/client-direct", Name: "direct"}}},
		{Section: "egress", ID: "egress/client-direct-download", What: "download on loopback, python3 on the host, direct (higher is better)", Unit: UnitMiBps},
		{Section: "egress", ID: "egress/sandbox-throughput", What: "download on loopback, python3 in a sandbox, through its agent tunnel and the proxy (native; higher is better)", Unit: UnitMiBps,
			Compare: []Comparison{{Baseline: "egress/client-direct-download", Name: "direct"}}},
	}
}
