package supervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// egressFake is the fake driver declaring egress.
type egressFake struct{ *fake.Driver }

func (d egressFake) Capabilities() sandbox.Capabilities {
	c := d.Driver.Capabilities()
	c.Egress = true
	return c
}

// TestSetNetworkBounds checks that a running sandbox's new network is
// bounded as a create's: beyond the template refused (ErrInvalid), beyond
// the policy's [network] refused with rule "network", never narrowed; a
// sandbox made without egress cannot gain it.
func TestSetNetworkBounds(t *testing.T) {
	dir := t.TempDir()
	pf := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(pf, []byte("[network]\nallow = [\"a.example.com\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(pf)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := Config{Templates: []Template{{Name: "default", Network: TemplateNetwork{Mode: "egress", AllowHosts: []string{"a.example.com", "b.example.com"}}}}}
	sup, err := New(Options{Store: st, Drivers: map[string]sandbox.Driver{"native": egressFake{&fake.Driver{}}}, Config: cfg, Policy: pol,
		MemAvailable: func() (int64, error) { return 64 << 30, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(context.Background())
	ctx := context.Background()
	c := Caller{KeyID: "key-a"}
	info, err := sup.Create(ctx, c, CreateRequest{Network: sandbox.Network{AllowHosts: []string{"a.example.com"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sup.SetNetwork(ctx, c, info.ID, sandbox.Network{AllowHosts: []string{"c.example.com"}})
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), `allow host "c.example.com"`) {
		t.Errorf("a network beyond the template: %v, want ErrInvalid naming the host", err)
	}
	_, err = sup.SetNetwork(ctx, c, info.ID, sandbox.Network{AllowHosts: []string{"b.example.com"}})
	var denied *policy.Denied
	if !errors.As(err, &denied) || denied.Decision.Rule != "network" || !strings.Contains(err.Error(), "b.example.com") {
		t.Errorf("a network the template allows and the policy does not: %v, want a denial by rule network naming the host", err)
	}
	// Within both, the policy lets it through to the instance: the fake
	// one cannot change its network.
	if _, err = sup.SetNetwork(ctx, c, info.ID, sandbox.Network{AllowHosts: []string{"a.example.com"}}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("a network within both, on an instance that cannot change it: %v, want ErrUnsupported", err)
	}
	none, err := sup.Create(ctx, c, CreateRequest{Network: sandbox.Network{Mode: sandbox.NetworkNone}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sup.SetNetwork(ctx, c, none.ID, sandbox.Network{AllowHosts: []string{"a.example.com"}})
	if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "made without network") {
		t.Errorf("egress for a sandbox made without network: %v, want ErrUnsupported", err)
	}
	if _, err := sup.SetNetwork(ctx, Caller{KeyID: "key-b"}, info.ID, sandbox.Network{}); !errors.Is(err, ErrForbidden) {
		t.Errorf("another key's sandbox: %v, want forbidden", err)
	}
}

// TestCreateCarriesTemplateSecretsAndRules: the network a driver gets
// for a create (and so the egress proxy's Attach) carries the template's
// secrets and rules, whether the create asks for no network or a
// narrower one; a create of another template carries neither.
func TestCreateCarriesTemplateSecretsAndRules(t *testing.T) {
	st, err := store.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rule := sandbox.HTTPRule{Host: "a.example.com", Allow: []string{"GET /**"}}
	cfg := Config{Egress: EgressConfig{Secrets: []EgressSecret{{Name: "GH", Hosts: []string{"a.example.com"}, Value: "x"}}}, Templates: []Template{
		{Name: "default", Network: TemplateNetwork{Mode: "egress", AllowHosts: []string{"a.example.com"}}},
		{Name: "agent", Network: TemplateNetwork{Mode: "egress", AllowHosts: []string{"a.example.com", "b.example.com"},
			Secrets: []string{"GH"}, Rules: []sandbox.HTTPRule{rule}}},
	}}
	drv := &fake.Driver{}
	sup, err := New(Options{Store: st, Drivers: map[string]sandbox.Driver{"native": egressFake{drv}}, Config: cfg,
		MemAvailable: func() (int64, error) { return 64 << 30, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(context.Background())
	ctx := context.Background()
	c := Caller{KeyID: "key-a"}
	for _, req := range []CreateRequest{{Template: "agent"}, {Template: "agent", Network: sandbox.Network{AllowHosts: []string{"b.example.com"}}}, {Template: "default"}} {
		if _, err := sup.Create(ctx, c, req); err != nil {
			t.Fatal(err)
		}
	}
	specs := drv.Specs()
	if len(specs) != 3 {
		t.Fatalf("%d creates reached the driver", len(specs))
	}
	for i, s := range specs[:2] {
		if n := s.Network; !slices.Equal(n.Secrets, []string{"GH"}) || len(n.Rules) != 1 || n.Rules[0].Host != rule.Host {
			t.Errorf("create %d of template agent: network %+v, want its secrets and rules", i, n)
		}
	}
	if n := specs[2].Network; len(n.Secrets) != 0 || len(n.Rules) != 0 {
		t.Errorf("a create of another template: network %+v, want no secrets or rules", n)
	}
}

// TestEgressRequestPolicy: a policy rule in CEL can decide an egress
// request by its method and path (the proxy asks for each request it
// reads), while the CONNECT's decision (no method) is unchanged.
func TestEgressRequestPolicy(t *testing.T) {
	dir := t.TempDir()
	pf := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(pf, []byte(`
[[rule]]
name = "no-deletes-upstream"
when = 'action == "egress" && method == "DELETE" && path.startsWith("/repos/")'
decision = "deny"
reason = "agents do not delete repositories"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(pf)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := Config{Templates: []Template{{Name: "default", Network: TemplateNetwork{Mode: "egress", AllowHosts: []string{"api.example.com"}}}}}
	sup, err := New(Options{Store: st, Drivers: map[string]sandbox.Driver{"native": egressFake{&fake.Driver{}}}, Config: cfg, Policy: pol,
		MemAvailable: func() (int64, error) { return 64 << 30, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(context.Background())
	ctx := context.Background()
	info, err := sup.Create(ctx, Caller{KeyID: "key-a"}, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ok, rule, reason := sup.EgressDecision(ctx, info.ID, "api.example.com", 443); !ok {
		t.Fatalf("the CONNECT was refused: %s %s", rule, reason)
	}
	if ok, rule, reason := sup.EgressRequestDecision(ctx, info.ID, "api.example.com", 443, "GET", "/repos/o/r"); !ok {
		t.Fatalf("a GET was refused: %s %s", rule, reason)
	}
	if ok, rule, reason := sup.EgressRequestDecision(ctx, info.ID, "api.example.com", 443, "DELETE", "/repos/o/r"); ok || rule != "rule:no-deletes-upstream" || !strings.Contains(reason, "delete repositories") {
		t.Fatalf("a DELETE: allow %v, rule %q, reason %q; want the rule's denial", ok, rule, reason)
	}
}

// changerFake is egressFake whose instances can change their network.
type changerFake struct{ egressFake }

type changerInstance struct {
	sandbox.Instance
	got *[]sandbox.Network
}

func (i changerInstance) SetNetwork(n sandbox.Network) error { *i.got = append(*i.got, n); return nil }

var changed []sandbox.Network

func (d changerFake) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	in, err := d.egressFake.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return changerInstance{in, &changed}, nil
}

// TestSetNetworkKeepsSecretsAndRules: a change of network that names no
// secrets or rules keeps what the sandbox got at create (a create that
// dropped the template's secret does not get it back), one that names
// them is bounded by the template as a create is.
func TestSetNetworkKeepsSecretsAndRules(t *testing.T) {
	st, err := store.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	own := sandbox.HTTPRule{Host: "a.example.com", Deny: []string{"POST"}}
	cfg := Config{Egress: EgressConfig{Secrets: []EgressSecret{{Name: "GH", Hosts: []string{"a.example.com"}, Header: "Authorization", Value: "x"}}},
		Templates: []Template{{Name: "default", Network: TemplateNetwork{Mode: "egress", AllowHosts: []string{"a.example.com", "b.example.com"}, Secrets: []string{"GH"}}}}}
	sup, err := New(Options{Store: st, Drivers: map[string]sandbox.Driver{"native": changerFake{egressFake{&fake.Driver{}}}}, Config: cfg,
		MemAvailable: func() (int64, error) { return 64 << 30, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(context.Background())
	ctx := context.Background()
	c := Caller{KeyID: "key-a"}
	info, err := sup.Create(ctx, c, CreateRequest{Network: sandbox.Network{AllowHosts: []string{"a.example.com"}, Secrets: []string{}, Rules: []sandbox.HTTPRule{own}}})
	if err != nil {
		t.Fatal(err)
	}
	changed = nil
	if _, err := sup.SetNetwork(ctx, c, info.ID, sandbox.Network{AllowHosts: []string{"b.example.com"}}); err != nil {
		t.Fatal(err)
	}
	if len(changed) != 1 || len(changed[0].Secrets) != 0 || len(changed[0].Rules) != 1 || changed[0].Rules[0].Host != own.Host {
		t.Fatalf("the change gave the instance %+v; want no secrets (the create dropped them) and the create's rule", changed)
	}
	if _, err := sup.SetNetwork(ctx, c, info.ID, sandbox.Network{AllowHosts: []string{"b.example.com"}, Secrets: []string{"GH"}}); err != nil {
		t.Fatal(err)
	}
	if n := changed[len(changed)-1]; !slices.Equal(n.Secrets, []string{"GH"}) {
		t.Fatalf("a change naming the template's secret: %+v", n)
	}
	if _, err := sup.SetNetwork(ctx, c, info.ID, sandbox.Network{Secrets: []string{"OTHER"}}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("a change naming a secret the template does not: %v, want ErrInvalid", err)
	}
}
