package supervisor

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// TestExposePolicyAndSummary: the policy's action "expose" sees the port
// and the owner's key labels; a refusal names the rule and is audited; the
// sandbox's summary counts connections, refusals, failures and bytes by
// port.
func TestExposePolicyAndSummary(t *testing.T) {
	// The sandbox's "server": port 8000 answers; every other is closed.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello") }))
	defer srv.Close()
	drv := &fake.Driver{Ports: func(ctx context.Context, port int) (net.Conn, error) {
		if port != 8000 {
			return nil, fmt.Errorf("port %d: %w", port, sandbox.ErrPortClosed)
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", srv.Listener.Addr().String())
	}}
	dir := t.TempDir()
	pol, err := policy.New(policy.File{Rules: []policy.Rule{
		{Name: "no-debug-port", When: `action == "expose" && port == 9229`, Decision: policy.Deny, Reason: "the debugger's port is not exposed"},
		{Name: "untrusted-keys", When: `action == "expose" && labels.exists(k, k == "trust" && labels[k] == "untrusted")`, Decision: policy.Deny, Reason: "untrusted keys expose nothing"},
		{Name: "ask-expose", When: `action == "expose" && port == 7000`, Decision: policy.Ask, Reason: "ask first"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	logPath := filepath.Join(dir, "audit.log")
	al, err := audit.Open(logPath, audit.Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	mem := &atomic.Int64{}
	mem.Store(64 << 30)
	sup, err := New(Options{Store: st, Drivers: map[string]sandbox.Driver{"native": drv}, MemAvailable: func() (int64, error) { return mem.Load(), nil }, Policy: pol, Audit: al})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = sup.Close(context.Background())
		al.Close()
		st.Close()
	}()
	ctx := context.Background()
	info, err := sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Egress(ctx, alice, info.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("summary of a sandbox without egress or exposed ports: %v; want not found", err)
	}

	conn, err := sup.DialPort(ctx, alice, info.ID, 8000, "8000-x.sandbox.localhost")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	conn.Close()
	if string(body) != "hello" {
		t.Fatalf("through the exposed port: %q", body)
	}
	var denied *policy.Denied
	for _, c := range []struct {
		caller Caller
		port   int
		rule   string
	}{
		{alice, 9229, "rule:no-debug-port"},
		{Caller{KeyID: alice.KeyID, Labels: map[string]string{"trust": "untrusted"}}, 8000, "rule:untrusted-keys"},
		{alice, 7000, "rule:ask-expose"},
	} {
		_, err := sup.DialPort(ctx, c.caller, info.ID, c.port, "h")
		if !errors.As(err, &denied) || denied.Decision.Rule != c.rule {
			t.Errorf("port %d for labels %v: %v; want denied by %s", c.port, c.caller.Labels, err, c.rule)
		}
	}
	if _, err := sup.DialPort(ctx, alice, info.ID, 8001, "h"); !errors.Is(err, sandbox.ErrPortClosed) {
		t.Errorf("a closed port: %v", err)
	}

	sum, err := sup.Egress(ctx, alice, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Mode != "none" || len(sum.Exposed) != 4 {
		t.Fatalf("summary: %+v; want mode none and four ports", sum)
	}
	p := sum.Exposed[1] // 8000, 7000 before it
	if p.Port != 8000 || p.Connections != 1 || p.Denied != 1 || p.Failed != 0 || p.BytesSent == 0 || p.BytesReceived < int64(len("hello")) {
		t.Errorf("port 8000's summary: %+v", p)
	}
	if p := sum.Exposed[2]; p.Port != 8001 || p.Failed != 1 || p.Connections != 0 {
		t.Errorf("port 8001's summary: %+v", p)
	}
	if p := sum.Exposed[3]; p.Port != 9229 || p.Denied != 1 {
		t.Errorf("port 9229's summary: %+v", p)
	}

	al.Close()
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"rule":"rule:no-debug-port"`, `"rule":"rule:untrusted-keys"`, `"kind":"expose"`} {
		if !strings.Contains(string(log), want) {
			t.Errorf("audit log lacks %s:\n%s", want, log)
		}
	}
}

// TestPortsListenNeedsE2B: a second listener for exposed ports with the
// E2B endpoints off is refused, not left unserved in silence.
func TestPortsListenNeedsE2B(t *testing.T) {
	_, err := Config{Templates: []Template{{Name: "default"}}, E2B: E2BConfig{Disabled: true, PortsListen: "127.0.0.1:0"}}.withDefaults()
	if err == nil || !strings.Contains(err.Error(), "e2b.ports_listen") {
		t.Errorf("ports_listen with e2b disabled: %v; want refused", err)
	}
	if _, err := (Config{Templates: []Template{{Name: "default"}}, E2B: E2BConfig{Disabled: true}}).withDefaults(); err != nil {
		t.Errorf("e2b disabled: %v", err)
	}
	if _, err := (Config{Templates: []Template{{Name: "default"}}, E2B: E2BConfig{PortsListen: "127.0.0.1:0"}}).withDefaults(); err != nil {
		t.Errorf("ports_listen: %v", err)
	}
}
