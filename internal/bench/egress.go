package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// egressRows are section 4: what airlock's egress proxy adds on loopback.
// A test server on 127.0.0.1 (allowed by an explicit allow-address, the
// only way to a private address) answers small requests and one large
// download, directly and through the proxy, with the proxy's real guarded
// dialer. A sandbox's traffic also crosses its agent connection to reach
// the proxy: tunnelRows measure that whole path, from python3 in a real
// sandbox.
func egressRows(ctx context.Context, o Options, progress func(string, ...any)) []Row {
	rows := []Row{
		{Section: "egress", ID: "egress/direct", What: "GET 1 KiB on loopback, direct", Unit: UnitMS},
		{Section: "egress", ID: "egress/latency", What: "GET 1 KiB on loopback, through the egress proxy", Unit: UnitMS,
			Compare: []Comparison{{Baseline: "egress/direct", Name: "direct"}}},
		{Section: "egress", ID: "egress/direct-download", What: "download on loopback, direct (higher is better)", Unit: UnitMiBps},
		{Section: "egress", ID: "egress/throughput", What: "download on loopback, through the egress proxy (higher is better)", Unit: UnitMiBps,
			Compare: []Comparison{{Baseline: "egress/direct-download", Name: "direct"}}},
	}
	fail := func(err error) []Row {
		rows = append(append(rows, tunnelTemplate()...), interceptTemplate()...)
		for i := range rows {
			rows[i].Status, rows[i].Detail = StatusFailed, err.Error()
		}
		return rows
	}
	size := int64(512 << 20)
	if o.Quick {
		size = 64 << 20
	}
	small := make([]byte, 1024)
	chunk := make([]byte, 1<<20)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/big" {
			_, _ = w.Write(small)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		for left := size; left > 0; left -= int64(len(chunk)) {
			if _, err := w.Write(chunk[:min(left, int64(len(chunk)))]); err != nil {
				return
			}
		}
	})}
	srvLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	go func() { _ = srv.Serve(srvLn) }()
	defer srv.Close()

	proxy := egress.New(egress.Options{Limits: egress.Limits{RequestsPerSecond: 1e9, Burst: 1 << 30, MaxBytes: 1 << 50, MaxConns: 1 << 20}})
	sb, err := proxy.Attach("bench", sandbox.Network{Mode: sandbox.NetworkEgress, AllowAddresses: []string{srvLn.Addr().String()}})
	if err != nil {
		return fail(err)
	}
	defer sb.Close()
	pxLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	defer pxLn.Close()
	go func() {
		for {
			c, err := pxLn.Accept()
			if err != nil {
				return
			}
			go sb.ServeConn(c)
		}
	}()
	pxURL := &url.URL{Scheme: "http", Host: pxLn.Addr().String()}
	direct := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}}
	proxied := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pxURL), MaxIdleConnsPerHost: 4}}
	defer direct.CloseIdleConnections()
	defer proxied.CloseIdleConnections()
	base := "http://" + srvLn.Addr().String()

	n := max(o.TrueRuns*5, 100)
	progress("egress: %d requests direct and through the proxy", n)
	for i, c := range []*http.Client{direct, proxied} {
		s, err := timeRuns(ctx, n, 20, o.RowTime, httpGet(c, base+"/small"))
		if err != nil {
			return fail(err)
		}
		rows[i] = latencyRow(rows[i], s)
	}
	progress("egress: a %d MiB download direct and through the proxy", size>>20)
	for i, c := range []*http.Client{direct, proxied} {
		row := &rows[2+i]
		start := time.Now()
		if _, err := httpGet(c, base+"/big")(ctx); err != nil {
			row.Status, row.Detail = StatusFailed, err.Error()
			continue
		}
		row.Status, row.Value = StatusOK, ptr(float64(size)/(1<<20)/time.Since(start).Seconds())
	}
	if rows[0].Status == StatusOK && rows[1].Status == StatusOK {
		rows[1].Detail = fmt.Sprintf("adds %.3f ms at p50", rows[1].Stats.P50-rows[0].Stats.P50)
	}
	rows = append(rows, tunnelRows(ctx, o, srvLn.Addr().String(), size, progress)...)
	return append(rows, interceptRows(ctx, o, progress)...)
}

// httpGet is a probe that GETs u with c, reads the whole body, and wants
// 200 OK.
func httpGet(c *http.Client, u string) probe {
	return func(ctx context.Context) (time.Duration, error) {
		start := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return 0, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("status %s", resp.Status)
		}
		return time.Since(start), nil
	}
}
