package bench

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/native"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// httpsProbe is the client of the sandbox HTTPS rows: Python's
// http.client over HTTPS through the sandbox's proxy port (a CONNECT,
// then TLS on one keep-alive connection), trusting the sandbox's bundle
// (SSL_CERT_FILE: its root's and the proxy's CA) and the bench server's
// root (for the tunnelled name); with a fifth argument, an address, it
// goes there directly instead (the host's direct row). It prints, as tunnelProbe does, the time
// of each small request in microseconds, then the bytes of one large
// download and the seconds it took.
const httpsProbe = `
import http.client, os, socket, ssl, sys, time
host, port, rootpem, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
ctx = ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE"))
ctx.load_verify_locations(cadata=rootpem)
if len(sys.argv) > 5:
    # Direct: host is dialled at the address given.
    conn = http.client.HTTPSConnection(host, port, context=ctx)
    conn._create_connection = lambda a, *r: socket.create_connection((sys.argv[5], a[1]), *r)
else:
    conn = http.client.HTTPSConnection("127.0.0.1", 3128, context=ctx)
    conn.set_tunnel(host, port)
out = []
for i in range(n):
    t = time.perf_counter()
    conn.request("GET", "/small")
    conn.getresponse().read()
    out.append("%.1f" % ((time.perf_counter() - t) * 1e6))
buf = bytearray(1 << 20)
mv = memoryview(buf)
t = time.perf_counter()
conn.request("GET", "/big")
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

// sandboxHTTPSRows fill rows (sandbox-https-*: latency tunnelled and
// intercepted, then the downloads: direct from the host, tunnelled and
// intercepted from the sandbox) with python3 in a native sandbox
// reaching the bench's HTTPS server at srvAddr through proxy, under the
// tunnelled name and the intercepted one: the whole path a sandbox's
// HTTPS takes, the agent's tunnel included.
func sandboxHTTPSRows(ctx context.Context, o Options, proxy *egress.Proxy, rootPEM []byte, srvAddr string, rows []Row, progress func(string, ...any)) {
	fail := func(err error) {
		for i := range rows {
			rows[i].Status, rows[i].Detail = StatusFailed, err.Error()
		}
	}
	if _, err := exec.LookPath("python3"); err != nil {
		for i := range rows {
			rows[i].Status, rows[i].Detail = StatusMissing, "no python3 on the host: apt-get install python3"
		}
		return
	}
	_, port, err := splitAddr(srvAddr)
	if err != nil {
		fail(err)
		return
	}
	d, err := native.New(native.Options{Egress: proxy})
	if err == nil {
		err = d.Probe(ctx)
	}
	if err != nil {
		fail(err)
		return
	}
	spec := liveSpec()
	spec.Network = sandbox.Network{Mode: sandbox.NetworkEgress,
		AllowHosts:     []string{fmt.Sprintf("tunnel.test:%d", port), fmt.Sprintf("intercept.test:%d", port)},
		AllowAddresses: []string{srvAddr}}
	in, err := d.Create(ctx, spec)
	if err != nil {
		fail(err)
		return
	}
	g := &guarded{sb: in}
	defer func() { _ = g.close(ctx) }()
	n := max(o.TrueRuns*10, 200)
	probe := func(host string) []string {
		return []string{"-c", httpsProbe, host, strconv.Itoa(port), string(rootPEM), strconv.Itoa(n)}
	}
	progress("egress: python3 on the host, %d HTTPS requests and a 100 MiB download, direct", n)
	var out, errb bytes.Buffer
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	cmd := exec.CommandContext(cctx, "python3", append(probe("tunnel.test"), "127.0.0.1")...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	cancel()
	if err == nil {
		err = tunnelResult(make([]Row, 1), rows[2:], out.String(), n, interceptDownload)
	}
	if err != nil {
		rows[2].Status, rows[2].Detail = StatusFailed, fmt.Sprintf("python3 on the host: %v%s", err, stderrTail(errb.String()))
	}
	for i, host := range []string{"tunnel.test", "intercept.test"} {
		progress("egress: python3 in a sandbox, %d HTTPS requests and a 100 MiB download, %s", n, host)
		out.Reset()
		errb.Reset()
		res, err := sandbox.Run(ctx, in, sandbox.ExecRequest{Argv: append([]string{"python3"}, probe(host)...),
			Stdout: &out, Stderr: &errb, Timeout: 3 * time.Minute})
		if err == nil && (res.Reason != sandbox.ReasonExit || res.ExitCode != 0) {
			err = fmt.Errorf("exit %d (%s) %s", res.ExitCode, res.Reason, res.Message)
		}
		if err == nil {
			err = tunnelResult(rows[i:], rows[3+i:], out.String(), n, interceptDownload)
		}
		if err != nil {
			err = fmt.Errorf("python3 in the sandbox, %s: %w%s", host, err, stderrTail(errb.String()))
			rows[i].Status, rows[i].Detail = StatusFailed, err.Error()
			rows[3+i].Status, rows[3+i].Detail = StatusFailed, err.Error()
		}
	}
	if rows[0].Status == StatusOK && rows[1].Status == StatusOK {
		rows[1].Detail = fmt.Sprintf("adds %.3f ms at p50", rows[1].Stats.P50-rows[0].Stats.P50)
	}
}
