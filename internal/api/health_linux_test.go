package api

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// breakFile makes every later write to the file at path, through the
// descriptors this process has open on it, fail with ENOSPC: each such
// descriptor becomes /dev/full.
func breakFile(t *testing.T, path string) {
	t.Helper()
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	ents, _ := os.ReadDir("/proc/self/fd")
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == path {
			fd, _ := strconv.Atoi(e.Name())
			if err := unix.Dup3(int(full.Fd()), fd, unix.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no descriptor open on %s", path)
	}
}

// TestHealthReflectsAudit: once the audit log cannot be written, every
// action is refused (fail closed), and /healthz says so with a 503 instead
// of "ok" (the security review's F17).
func TestHealthReflectsAudit(t *testing.T) {
	e, logPath := startPolicyEnv(t, "")
	ctx := context.Background()
	_, key := e.secret(store.RoleAgent)
	c, _ := client.New(e.url, key)
	if st, _, body := e.raw("GET", "/healthz", "", nil, nil); st != 200 || !strings.Contains(string(body), `"audit":"ok"`) {
		t.Fatalf("healthz with a working audit log: %d %s", st, body)
	}
	breakFile(t, logPath)
	_, err := c.CreateSandbox(ctx, client.CreateRequest{})
	apiError(t, err, 503, "audit_unavailable")
	st, _, body := e.raw("GET", "/healthz", "", nil, nil)
	if st != 503 || !strings.Contains(string(body), `"status":"degraded"`) || !strings.Contains(string(body), `"audit":"failed`) || strings.Contains(string(body), logPath) {
		t.Fatalf("healthz with a failed audit log: %d %s", st, body)
	}
}
