package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// egressProgram fetches each URL of its arguments and prints one line per
// URL: "ok URL BODY" or "failed URL WHY".
const egressProgram = `
import sys, urllib.request, urllib.error
for u in sys.argv[1:]:
    try:
        print("ok", u, urllib.request.urlopen(u, timeout=10).read().decode())
    except urllib.error.HTTPError as e:
        print("failed", u, "http", e.code)
    except Exception as e:
        print("failed", u, type(e).__name__, e)
`

// TestE2EEgressLoopback: `airlock run --allow-address 127.0.0.1:PORT`
// reaches a server on the host's loopback, directly (NO_PROXY names
// 127.0.0.1) and through the proxy port, on every driver that runs
// egress sandboxes from the CLI; a loopback port it does not allow stays
// out of reach both ways.
func TestE2EEgressLoopback(t *testing.T) {
	requireE2E(t)
	serve := func(body string) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &httptest.Server{Listener: ln, Config: &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(body))
		})}}
		srv.Start()
		t.Cleanup(srv.Close)
		return ln.Addr().String()
	}
	allowed, other := serve("allowed-page"), serve("other-page")
	for _, drv := range []string{"native", "gvisor"} {
		t.Run(drv, func(t *testing.T) {
			if drv == "gvisor" {
				testcap.Require(t, "runsc")
			}
			urls := []string{"http://" + allowed + "/", "http://" + other + "/"}
			run := func(env ...string) string {
				args := []string{"--driver", drv, "--allow-address", allowed}
				for _, e := range env {
					args = append(args, "--env", e)
				}
				args = append(append(args, "--", "python3", "-c", egressProgram), urls...)
				o := airlockRun(t, runArgs(args...))
				if o.code != 0 {
					t.Fatalf("airlock run: exit %d, stdout %q, stderr %q", o.code, o.stdout, o.stderr)
				}
				return o.stdout
			}
			for _, c := range []struct {
				name string
				env  []string
			}{
				{"direct", nil},
				{"through the proxy port", []string{"NO_PROXY=", "no_proxy="}},
			} {
				out := run(c.env...)
				if !strings.Contains(out, "ok "+urls[0]+" allowed-page\n") {
					t.Errorf("%s: the allowed address %s was not reached: %q", c.name, allowed, out)
				}
				if !strings.Contains(out, "failed "+urls[1]) || strings.Contains(out, "other-page") {
					t.Errorf("%s: the address %s, not allowed, was reached: %q", c.name, other, out)
				}
			}
		})
	}
}
