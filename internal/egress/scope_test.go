package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// attachOther attaches a second sandbox to f's proxy with n (its hosts
// and addresses set to f's) and returns a client through it trusting
// roots.
func (f *interceptFixture) attachOther(t *testing.T, id string, n sandbox.Network, roots *x509.CertPool) (*Sandbox, *http.Client) {
	t.Helper()
	p := f.srv.port
	n.Mode = sandbox.NetworkEgress
	n.AllowHosts = []string{fmt.Sprintf("api.test:%d", p), fmt.Sprintf("other.test:%d", p), fmt.Sprintf("tunnel.test:%d", p)}
	n.AllowAddresses = []string{fmt.Sprintf("127.0.0.1:%d", p)}
	sb, err := f.proxy.Attach(id, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sb.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go sb.ServeConn(c)
		}
	}()
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: ln.Addr().String()}), TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
	return sb, &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func placeholderOf(sb *Sandbox, name string) string {
	for _, kv := range sb.Env() {
		if v, ok := strings.CutPrefix(kv, SecretEnvPrefix+name+"="); ok {
			return v
		}
	}
	return ""
}

// TestScopedSecretsAndRules: a secret a template claims (Scoped) reaches
// only the sandboxes whose network names it, placeholder and injection
// both, and a network's own method and path rules hold for its sandbox
// only (the host is tunnelled for the others).
func TestScopedSecretsAndRules(t *testing.T) {
	f := newInterceptFixture(t, func(o *Options) {
		o.Secrets = []Secret{{Name: "GH", Hosts: []string{"api.test"}, Value: realSecret, Scoped: true}}
		o.Rules = nil
	})
	both := f.pki.pool.Clone()
	both.AppendCertsFromPEM(f.ca.CertPEM())
	a, ca := f.attachOther(t, "tmpl-a", sandbox.Network{Secrets: []string{"GH"},
		Rules: []sandbox.HTTPRule{{Host: "tunnel.test", Deny: []string{"POST /**"}}}}, both)
	b, cb := f.attachOther(t, "tmpl-b", sandbox.Network{}, both)

	phA := placeholderOf(a, "GH")
	if phA == "" {
		t.Fatalf("the sandbox whose network names GH has no placeholder: %v", a.Env())
	}
	if ph := placeholderOf(b, "GH"); ph != "" {
		t.Fatalf("a sandbox of another template got GH's placeholder %q", ph)
	}
	if ph := placeholderOf(f.sb, "GH"); ph != "" {
		t.Fatalf("a sandbox without scope got GH's placeholder %q", ph)
	}
	api := fmt.Sprintf("https://api.test:%d/repos/x", f.srv.port)
	r := do(t, ca, "GET", api, map[string]string{"Authorization": "Bearer " + phA})
	if r.status != 200 || f.srv.last().Auth != "Bearer "+realSecret {
		t.Fatalf("the scoped sandbox's placeholder: %d, the server got %+v", r.status, f.srv.last())
	}
	// The other template's sandbox, even holding A's placeholder, gets no
	// injection: api.test is not even intercepted for it (it has neither
	// secret nor rule there), so the server sees its own TLS and the
	// placeholder as sent.
	r = do(t, cb, "GET", api, map[string]string{"Authorization": "Bearer " + phA})
	if r.status != 200 || f.srv.last().Auth != "Bearer "+phA {
		t.Fatalf("another template's sandbox: %d, the server got %+v", r.status, f.srv.last())
	}
	if r.resp.TLS == nil || len(r.resp.TLS.PeerCertificates) == 0 || r.resp.TLS.PeerCertificates[0].Issuer.CommonName != "test root" {
		t.Fatalf("api.test was intercepted for a sandbox with no secret or rule there")
	}
	// A's own rule on tunnel.test refuses its POST; B's passes, tunnelled.
	tun := fmt.Sprintf("https://tunnel.test:%d/x", f.srv.port)
	if r := do(t, ca, "POST", tun, nil); r.status != 403 || !strings.Contains(r.body, `l7 tunnel.test deny \"POST /**\"`) {
		t.Fatalf("the network's own rule: %d %q", r.status, r.body)
	}
	if r := do(t, cb, "POST", tun, nil); r.status != 200 || r.resp.TLS.PeerCertificates[0].Issuer.CommonName != "test root" {
		t.Fatalf("another sandbox's POST to tunnel.test: %d %q", r.status, r.body)
	}
	// SetNetwork keeps the scope it is given (the daemon gives the
	// template's again).
	if err := a.SetNetwork(sandbox.Network{Mode: sandbox.NetworkEgress, AllowHosts: []string{fmt.Sprintf("tunnel.test:%d", f.srv.port)},
		AllowAddresses: []string{fmt.Sprintf("127.0.0.1:%d", f.srv.port)}}); err != nil {
		t.Fatal(err)
	}
	ca.CloseIdleConnections() // SetNetwork closed them
	if r := do(t, ca, "POST", tun, nil); r.status != 200 {
		t.Fatalf("after SetNetwork without the rule: %d %q", r.status, r.body)
	}
}

// TestPlaceholderInBody: a placeholder in a request body is left as it
// is, to the secret's own host and to any other: never substituted, never
// refused, and the value cannot leave in a body since the sandbox never
// has it.
func TestPlaceholderInBody(t *testing.T) {
	f := newInterceptFixture(t, func(o *Options) { o.Rules = nil })
	ph := f.placeholder(t, "GH")
	c := f.client(f.sandboxRoots(), true)
	for _, host := range []string{"api.test", "other.test"} {
		req, _ := http.NewRequest("POST", fmt.Sprintf("https://%s:%d/body", host, f.srv.port), strings.NewReader(`{"token":"`+ph+`"}`))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != `{"token":"`+ph+`"}` {
			t.Fatalf("%s: %d, the server got the body %q", host, resp.StatusCode, b)
		}
	}
}

// TestPolicyRequest: Options.PolicyRequest decides each request the proxy
// reads by method and path (the query left out), after the method and
// path rules, and its refusal is a 403 naming the policy's rule.
func TestPolicyRequest(t *testing.T) {
	type call struct{ host, method, path string }
	calls := make(chan call, 10)
	f := newInterceptFixture(t, func(o *Options) {
		o.Rules = nil
		o.PolicyRequest = func(_ context.Context, id, host string, port int, method, path string) (bool, string, string) {
			calls <- call{host, method, path}
			if method == "DELETE" {
				return false, "no-deletes", "agents do not delete"
			}
			return true, "", ""
		}
	})
	c := f.client(f.sandboxRoots(), true)
	base := fmt.Sprintf("https://api.test:%d", f.srv.port)
	if r := do(t, c, "GET", base+"/repos/o/r?q=1", nil); r.status != 200 {
		t.Fatalf("GET: %d %q", r.status, r.body)
	}
	if got := <-calls; got != (call{"api.test", "GET", "/repos/o/r"}) {
		t.Fatalf("the policy was asked %+v", got)
	}
	n := f.srv.count()
	if r := do(t, c, "DELETE", base+"/repos/o/r", nil); r.status != 403 || !strings.Contains(r.body, `rule "policy no-deletes"`) || !strings.Contains(r.body, "agents do not delete") {
		t.Fatalf("DELETE: %d %q", r.status, r.body)
	}
	if f.srv.count() != n {
		t.Fatal("the refused DELETE reached the server")
	}
}
