package mcp_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/mcp"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// TestPauseTools: sandbox_pause and sandbox_resume on the session's own
// sandbox; a call in between says it is paused.
func TestPauseTools(t *testing.T) {
	st, err := store.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	mem := &atomic.Int64{}
	mem.Store(64 << 30)
	sup, err := supervisor.New(supervisor.Options{
		Store: st, Drivers: map[string]sandbox.Driver{"native": &fake.Driver{Pausable: true}},
		Config:       supervisor.Config{StateDir: t.TempDir()},
		MemAvailable: func() (int64, error) { return mem.Load(), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sup.Close(context.Background()); st.Close() })
	cs := connect(t, newServer(t, &mcp.Local{Sup: sup, Caller: supervisor.Caller{KeyID: "k1"}}))
	if res, text, _ := call(t, cs, "write_file", map[string]any{"path": "kept.txt", "content": "kept"}); res.IsError {
		t.Fatal(text)
	}
	res, text, sc := call(t, cs, "sandbox_pause", map[string]any{})
	if res.IsError || sc["state"] != "paused" || !strings.Contains(text, "paused") {
		t.Fatalf("sandbox_pause: %s %v", text, sc)
	}
	if res, text, _ := call(t, cs, "read_file", map[string]any{"path": "kept.txt"}); !res.IsError || !strings.Contains(text, "resume it first") {
		t.Fatalf("read_file in a paused sandbox: %v %s", res.IsError, text)
	}
	res, text, sc = call(t, cs, "sandbox_resume", map[string]any{})
	if res.IsError || sc["state"] != "running" {
		t.Fatalf("sandbox_resume: %s %v", text, sc)
	}
	if res, text, _ := call(t, cs, "read_file", map[string]any{"path": "kept.txt"}); res.IsError || !strings.Contains(text, "kept") {
		t.Fatalf("read_file after the resume: %s", text)
	}
}
