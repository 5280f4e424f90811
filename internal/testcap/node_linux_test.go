package testcap

import (
	"context"
	"os/exec"
	"strings"
	"testing"
)

func TestNodeProbe(t *testing.T) {
	r := Probe(context.Background(), "node")
	_, errNode := exec.LookPath("node")
	_, errNPM := exec.LookPath("npm")
	if errNode != nil || errNPM != nil {
		if r.OK || !strings.Contains(r.Why, "not installed") {
			t.Fatalf("node = %+v without node or npm on PATH", r)
		}
	} else if !r.OK || !strings.HasPrefix(r.Detail, "node ") || !strings.Contains(r.Detail, ", npm ") {
		t.Fatalf("node = %+v with node and npm on PATH", r)
	}
	t.Setenv("PATH", t.TempDir())
	if r := Probe(context.Background(), "node"); r.OK || !strings.Contains(r.Why, "node is not installed") || r.Fix == "" {
		t.Fatalf("node without PATH = %+v", r)
	}
}
