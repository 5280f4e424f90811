package main

import (
	"os/exec"
	"strings"
	"testing"
)

// testOnly says why package p belongs in tests and not in a shipped
// program, or "" when it may be shipped.
func testOnly(p string) string {
	const mod = "github.com/airlock-sandbox/airlock/"
	switch {
	case p == "testing":
		return "the testing package"
	case strings.HasPrefix(p, mod+"internal/testrig"):
		return "a test rig"
	case p == mod+"internal/testcap":
		return "the tests' capability checks"
	case strings.HasSuffix(p, "/sandboxtest") || strings.HasSuffix(p, "/drivertest") || strings.HasSuffix(p, "/agenttest"):
		return "a test suite"
	}
	return ""
}

// heavy says why the front must not link package p (what the complete
// airlock has and `airlock run` on native or gVisor does not need: their
// initialisation alone cost every start milliseconds), or "".
func heavy(p string) string {
	for _, h := range []struct{ prefix, what string }{
		{"k8s.io/", "Kubernetes"}, {"sigs.k8s.io/", "Kubernetes"},
		{"github.com/moby/", "Docker"}, {"github.com/docker/", "Docker"},
		{"github.com/google/cel-go/", "CEL"}, {"cel.dev/", "CEL"},
		{"github.com/prometheus/", "Prometheus"},
		{"github.com/tetratelabs/wazero", "wazero"},
		{"github.com/aws/", "the AWS SDK"},
		{"github.com/airlock-sandbox/airlock/internal/driver/docker", "the docker driver"},
		{"github.com/airlock-sandbox/airlock/internal/driver/kubernetes", "the kubernetes driver"},
		{"github.com/airlock-sandbox/airlock/internal/driver/microvm", "the microvm driver"},
		{"github.com/airlock-sandbox/airlock/internal/driver/wasm", "the wasm driver"},
		{"github.com/airlock-sandbox/airlock/internal/supervisor", "the daemon"},
		{"github.com/airlock-sandbox/airlock/internal/policy/celrules", "CEL"},
	} {
		if strings.HasPrefix(p, h.prefix) {
			return h.what
		}
	}
	return ""
}

// deps lists the packages the program pkg links (`go list -deps`).
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// TestLinksNoTestSupport: neither airlock program, front or complete,
// links a test rig, the tests' capability checks, a test suite or the
// testing package.
func TestLinksNoTestSupport(t *testing.T) {
	for _, pkg := range []string{".", "../airlock-full"} {
		var found []string
		for _, p := range deps(t, pkg) {
			if why := testOnly(p); why != "" {
				found = append(found, p+" ("+why+")")
			}
		}
		if len(found) > 0 {
			t.Errorf("%s links test support:\n%s", pkg, strings.Join(found, "\n"))
		}
	}
}

// TestFrontLinksNoHeavyPackage: the front (this program) links only what
// `airlock run` on the native and gVisor drivers needs; what else a
// command or a driver needs is the complete airlock's (linked = imported:
// keep it out of internal/cli and what it imports).
func TestFrontLinksNoHeavyPackage(t *testing.T) {
	var found []string
	for _, p := range deps(t, ".") {
		if why := heavy(p); why != "" {
			found = append(found, p+" ("+why+")")
		}
	}
	if len(found) > 0 {
		t.Errorf("the front links %d packages it must not, e.g.:\n%s", len(found), strings.Join(found[:min(10, len(found))], "\n"))
	}
	// The check sees them where they are.
	full := deps(t, "../airlock-full")
	for _, want := range []string{"Kubernetes", "Docker", "CEL", "Prometheus", "wazero", "the AWS SDK", "the daemon"} {
		seen := false
		for _, p := range full {
			seen = seen || heavy(p) == want
		}
		if !seen {
			t.Errorf("the complete airlock links nothing of %s: is the check looking at the right packages?", want)
		}
	}
}
