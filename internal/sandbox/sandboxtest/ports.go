package sandboxtest

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// testExposedPort: the daemon reaches a server on the sandbox's loopback
// (sandbox.PortDialer, how exposed ports are served), with a sandbox
// that has no network; a port nobody listens on is ErrPortClosed.
func testExposedPort(t *testing.T, e *env) {
	pd, ok := e.sb.(sandbox.PortDialer)
	if !ok {
		t.Skipf("the %s driver's sandboxes do not reach their ports (no sandbox.PortDialer)", e.driver.Name())
	}
	if _, err := pd.DialPort(e.ctx, 18009); !errors.Is(err, sandbox.ErrPortClosed) {
		t.Fatalf("DialPort to a port nobody listens on: want ErrPortClosed, got %v", err)
	}
	if err := e.sb.Files().Mkdir(e.ctx, "/workspace/site", 0o755); err != nil {
		t.Fatalf("Mkdir: %v", err)
	}
	e.writeFile(t, "/workspace/site/hello.txt", "hello from inside\n", 0o644)
	if _, err := e.sb.Start(e.ctx, sandbox.ExecRequest{
		Argv:       []string{"python3", "-m", "http.server", "18008", "--bind", "127.0.0.1", "--directory", "/workspace/site"},
		Background: true,
	}); err != nil {
		t.Fatalf("start a background server: %v", err)
	}
	// Python may take seconds to start under an emulated CPU.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := pd.DialPort(e.ctx, 18008)
		if errors.Is(err, sandbox.ErrPortClosed) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("DialPort to the server: %v", err)
		}
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.WriteString(c, "GET /hello.txt HTTP/1.0\r\n\r\n"); err != nil {
			t.Fatalf("write to the server: %v", err)
		}
		b, err := io.ReadAll(c)
		c.Close()
		if err != nil || !strings.HasPrefix(string(b), "HTTP/1.0 200") || !strings.HasSuffix(string(b), "\r\n\r\nhello from inside\n") {
			t.Fatalf("the server's answer through DialPort: %q %v", b, err)
		}
		return
	}
}
