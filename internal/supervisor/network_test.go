package supervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
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
