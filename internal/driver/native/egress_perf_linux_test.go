package native

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// perfProbe measures per-request latency and one large download with
// Python's http.client, direct or through the proxy at 127.0.0.1:3128.
const perfProbe = `
import http.client, sys, time
host, port, proxy, n = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
conn = http.client.HTTPConnection("127.0.0.1", 3128) if proxy else http.client.HTTPConnection(host, port)
base = "http://%s:%d" % (host, port) if proxy else ""
ds = []
for i in range(n):
    t = time.perf_counter()
    conn.request("GET", base + "/")
    conn.getresponse().read()
    ds.append(time.perf_counter() - t)
ds = sorted(ds[n // 10:])
t = time.perf_counter()
conn.request("GET", base + "/big")
r = conn.getresponse()
got = 0
while True:
    b = r.read(1 << 20)
    if not b:
        break
    got += len(b)
el = time.perf_counter() - t
print("%.1f %.1f %.0f %d" % (ds[len(ds) // 2] * 1e6, ds[len(ds) * 99 // 100] * 1e6, got / el / (1 << 20), got))
`

// BenchmarkEgress compares a client in a sandbox going through the agent's
// tunnel and the egress proxy with the same client on the host going
// direct (what `airlock bench` leaves out: its egress rows measure the
// proxy alone). Each iteration runs the probe on both sides: 2000 small
// requests, then one 256 MiB download.
//
//	go test -run '^$' -bench Egress -benchtime 1x ./internal/driver/native/
//
// It reports, averaged over the iterations, p50 and p99 in µs and MiB/s
// for each side, and what the sandbox's path adds at p50 and p99.
func BenchmarkEgress(b *testing.B) {
	requireNative(b)
	const size = 256 << 20
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/big" {
			_, _ = w.Write([]byte("ok"))
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(size))
		for range size / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	d, err := New(Options{Egress: egress.New(egress.Options{Limits: egress.Limits{RequestsPerSecond: 1e6, Burst: 1e6, MaxBytes: 1 << 40}})})
	if err != nil {
		b.Fatal(err)
	}
	// The workload gets the host's cores, as the host probe has them.
	in, err := d.Create(b.Context(), sandbox.Spec{Limits: sandbox.Limits{CPUs: 2}, Network: sandbox.Network{Mode: sandbox.NetworkEgress, AllowAddresses: []string{ln.Addr().String()}}})
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close(context.Background())
	const n = "2000"
	// probe runs perfProbe and returns p50 and p99 in µs and MiB/s.
	probe := func(sandboxed bool) [3]float64 {
		var out, errb bytes.Buffer
		if sandboxed {
			res, err := sandbox.Run(b.Context(), in, sandbox.ExecRequest{Argv: []string{"python3", "-c", perfProbe, "127.0.0.1", fmt.Sprint(port), "1", n}, Stdout: &out, Stderr: &errb, Timeout: 2 * time.Minute})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("sandbox probe: %v %+v %s", err, res, errb.String())
			}
		} else {
			cmd := exec.CommandContext(b.Context(), "/usr/bin/python3", "-c", perfProbe, "127.0.0.1", fmt.Sprint(port), "0", n)
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				b.Fatalf("host probe: %v %s", err, errb.String())
			}
		}
		var m [3]float64
		var got int64
		if _, err := fmt.Sscan(strings.TrimSpace(out.String()), &m[0], &m[1], &m[2], &got); err != nil || got != size {
			b.Fatalf("probe (sandboxed %v) printed %q: %v; want the %d bytes downloaded", sandboxed, out.String(), err, size)
		}
		return m
	}
	var host, sb [3]float64
	for b.Loop() {
		h, s := probe(false), probe(true)
		for i := range 3 {
			host[i] += h[i]
			sb[i] += s[i]
		}
	}
	for i := range 3 {
		host[i] /= float64(b.N)
		sb[i] /= float64(b.N)
	}
	b.ReportMetric(host[0], "host-p50-us")
	b.ReportMetric(host[1], "host-p99-us")
	b.ReportMetric(host[2], "host-MiB/s")
	b.ReportMetric(sb[0], "sandbox-p50-us")
	b.ReportMetric(sb[1], "sandbox-p99-us")
	b.ReportMetric(sb[2], "sandbox-MiB/s")
	b.ReportMetric(sb[0]-host[0], "added-p50-us")
	b.ReportMetric(sb[1]-host[1], "added-p99-us")
}
