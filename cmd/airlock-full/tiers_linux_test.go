package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// TestTiersThroughDaemon runs examples/policies/tiers.toml in a daemon: a
// create without a driver runs code without network on wasm (the policy's
// tier, not the template's native), python runs there; a create that names
// its driver keeps it; a key labelled untrusted gets the tier's microvm,
// or is refused it where the daemon lacks it, and, naming a weaker driver
// itself, the rule refuses it; each decision and its rule is in the create's answer and the audit
// log.
func TestTiersThroughDaemon(t *testing.T) {
	testcap.Require(t, "root", "userns", "wasm")
	dir := t.TempDir()
	policy, err := filepath.Abs("../../examples/policies/tiers.toml")
	if err != nil {
		t.Fatal(err)
	}
	plain := newKey(t, dir, "agent")
	o := airlockRun(t, invocation{args: []string{"keys", "create", "--state-dir", dir, "--label", "trust=untrusted", "--name", "untrusted"}})
	untrusted := strings.TrimSpace(o.stdout)
	if o.code != 0 || !strings.HasPrefix(untrusted, "airlock_") {
		t.Fatalf("keys create --label: %d %q %q", o.code, o.stdout, o.stderr)
	}
	d := startDaemon(t, dir, "--policy", policy)
	ctx := context.Background()
	c, err := client.New(d.url, plain)
	if err != nil {
		t.Fatal(err)
	}

	sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if sb.Driver != "wasm" || sb.DriverRule != "tier:plain-code" || sb.DriverReason == "" {
		t.Errorf("a create without a driver: driver %q by %q (%q), want wasm by tier:plain-code", sb.Driver, sb.DriverRule, sb.DriverReason)
	}
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Code: "print(6*7)", Language: "python"})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "42\n" {
		t.Errorf("python on the tier's wasm sandbox: %v, %+v", err, res)
	}

	named, err := c.CreateSandbox(ctx, client.CreateRequest{Driver: "native"})
	if err != nil {
		t.Fatalf("create with driver native: %v", err)
	}
	if named.Driver != "native" || named.DriverRule != "request" {
		t.Errorf("a create naming native: driver %q by %q, want native by request", named.Driver, named.DriverRule)
	}

	u, err := client.New(d.url, untrusted)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := u.CreateSandbox(ctx, client.CreateRequest{})
	var ce *client.Error
	if microvmRuns() {
		// The daemon has the microvm driver: the tier's choice runs.
		if err != nil || vm.Driver != "microvm" || vm.DriverRule != "tier:untrusted-key" {
			t.Errorf("an untrusted key's create: %+v, %v; want the microvm driver by tier:untrusted-key", vm, err)
		} else if err := u.DeleteSandbox(ctx, vm.ID); err != nil {
			t.Errorf("delete %s: %v", vm.ID, err)
		}
	} else if !errors.As(err, &ce) || !strings.Contains(err.Error(), "tier:untrusted-key") || !strings.Contains(err.Error(), "microvm") {
		t.Errorf("an untrusted key's create: %v, want a refusal naming tier:untrusted-key and microvm", err)
	}
	_, err = u.CreateSandbox(ctx, client.CreateRequest{Driver: "wasm"})
	if !errors.As(err, &ce) || ce.Status != 403 || !strings.Contains(err.Error(), "untrusted-stays-in-vms") {
		t.Errorf("an untrusted key naming wasm: %v, want 403 by rule untrusted-stays-in-vms", err)
	}

	log, err := os.ReadFile(filepath.Join(dir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"rule":"tier:plain-code"`, `"rule":"request"`, `"rule":"rule:untrusted-stays-in-vms"`} {
		if !strings.Contains(string(log), want) {
			t.Errorf("the audit log lacks %s", want)
		}
	}
	for _, id := range []string{sb.ID, named.ID} {
		if err := c.DeleteSandbox(ctx, id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	}
}

// TestMCPTiers: run_code through `airlock mcp` with the tiers policy runs
// Python on the wasm driver (sys.platform is "wasi" there).
func TestMCPTiers(t *testing.T) {
	requireMCP(t)
	testcap.Require(t, "wasm")
	policy, err := filepath.Abs("../../examples/policies/tiers.toml")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "airlock"), "mcp", "--state-dir", t.TempDir(), "--policy", policy)
	cmd.Env = mcpEnv("", "")
	cs := goClient(t, &sdk.CommandTransport{Command: cmd})
	defer cs.Close()
	if sc := runCode(t, cs, "import sys; print(6*7, sys.platform)"); sc["stdout"] != "42 wasi\n" {
		t.Fatalf("run_code under the tiers policy: %v", sc)
	}
}

// microvmRuns says whether the daemon offers the microvm driver here: it
// offers every driver whose Probe passes.
func microvmRuns() bool {
	d, err := cli.NewDriver("microvm", cli.DriverOptions{})
	return err == nil && d.Probe(context.Background()) == nil
}
