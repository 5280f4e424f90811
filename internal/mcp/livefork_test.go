package mcp_test

import (
	"context"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/mcp"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// TestLiveForkTool: sandbox_fork_live copies the session's own sandbox
// into two; a driver without live fork is refused with its reason.
func TestLiveForkTool(t *testing.T) {
	for _, can := range []bool{true, false} {
		st, err := store.Open(t.TempDir(), 0)
		if err != nil {
			t.Fatal(err)
		}
		sup, err := supervisor.New(supervisor.Options{
			Store: st, Drivers: map[string]sandbox.Driver{"native": &fake.Driver{LiveForkable: can}},
			Config:       supervisor.Config{StateDir: t.TempDir()},
			MemAvailable: func() (int64, error) { return 64 << 30, nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sup.Close(context.Background()); st.Close() })
		cs := connect(t, newServer(t, &mcp.Local{Sup: sup, Caller: supervisor.Caller{KeyID: "k1"}}))
		if res, text, _ := call(t, cs, "write_file", map[string]any{"path": "kept.txt", "content": "kept"}); res.IsError {
			t.Fatal(text)
		}
		res, text, sc := call(t, cs, "sandbox_fork_live", map[string]any{"count": 2})
		if !can {
			if !res.IsError || !strings.Contains(text, "native") {
				t.Fatalf("sandbox_fork_live on a driver without it: %v %s", res.IsError, text)
			}
			continue
		}
		boxes, _ := sc["sandboxes"].([]any)
		if res.IsError || len(boxes) != 2 {
			t.Fatalf("sandbox_fork_live: %s %v", text, sc)
		}
		id := boxes[0].(map[string]any)["sandbox_id"].(string)
		if res, text, _ := call(t, cs, "read_file", map[string]any{"path": "kept.txt", "sandbox_id": id}); res.IsError || !strings.Contains(text, "kept") {
			t.Fatalf("read_file in the copy: %s", text)
		}
	}
}
