package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// TestRunWasm: airlock run --driver wasm runs Python; what it cannot do is
// refused with what to use instead; --module runs a WASI command module of
// the user's own with its arguments and exit code.
func TestRunWasm(t *testing.T) {
	testcap.Require(t, "wasm")
	if o := airlockRun(t, invocation{args: []string{"run", "--driver", "wasm", "--", "python3", "-c", "print(6*7)"}}); o.code != 0 || o.stdout != "42\n" {
		t.Errorf("python3 on wasm: %d %q %q", o.code, o.stdout, o.stderr)
	}
	o := airlockRun(t, invocation{args: []string{"run", "--driver", "wasm", "--network", "egress", "--allow-host", "example.com", "--", "python3", "-c", "1"}})
	if o.code != cli.ExitAirlock || !strings.Contains(o.stderr, "no sockets") || !strings.Contains(o.stderr, "gvisor") {
		t.Errorf("--network egress on wasm: %d %q, want a refusal naming another driver", o.code, o.stderr)
	}
	if o := airlockRun(t, invocation{args: []string{"run", "--driver", "wasm", "--", "sh", "-c", "true"}}); o.code != 127 || !strings.Contains(o.stderr, "no shell") {
		t.Errorf("sh on wasm: %d %q, want 127 and why", o.code, o.stderr)
	}

	mod := filepath.Join(t.TempDir(), "echo.wasm")
	build := exec.Command("go", "build", "-o", mod, "../../internal/driver/wasm/testdata/echo")
	build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the test module: %v\n%s", err, out)
	}
	o = airlockRun(t, invocation{args: []string{"run", "--module", mod, "-e", "EXIT=5", "--", "hello", "world"}})
	if o.code != 5 || o.stdout != "hello world\n" {
		t.Errorf("--module: %d %q %q, want exit 5 and its arguments", o.code, o.stdout, o.stderr)
	}
	if o := airlockRun(t, invocation{args: []string{"run", "--driver", "native", "--module", mod}}); o.code == 0 || !strings.Contains(o.stderr, "--driver wasm") {
		t.Errorf("--module with --driver native: %d %q", o.code, o.stderr)
	}
}
