package bench

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// interceptDownload is the size of the intercepted download (issue 36: a
// 100 MB download).
const interceptDownload = 100 << 20

// interceptRows measure what interception adds to HTTPS through the proxy
// (docs/decisions.md, 55): an HTTPS server on 127.0.0.1 with a CA of the
// bench's own, reached by a Go client through the proxy under two names,
// one tunnelled (CONNECT as bytes) and one the proxy intercepts (a method
// and path rule names it: decrypted, checked, sent on over TLS of its
// own). The tunnelled rows are the baselines.
func interceptRows(ctx context.Context, o Options, progress func(string, ...any)) []Row {
	rows := interceptTemplate()
	fail := func(err error) []Row {
		for i := range rows {
			rows[i].Status, rows[i].Detail = StatusFailed, err.Error()
		}
		return rows
	}
	roots, rootPEM, cert, err := benchPKI("tunnel.test", "intercept.test")
	if err != nil {
		return fail(err)
	}
	small := make([]byte, 1024)
	chunk := make([]byte, 1<<20)
	srvLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/big" {
				_, _ = w.Write(small)
				return
			}
			w.Header().Set("Content-Length", strconv.Itoa(interceptDownload))
			for left := interceptDownload; left > 0; left -= len(chunk) {
				if _, err := w.Write(chunk[:min(left, len(chunk))]); err != nil {
					return
				}
			}
		})}
	go func() { _ = srv.ServeTLS(srvLn, "", "") }()
	defer srv.Close()
	port := srvLn.Addr().(*net.TCPAddr).Port

	dir, err := os.MkdirTemp("", "airlock-bench-ca-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	ca, err := egress.LoadCA(dir)
	if err != nil {
		return fail(err)
	}
	proxy := egress.New(egress.Options{
		Limits:        egress.Limits{RequestsPerSecond: 1e9, Burst: 1 << 30, MaxBytes: 1 << 50, MaxConns: 1 << 20},
		Resolver:      loopbackResolver{},
		CA:            ca,
		UpstreamRoots: roots,
		Rules:         []egress.HostRule{{Host: "intercept.test", Allow: []string{"GET /**"}}},
	})
	sb, err := proxy.Attach("bench-intercept", sandbox.Network{Mode: sandbox.NetworkEgress,
		AllowHosts:     []string{fmt.Sprintf("tunnel.test:%d", port), fmt.Sprintf("intercept.test:%d", port)},
		AllowAddresses: []string{srvLn.Addr().String()}})
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
	// The client trusts the server's CA (what it sees tunnelled) and the
	// proxy's (what it sees intercepted), as a sandbox's bundle does.
	trust := roots.Clone()
	trust.AppendCertsFromPEM(ca.CertPEM())
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: pxLn.Addr().String()}),
		TLSClientConfig: &tls.Config{RootCAs: trust}, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 4}}
	defer client.CloseIdleConnections()
	n := max(o.TrueRuns*5, 100)
	progress("egress: %d HTTPS requests through the proxy, tunnelled and intercepted", n)
	for i, host := range []string{"tunnel.test", "intercept.test"} {
		s, err := timeRuns(ctx, n, 20, o.RowTime, httpGet(client, fmt.Sprintf("https://%s:%d/small", host, port)))
		if err != nil {
			return fail(err)
		}
		rows[i] = latencyRow(rows[i], s)
	}
	// Direct: the same client without the proxy, tunnel.test dialled at
	// the server's address.
	var dialer net.Dialer
	direct := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, srvLn.Addr().String())
		}}}
	defer direct.CloseIdleConnections()
	progress("egress: a 100 MiB HTTPS download, direct, then through the proxy tunnelled and intercepted")
	for i, c := range []struct {
		client *http.Client
		host   string
	}{{direct, "tunnel.test"}, {client, "tunnel.test"}, {client, "intercept.test"}} {
		row := &rows[2+i]
		d, err := httpGet(c.client, fmt.Sprintf("https://%s:%d/big", c.host, port))(ctx)
		if err != nil {
			row.Status, row.Detail = StatusFailed, err.Error()
			continue
		}
		row.Status, row.Value = StatusOK, ptr(float64(interceptDownload)/(1<<20)/d.Seconds())
	}
	if rows[0].Status == StatusOK && rows[1].Status == StatusOK {
		rows[1].Detail = fmt.Sprintf("adds %.3f ms at p50", rows[1].Stats.P50-rows[0].Stats.P50)
	}
	sandboxHTTPSRows(ctx, o, proxy, rootPEM, srvLn.Addr().String(), rows[5:], progress)
	return rows
}

// loopbackResolver answers 127.0.0.1 for every name.
type loopbackResolver struct{}

func (loopbackResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

// benchPKI makes a CA and a server certificate it signs for names.
func benchPKI(names ...string) (*x509.CertPool, []byte, tls.Certificate, error) {
	serial := func() *big.Int { n, _ := rand.Int(rand.Reader, big.NewInt(1<<62)); return n }
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, tls.Certificate{}, err
	}
	caTmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "airlock bench root"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, tls.Certificate{}, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, tls.Certificate{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, tls.Certificate{}, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	return pool, caPEM, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// interceptTemplate returns the interception rows, not measured yet. The
// intercepted downloads are set beside a direct download first (the
// target of issue 36 is a fraction of direct), then beside the tunnelled
// one.
func interceptTemplate() []Row {
	return []Row{
		{Section: "egress", ID: "egress/https-tunnel", What: "GET 1 KiB over HTTPS (HTTP/2) on loopback through the proxy, tunnelled", Unit: UnitMS},
		{Section: "egress", ID: "egress/https-intercept", What: "the same GET, intercepted: decrypted with the daemon's CA, a method and path rule checked, sent on over TLS", Unit: UnitMS,
			Compare: []Comparison{{Baseline: "egress/https-tunnel", Name: "tunnel"}}},
		{Section: "egress", ID: "egress/https-direct-download", What: "100 MiB HTTPS download on loopback, the same Go client, direct (higher is better)", Unit: UnitMiBps},
		{Section: "egress", ID: "egress/https-tunnel-download", What: "100 MiB HTTPS download on loopback through the proxy, tunnelled (higher is better)", Unit: UnitMiBps,
			Compare: []Comparison{{Baseline: "egress/https-direct-download", Name: "direct"}}},
		{Section: "egress", ID: "egress/https-intercept-download", What: "the same download, intercepted (higher is better)", Unit: UnitMiBps,
			Compare: []Comparison{{Baseline: "egress/https-direct-download", Name: "direct"}, {Baseline: "egress/https-tunnel-download", Name: "tunnel"}}},
		{Section: "egress", ID: "egress/sandbox-https-tunnel", What: "GET 1 KiB over HTTPS (HTTP/1.1) on loopback, python3 in a sandbox through its agent tunnel and the proxy, tunnelled (native)", Unit: UnitMS},
		{Section: "egress", ID: "egress/sandbox-https-intercept", What: "the same GET from the sandbox, intercepted (the sandbox's CA bundle, a method and path rule)", Unit: UnitMS,
			Compare: []Comparison{{Baseline: "egress/sandbox-https-tunnel", Name: "tunnel"}}},
		{Section: "egress", ID: "egress/sandbox-https-direct-download", What: "100 MiB HTTPS download, the same python3 on the host, direct (higher is better)", Unit: UnitMiBps},
		{Section: "egress", ID: "egress/sandbox-https-tunnel-download", What: "100 MiB HTTPS download, python3 in a sandbox, tunnelled (native; higher is better)", Unit: UnitMiBps,
			Compare: []Comparison{{Baseline: "egress/sandbox-https-direct-download", Name: "direct"}}},
		{Section: "egress", ID: "egress/sandbox-https-intercept-download", What: "the same download from the sandbox, intercepted (higher is better)", Unit: UnitMiBps,
			Compare: []Comparison{{Baseline: "egress/sandbox-https-direct-download", Name: "direct"}, {Baseline: "egress/sandbox-https-tunnel-download", Name: "tunnel"}}},
	}
}
