package testcap

import (
	"context"
	"strings"
	"testing"
)

func TestJupyterProbe(t *testing.T) {
	r := Probe(context.Background(), "jupyter")
	if r.OK && (!strings.Contains(r.Detail, "ipykernel ") || !strings.Contains(r.Detail, "jupyter_client ")) {
		t.Fatalf("jupyter = %+v: the detail should name the versions", r)
	}
	if !r.OK && r.Fix == "" {
		t.Fatalf("jupyter = %+v: no fix given", r)
	}
	// A Python without the kernel is refused, with the packages to install.
	old := jupyterPython
	defer func() { jupyterPython = old }()
	jupyterPython = "/nonexistent/python3"
	if r := Probe(context.Background(), "jupyter"); r.OK || !strings.Contains(r.Fix, "python3-ipykernel") {
		t.Fatalf("jupyter without its Python = %+v", r)
	}
}
