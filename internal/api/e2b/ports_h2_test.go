package e2b

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// TestExposedPortsHTTP2: a listener with ServerProtocols takes HTTP/2
// without TLS (a Go client with prior knowledge); a gRPC-typed request
// goes on to the sandbox's server as HTTP/2, its trailers back to the
// client, and any other request as HTTP/1.1 (which every server speaks).
func TestExposedPortsHTTP2(t *testing.T) {
	// The sandbox's server: speaks HTTP/1.1 and h2c, says which it got.
	app := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "Grpc-Status")
		fmt.Fprintf(w, "%s %s", r.Proto, r.Host)
		w.Header().Set("Grpc-Status", "0")
	}))
	app.Config.Protocols = ServerProtocols()
	app.Start()
	defer app.Close()
	drv := &fake.Driver{Ports: func(ctx context.Context, port int) (net.Conn, error) {
		if port != 50051 {
			return nil, fmt.Errorf("port %d: %w", port, sandbox.ErrPortClosed)
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", app.Listener.Addr().String())
	}}
	cfg := supervisor.Config{Templates: []supervisor.Template{{Name: "default"}}}
	e := newEnvOpts(t, supervisor.Options{Drivers: map[string]sandbox.Driver{"native": drv}, Config: cfg}, func(o *Options) { o.Domain = "sandbox.localhost" })
	sb := e.create(e.key, `{}`)
	ts := httptest.NewUnstartedServer(e.h)
	ts.Config.Protocols = ServerProtocols()
	ts.Start()
	defer ts.Close()

	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &h2c, TLSClientConfig: &tls.Config{}}}
	host := "50051-" + sb.SandboxID + ".sandbox.localhost"
	for _, c := range []struct{ contentType, upstream string }{
		{"application/grpc", "HTTP/2.0"},
		{"application/grpc+proto", "HTTP/2.0"},
		{"text/plain", "HTTP/1.1"},
	} {
		req, _ := http.NewRequest("POST", ts.URL+"/svc/Method", strings.NewReader("x"))
		req.Host = host
		req.Header.Set("Content-Type", c.contentType)
		req.Header.Set("Te", "trailers")
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.ProtoMajor != 2 || res.StatusCode != 200 || string(b) != c.upstream+" "+host {
			t.Errorf("%s over h2c: %s %d %q; want HTTP/2 200 with the server's %q %s", c.contentType, res.Proto, res.StatusCode, b, c.upstream, host)
		}
		if c.upstream == "HTTP/2.0" && res.Trailer.Get("Grpc-Status") != "0" {
			t.Errorf("%s: trailers %v; want Grpc-Status 0", c.contentType, res.Trailer)
		}
	}
	// HTTP/1.1 clients are served as before.
	req, _ := http.NewRequest("GET", ts.URL+"/", nil)
	req.Host = host
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.ProtoMajor != 1 || string(b) != "HTTP/1.1 "+host {
		t.Errorf("HTTP/1.1: %s %q", res.Proto, b)
	}
}
