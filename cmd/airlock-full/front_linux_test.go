package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/fullbin"
)

// The front (cmd/airlock, docs/decisions.md) is built here as `make` builds
// it, but with the complete airlock that TestMain built named by
// AIRLOCK_FULL instead of embedded.

var (
	frontOnce sync.Once
	frontDir  string
	frontErr  error
)

// buildFront builds the front into a directory of its own beside a link to
// the agent, and returns the directory.
func buildFront(t *testing.T) string {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	frontOnce.Do(func() {
		frontDir = filepath.Join(binDir, "front")
		if frontErr = os.MkdirAll(frontDir, 0o755); frontErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(frontDir, "airlock"), "github.com/airlock-sandbox/airlock/cmd/airlock")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			frontErr = &buildError{err, out}
			return
		}
		frontErr = os.Symlink(filepath.Join(binDir, "airlock-agent"), filepath.Join(frontDir, "airlock-agent"))
	})
	if frontErr != nil {
		t.Fatal(frontErr)
	}
	return frontDir
}

type buildError struct {
	err error
	out []byte
}

func (e *buildError) Error() string {
	return "go build ./cmd/airlock: " + e.err.Error() + "\n" + string(e.out)
}

// frontRun runs the front with args, the complete airlock named by
// AIRLOCK_FULL.
func frontRun(t *testing.T, env []string, args ...string) outcomeOf {
	t.Helper()
	return airlockRun(t, invocation{args: args, bin: buildFront(t),
		env: append([]string{fullbin.Env + "=" + filepath.Join(binDir, "airlock")}, env...)})
}

// heavyPackages are the module paths whose package initialisation a
// start of the front must not pay for (the speed issue's list, and the
// object store's SDK).
var heavyPackages = []string{"k8s.io/", "sigs.k8s.io/", "github.com/moby/", "github.com/docker/",
	"github.com/google/cel-go/", "cel.dev/", "github.com/prometheus/", "github.com/tetratelabs/wazero",
	"github.com/aws/"}

// initialised lists the packages GODEBUG=inittrace=1 says a start of bin
// with args initialised.
func initialised(t *testing.T, bin string, args ...string) []string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
	}
	var pkgs []string
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "init "); ok {
			pkg, _, _ := strings.Cut(rest, " ")
			pkgs = append(pkgs, pkg)
		}
	}
	if len(pkgs) == 0 || !strings.Contains(string(out), "airlock version") {
		t.Fatalf("%s %s printed no inittrace or no version:\n%s", bin, strings.Join(args, " "), out)
	}
	return pkgs
}

func heavyIn(pkgs []string) []string {
	var heavy []string
	for _, p := range pkgs {
		for _, h := range heavyPackages {
			if strings.HasPrefix(p, h) {
				heavy = append(heavy, p)
				break
			}
		}
	}
	return heavy
}

// TestFrontInitialisesNoHeavyPackage: `airlock --version` of the front
// initialises none of the packages of Kubernetes, Docker, CEL, Prometheus,
// wazero or the AWS SDK, which the complete airlock does.
func TestFrontInitialisesNoHeavyPackage(t *testing.T) {
	front := filepath.Join(buildFront(t), "airlock")
	if heavy := heavyIn(initialised(t, front, "--version")); len(heavy) > 0 {
		t.Errorf("the front's --version initialises %d heavy packages, e.g. %q: keep them out of internal/cli and the packages it imports", len(heavy), heavy[:min(5, len(heavy))])
	}
	// The check sees them where they are.
	full := heavyIn(initialised(t, filepath.Join(binDir, "airlock"), "--version"))
	for _, want := range []string{"github.com/google/cel-go/", "github.com/prometheus/", "k8s.io/"} {
		found := false
		for _, p := range full {
			found = found || strings.HasPrefix(p, want)
		}
		if !found {
			t.Errorf("the complete airlock initialises no %s package: is the check still looking at the right lines? (%d heavy: %q)", want, len(full), full)
		}
	}
}

// TestFrontHandsOff: what the front does not do itself, the complete
// airlock does in its place, with the same arguments, streams and exit
// code.
func TestFrontHandsOff(t *testing.T) {
	if o := frontRun(t, nil, "serve", "--help"); o.code != 0 || !strings.Contains(o.stdout, "--listen") {
		t.Errorf("front serve --help: exit %d, stdout %q, stderr %q; want the daemon's help", o.code, o.stdout, o.stderr)
	}
	if o := frontRun(t, nil, "no-such-command"); o.code != cli.ExitAirlock || !strings.Contains(o.stderr, `unknown command "no-such-command"`) {
		t.Errorf("front no-such-command: exit %d, stderr %q", o.code, o.stderr)
	}
	// A policy with a rule needs CEL, which only the complete airlock
	// has; its denial comes before any sandbox is made.
	pol := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(pol, []byte("[[rule]]\nname = \"no-echo\"\nwhen = 'action == \"exec\" && argv[0] == \"/bin/echo\"'\ndecision = \"deny\"\nreason = \"no echo here\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if o := frontRun(t, nil, "run", "--policy", pol, "--", "/bin/echo", "hi"); o.code != cli.ExitDenied || !strings.Contains(o.stderr, "no echo here") {
		t.Errorf("front run --policy with a rule: exit %d, stderr %q; want %d and the rule's reason", o.code, o.stderr, cli.ExitDenied)
	}
}

// TestFrontRuns: the front runs a one-shot native sandbox itself.
func TestFrontRuns(t *testing.T) {
	requireE2E(t)
	o := frontRun(t, []string{fullbin.Env + "=/nonexistent"}, "run", "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 3")
	if o.code != 3 || o.stdout != "out\n" || o.stderr != "err\n" {
		t.Errorf("front run: exit %d, stdout %q, stderr %q", o.code, o.stdout, o.stderr)
	}
}
