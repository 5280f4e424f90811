package native

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
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

// TestEgressPerformance compares a client in a sandbox going through the
// agent's tunnel and the proxy with the same client on the host going
// direct. It runs only when AIRLOCK_PERF is set:
//
//	AIRLOCK_PERF=1 go test -run TestEgressPerformance -v ./internal/driver/native/
func TestEgressPerformance(t *testing.T) {
	if os.Getenv("AIRLOCK_PERF") == "" {
		t.Skip("set AIRLOCK_PERF=1 to measure")
	}
	requireNative(t)
	const size = 256 << 20
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/big" {
			w.Write([]byte("ok"))
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
		t.Fatal(err)
	}
	// The workload gets the host's cores, as the host probe has them.
	in, err := d.Create(t.Context(), sandbox.Spec{Limits: sandbox.Limits{CPUs: 2}, Network: sandbox.Network{Mode: sandbox.NetworkEgress, AllowAddresses: []string{ln.Addr().String()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(context.Background())
	const n = "2000"
	hostOut, err := exec.Command("/usr/bin/python3", "-c", perfProbe, "127.0.0.1", fmt.Sprint(port), "0", n).Output()
	if err != nil {
		t.Fatalf("host probe: %v", err)
	}
	var out, errb bytes.Buffer
	res, err := sandbox.Run(t.Context(), in, sandbox.ExecRequest{Argv: []string{"python3", "-c", perfProbe, "127.0.0.1", fmt.Sprint(port), "1", n}, Stdout: &out, Stderr: &errb, Timeout: 2 * time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("sandbox probe: %v %+v %s", err, res, errb.String())
	}
	var h, s [3]float64
	var hn, sn int64
	fmt.Sscan(strings.TrimSpace(string(hostOut)), &h[0], &h[1], &h[2], &hn)
	fmt.Sscan(strings.TrimSpace(out.String()), &s[0], &s[1], &s[2], &sn)
	if hn != size || sn != size {
		t.Fatalf("downloads: host %d, sandbox %d bytes of %d", hn, sn, size)
	}
	t.Logf("direct (host)          p50 %6.0f µs  p99 %6.0f µs  %5.0f MiB/s", h[0], h[1], h[2])
	t.Logf("via tunnel + proxy     p50 %6.0f µs  p99 %6.0f µs  %5.0f MiB/s", s[0], s[1], s[2])
	t.Logf("added                  p50 %6.0f µs  p99 %6.0f µs  %4.0f%% of direct throughput", s[0]-h[0], s[1]-h[1], 100*s[2]/h[2])
}
