package egress

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"
)

// TestPerformance measures what the proxy adds on loopback: per-request
// latency (p50/p99) and the throughput of one large download, each direct
// and through the proxy, in one run. It runs only when AIRLOCK_PERF is set:
//
//	AIRLOCK_PERF=1 go test -run TestPerformance -v ./internal/egress/
func TestPerformance(t *testing.T) {
	if os.Getenv("AIRLOCK_PERF") == "" {
		t.Skip("set AIRLOCK_PERF=1 to measure")
	}
	f := newFixture(t, Limits{RequestsPerSecond: 1e9, Burst: 1 << 30, MaxBytes: 1 << 40}, nil, nil)
	const size = 512 << 20
	chunk := make([]byte, 1<<20)
	big := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(size))
		for range size / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})}
	ln := mustListen(t)
	go big.Serve(ln)
	t.Cleanup(func() { big.Close() })

	direct := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1}}
	proxied := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(f.url), MaxIdleConnsPerHost: 1}}
	small := fmt.Sprintf("http://allowed.test:%d/", f.a.addr.Port())
	smallDirect := fmt.Sprintf("http://%s/", f.a.addr)
	lat := func(c *http.Client, u string) (p50, p99 time.Duration) {
		var ds []time.Duration
		for i := range 2200 {
			start := time.Now()
			resp, err := c.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if i >= 200 { // warm-up
				ds = append(ds, time.Since(start))
			}
		}
		slices.Sort(ds)
		return ds[len(ds)/2], ds[len(ds)*99/100]
	}
	d50, d99 := lat(direct, smallDirect)
	p50, p99 := lat(proxied, small)
	tput := func(c *http.Client, u string) float64 {
		start := time.Now()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n != size {
			t.Fatalf("downloaded %d of %d bytes", n, size)
		}
		return float64(n) / (1 << 20) / time.Since(start).Seconds()
	}
	// The big server is reached by address, so it must be allowed: use the
	// allowed address's host with the big server's port via a literal.
	bigURL := "http://" + ln.Addr().String() + "/"
	f.sb.rules.addrs[mustAddrPort(ln.Addr().String())] = true
	dt := tput(direct, bigURL)
	pt := tput(proxied, bigURL)
	t.Logf("latency direct   p50 %v p99 %v", d50, d99)
	t.Logf("latency proxied  p50 %v p99 %v (added p50 %v, p99 %v)", p50, p99, p50-d50, p99-d99)
	t.Logf("throughput direct %.0f MiB/s, proxied %.0f MiB/s (%.0f%%)", dt, pt, 100*pt/dt)
}

func mustListen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func mustAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
