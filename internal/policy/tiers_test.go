package policy

import (
	"context"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestTiers: the example policy's tiers choose a create's driver from the
// request; a driver the create names stays, and its rules refuse what they
// must.
func TestTiers(t *testing.T) {
	p, err := Load("../../examples/policies/tiers.toml")
	if err != nil {
		t.Fatal(err)
	}
	untrusted := map[string]string{"trust": "untrusted"}
	egress := &sandbox.Network{Mode: sandbox.NetworkEgress, AllowHosts: []string{"pypi.org"}}
	for _, c := range []struct {
		name      string
		req       Request
		driver    string
		rule      string
		verdict   Verdict
		verdictBy string
	}{
		{"plain code", Request{Driver: "native", Network: &sandbox.Network{Mode: sandbox.NetworkNone}}, "wasm", "tier:plain-code", Allow, ""},
		{"network unset is none", Request{Driver: "native"}, "wasm", "tier:plain-code", Allow, ""},
		{"network", Request{Driver: "native", Network: egress}, "gvisor", "tier:network", Allow, ""},
		{"untrusted key", Request{Driver: "native", Network: egress, Labels: untrusted}, "microvm", "tier:untrusted-key", Allow, ""},
		{"explicit driver kept", Request{Driver: "gvisor", Explicit: true}, "gvisor", "request", Allow, ""},
		{"explicit native with network refused", Request{Driver: "native", Explicit: true, Network: egress}, "native", "request", Deny, "rule:no-native-network"},
		{"untrusted picking wasm refused", Request{Driver: "wasm", Explicit: true, Labels: untrusted}, "wasm", "request", Deny, "rule:untrusted-stays-in-vms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.req.Action = ActionCreate
			got, err := p.ChooseDriver(context.Background(), c.req)
			if err != nil || got.Driver != c.driver || got.Rule != c.rule || got.Reason == "" {
				t.Fatalf("ChooseDriver: %+v, %v; want driver %s by %s, with a reason", got, err, c.driver, c.rule)
			}
			c.req.Driver = got.Driver
			d, err := p.Decide(context.Background(), c.req)
			if err != nil || d.Verdict != c.verdict || (c.verdictBy != "" && d.Rule != c.verdictBy) {
				t.Errorf("Decide on %s: %+v, %v; want %s by %q", got.Driver, d, err, c.verdict, c.verdictBy)
			}
		})
	}
}

func TestTierErrors(t *testing.T) {
	for _, c := range []struct {
		tier Tier
		want string
	}{
		{Tier{When: "true", Driver: "wasm"}, "no name"},
		{Tier{Name: "x", When: "true"}, "names no driver"},
		{Tier{Name: "x", When: `"a"`, Driver: "wasm"}, "not a bool"},
		{Tier{Name: "x", When: "nosuchvar", Driver: "wasm"}, "undeclared"},
	} {
		if _, err := New(File{Tiers: []Tier{c.tier}}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("tier %+v: %v, want an error saying %q", c.tier, err, c.want)
		}
	}
	// A tier that fails at evaluation refuses the create.
	p, err := New(File{Tiers: []Tier{{Name: "bad", When: `labels["missing"] == "x"`, Driver: "wasm"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.ChooseDriver(context.Background(), Request{Action: ActionCreate, Driver: "native"}); err == nil {
		t.Error("a tier that cannot be evaluated chose a driver")
	}
}
