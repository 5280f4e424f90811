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
// root (for the tunnelled name). It prints, as tunnelProbe does, the time
// of each small request in microseconds, then the bytes of one large
// download and the seconds it took.
const httpsProbe = `
import http.client, os, ssl, sys, time
host, port, rootpem, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
ctx.load_verify_locations(cadata=rootpem)
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
// intercepted, then the downloads) with python3 in a native sandbox
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
	for i, host := range []string{"tunnel.test", "intercept.test"} {
		progress("egress: python3 in a sandbox, %d HTTPS requests and a 100 MiB download, %s", n, host)
		var out, errb bytes.Buffer
		res, err := sandbox.Run(ctx, in, sandbox.ExecRequest{Argv: []string{"python3", "-c", httpsProbe, host, strconv.Itoa(port), string(rootPEM), strconv.Itoa(n)},
			Stdout: &out, Stderr: &errb, Timeout: 3 * time.Minute})
		if err == nil && (res.Reason != sandbox.ReasonExit || res.ExitCode != 0) {
			err = fmt.Errorf("exit %d (%s) %s", res.ExitCode, res.Reason, res.Message)
		}
		if err == nil {
			err = tunnelResult(rows[i:], rows[2+i:], out.String(), n, interceptDownload)
		}
		if err != nil {
			err = fmt.Errorf("python3 in the sandbox, %s: %w%s", host, err, stderrTail(errb.String()))
			rows[i].Status, rows[i].Detail = StatusFailed, err.Error()
			rows[2+i].Status, rows[2+i].Detail = StatusFailed, err.Error()
		}
	}
	if rows[0].Status == StatusOK && rows[1].Status == StatusOK {
		rows[1].Detail = fmt.Sprintf("adds %.3f ms at p50", rows[1].Stats.P50-rows[0].Stats.P50)
	}
	if rows[2].Status == StatusOK && rows[3].Status == StatusOK {
		rows[3].Detail = fmt.Sprintf("%.2fx the tunnelled download", *rows[3].Value / *rows[2].Value)
	}
}
