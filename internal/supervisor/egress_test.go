package supervisor

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	egresspkg "github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

func TestTemplateNetworkCeiling(t *testing.T) {
	tmpl := Template{Name: "py", Network: TemplateNetwork{
		Mode: "egress", AllowHosts: []string{"*.pypi.org:443", "example.com"},
		AllowAddresses: []string{"10.1.2.3:443"}, Deny: []string{"evil.pypi.org"},
	}}
	egress := sandbox.NetworkEgress
	tests := []struct {
		name    string
		req     sandbox.Network
		want    sandbox.Network
		wantErr string
	}{
		{name: "default is the template's", want: sandbox.Network{Mode: egress, AllowHosts: tmpl.Network.AllowHosts, AllowAddresses: tmpl.Network.AllowAddresses, Deny: tmpl.Network.Deny}},
		{name: "narrower", req: sandbox.Network{AllowHosts: []string{"files.pypi.org:443", "example.com:80"}}, want: sandbox.Network{Mode: egress, AllowHosts: []string{"files.pypi.org:443", "example.com:80"}, Deny: []string{"evil.pypi.org"}}},
		{name: "none", req: sandbox.Network{Mode: sandbox.NetworkNone}, want: sandbox.Network{Mode: sandbox.NetworkNone}},
		{name: "own deny kept", req: sandbox.Network{Mode: egress, Deny: []string{"x.pypi.org"}}, want: sandbox.Network{Mode: egress, Deny: []string{"x.pypi.org", "evil.pypi.org"}}},
		{name: "wider host", req: sandbox.Network{AllowHosts: []string{"*.org:443"}}, wantErr: `allow host "*.org:443"`},
		{name: "other port", req: sandbox.Network{AllowHosts: []string{"files.pypi.org:80"}}, wantErr: `allow host "files.pypi.org:80"`},
		{name: "any port", req: sandbox.Network{AllowHosts: []string{"example.com:22"}}, wantErr: `allow host "example.com:22"`},
		{name: "address", req: sandbox.Network{AllowAddresses: []string{"10.1.2.4:443"}}, wantErr: `allow address "10.1.2.4:443"`},
		{name: "report", req: sandbox.Network{Mode: egress, Report: true}, wantErr: "report mode"},
		{name: "invalid", req: sandbox.Network{AllowHosts: []string{"http://x"}}, wantErr: `host pattern "http://x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tmpl.network(tt.req)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("network(%+v) = %v, want error containing %q", tt.req, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Mode != tt.want.Mode || !slices.Equal(got.AllowHosts, tt.want.AllowHosts) || !slices.Equal(got.AllowAddresses, tt.want.AllowAddresses) || !slices.Equal(got.Deny, tt.want.Deny) || got.Report != tt.want.Report {
				t.Fatalf("network(%+v) = %+v, want %+v", tt.req, got, tt.want)
			}
		})
	}
	// A template without egress allows none.
	if _, err := (Template{Name: "d"}).network(sandbox.Network{AllowHosts: []string{"example.com"}}); err == nil || !strings.Contains(err.Error(), "mode egress") {
		t.Fatalf("default template allowed egress: %v", err)
	}
}

func TestEgressConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "c.toml")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := LoadConfig(write(`
[egress]
max_bytes = "10M"
[[egress.secret]]
host = "api.example.com"
header = "Authorization"
value = "Bearer top-secret"
[[template]]
name = "py"
[template.network]
mode = "egress"
allow_hosts = ["*.pypi.org:443"]
`))
	if err != nil {
		t.Fatal(err)
	}
	o := c.Egress.ProxyOptions(nil)
	if o.Limits.MaxBytes != 10<<20 || len(o.Secrets) != 1 || string(o.Secrets[0].Value) != "Bearer top-secret" {
		t.Fatalf("proxy options %+v", o)
	}
	if s := c.Templates[0].spec(); s.Network.Mode != sandbox.NetworkEgress || len(s.Network.AllowHosts) != 1 {
		t.Fatalf("template spec network %+v", s.Network)
	}
	for _, bad := range []string{
		"[[egress.secret]]\nhost = \"*.example.com\"\nheader = \"A\"\nvalue = \"x\"\n",
		"[[egress.secret]]\nhost = \"a.com\"\nheader = \"A\"\nvalue = \"x\\ny\"\n",
		"[[template]]\nname = \"t\"\n[template.network]\nmode = \"none\"\nallow_hosts = [\"a.com\"]\n",
	} {
		if _, err := LoadConfig(write(bad)); err == nil {
			t.Errorf("config accepted:\n%s", bad)
		}
	}
}

// TestEgressInterceptConfig: named secrets with their value in the
// daemon's environment, method and path rules, and the CA the daemon
// makes in its state directory once either is configured.
func TestEgressInterceptConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "c.toml")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Setenv("AIRLOCK_TEST_TOKEN", "tok-from-env")
	c, err := LoadConfig(write(`
[[egress.secret]]
name = "GH"
hosts = ["api.github.com", "uploads.github.com"]
header = "Authorization"
template = "Bearer {}"
value_env = "AIRLOCK_TEST_TOKEN"
[[egress.rule]]
host = "api.github.com"
allow = ["GET /repos/**"]
deny = ["* /admin/**"]
`))
	if err != nil {
		t.Fatal(err)
	}
	o := c.Egress.ProxyOptions(nil)
	if len(o.Secrets) != 1 || string(o.Secrets[0].Value) != "tok-from-env" || o.Secrets[0].Name != "GH" || len(o.Secrets[0].Hosts) != 2 || len(o.Rules) != 1 {
		t.Fatalf("proxy options %+v", o)
	}
	state := t.TempDir()
	if err := c.Egress.Intercept(&o, state); err != nil || o.CA == nil {
		t.Fatalf("intercept: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(state, "egress-ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA key: %v", err)
	}
	var none EgressConfig
	var o2 egressOptions
	if err := none.Intercept(&o2, state); err != nil || o2.CA != nil {
		t.Fatalf("no secrets or rules, yet a CA: %v", err)
	}
	for _, bad := range []string{
		"[[egress.secret]]\nname = \"gh\"\nhosts = [\"a.com\"]\nvalue = \"x\"\n",
		"[[egress.secret]]\nname = \"GH\"\nhosts = [\"a.com\"]\nvalue_env = \"AIRLOCK_TEST_UNSET_VAR\"\n",
		"[[egress.secret]]\nname = \"GH\"\nvalue = \"x\"\n",
		"[[egress.rule]]\nhost = \"a.com\"\nallow = [\"GET repos\"]\n",
		"[egress]\nupstream_ca_bundle = \"/nonexistent\"\n[[egress.rule]]\nhost = \"a.com\"\n",
	} {
		c, err := LoadConfig(write(bad))
		if err == nil {
			var o egressOptions
			err = c.Egress.Intercept(&o, t.TempDir())
		}
		if err == nil {
			t.Errorf("config accepted:\n%s", bad)
		}
	}
}

// egressOptions is the proxy's options (the package's tests name a local
// variable egress).
type egressOptions = egresspkg.Options

// TestRecordEgressIntercepted: an intercepted request's audit event names
// its method, path and the secrets put into it.
func TestRecordEgressIntercepted(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	al, err := audit.Open(filepath.Join(dir, "audit.log"), audit.Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	sup, err := New(Options{Store: st, Drivers: map[string]sandbox.Driver{"native": &fake.Driver{}}, Audit: al,
		MemAvailable: func() (int64, error) { return 64 << 30, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(context.Background())
	sup.RecordEgress(egresspkg.Decision{SandboxID: "sb-1", Method: "GET", Host: "api.test", Port: 443, Path: "/repos/o/r",
		Outcome: "allow", Status: 200, Intercepted: true, Secrets: []string{"GH"}})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		p, err := al.Query(context.Background(), audit.Query{Kinds: []audit.Kind{audit.KindEgress}})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Events) == 1 {
			var ev audit.Event
			if err := json.Unmarshal(p.Events[0], &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Method != "GET" || ev.Path != "/repos/o/r" || len(ev.Secrets) != 1 || ev.Secrets[0] != "GH" || ev.Host != "api.test" {
				t.Fatalf("audit event %+v", ev)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no egress event: %+v", p)
		}
	}
}

// TestTemplateSecretsAndRules: a secret a template names is scoped to
// that template's sandboxes (the proxy gives it to the networks naming
// it), a template's rules reach its sandboxes' networks (and make the
// daemon a CA), and a create may name fewer of the secrets, not others.
func TestTemplateSecretsAndRules(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.toml")
	write := func(s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`
[[egress.secret]]
name = "GH"
hosts = ["api.github.com"]
value = "tok"
[[egress.secret]]
name = "ALL"
hosts = ["x.example.com"]
value = "tok2"
[[template]]
name = "agent"
[template.network]
mode = "egress"
allow_hosts = ["api.github.com", "pypi.org"]
secrets = ["GH"]
[[template.network.rule]]
host = "pypi.org"
allow = ["GET /simple/**"]
[[template]]
name = "other"
[template.network]
mode = "egress"
allow_hosts = ["api.github.com"]
`)
	c, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	o := c.Egress.ProxyOptions(nil)
	if len(o.Secrets) != 2 || !o.Secrets[0].Scoped || o.Secrets[1].Scoped {
		t.Fatalf("GH must be scoped (a template names it), ALL not: %+v", o.Secrets)
	}
	agent, other := c.Templates[0], c.Templates[1]
	if n := agent.spec().Network; !slices.Equal(n.Secrets, []string{"GH"}) || len(n.Rules) != 1 || n.Rules[0].Host != "pypi.org" {
		t.Fatalf("agent's default network %+v", n)
	}
	if n := other.spec().Network; len(n.Secrets) != 0 || len(n.Rules) != 0 {
		t.Fatalf("other's default network %+v", n)
	}
	// A create narrowing the hosts keeps the template's secrets and
	// rules, adds its own rules, and may drop secrets but not add any.
	n, err := agent.network(sandbox.Network{AllowHosts: []string{"pypi.org"}, Rules: []sandbox.HTTPRule{{Host: "pypi.org", Deny: []string{"POST"}}}})
	if err != nil || !slices.Equal(n.Secrets, []string{"GH"}) || len(n.Rules) != 2 || n.Rules[1].Deny[0] != "POST" {
		t.Fatalf("narrowed create: %+v %v", n, err)
	}
	if n, err := agent.network(sandbox.Network{AllowHosts: []string{"pypi.org"}, Secrets: []string{}}); err != nil || len(n.Secrets) != 0 {
		t.Fatalf("a create dropping the secrets: %+v %v", n, err)
	}
	if _, err := other.network(sandbox.Network{Secrets: []string{"GH"}}); err == nil || !strings.Contains(err.Error(), `secret "GH"`) {
		t.Fatalf("another template's create named GH: %v", err)
	}
	if _, err := agent.network(sandbox.Network{Rules: []sandbox.HTTPRule{{Host: "pypi.org", Allow: []string{"GET x"}}}}); err == nil {
		t.Fatal("a create's bad rule was accepted")
	}
	// Rules in a template alone make the daemon its CA.
	write("[[template]]\nname = \"t\"\n[template.network]\nmode = \"egress\"\n[[template.network.rule]]\nhost = \"a.com\"\ndeny = [\"POST\"]\n")
	c, err = LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	var o2 egressOptions
	if err := c.Egress.Intercept(&o2, t.TempDir()); err != nil || o2.CA == nil {
		t.Fatalf("a template's rules made no CA: %v", err)
	}
	for _, bad := range []string{
		"[[template]]\nname = \"t\"\n[template.network]\nmode = \"egress\"\nsecrets = [\"NOPE\"]\n",
		"[[template]]\nname = \"t\"\n[template.network]\nsecrets = [\"GH\"]\n[[egress.secret]]\nname = \"GH\"\nhosts = [\"a.com\"]\nvalue = \"x\"\n",
		"[[template]]\nname = \"t\"\n[template.network]\nmode = \"egress\"\n[[template.network.rule]]\nhost = \"a.com\"\nallow = [\"GET repos\"]\n",
	} {
		write(bad)
		if _, err := LoadConfig(p); err == nil {
			t.Errorf("config accepted:\n%s", bad)
		}
	}
}
