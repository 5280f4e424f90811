package main

import (
	"os/exec"
	"strings"
	"testing"
)

// testOnly says why package p belongs in tests and not in the shipped
// airlock, or "" when it may be shipped.
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

// TestLinksNoTestSupport: the airlock that ships, complete and front, links
// no test rig, no test capability check and no test suite (`go list -deps`).
func TestLinksNoTestSupport(t *testing.T) {
	for _, tags := range []string{"", "front"} {
		out, err := exec.Command("go", "list", "-deps", "-tags", tags, ".").Output()
		if err != nil {
			t.Fatalf("go list -deps -tags %q .: %v", tags, err)
		}
		var found []string
		for _, p := range strings.Fields(string(out)) {
			if why := testOnly(p); why != "" {
				found = append(found, p+" ("+why+")")
			}
		}
		if len(found) > 0 {
			t.Errorf("airlock (tags %q) links test support:\n%s", tags, strings.Join(found, "\n"))
		}
	}
	// The check sees them where they are.
	if testOnly("github.com/airlock-sandbox/airlock/internal/testrig/kube/kubebin") == "" || testOnly("testing") == "" {
		t.Error("testOnly misses test rigs")
	}
}
