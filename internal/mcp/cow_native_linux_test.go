package mcp_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/native"
	"github.com/airlock-sandbox/airlock/internal/hostcap"
	"github.com/airlock-sandbox/airlock/internal/mcp"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// TestNativeCowTools: a template mounts a host project copy-on-write; the
// session's sandbox edits it, and sandbox_changes, sandbox_apply_changes
// and sandbox_discard_changes review and decide the edits.
func TestNativeCowTools(t *testing.T) {
	cg := "cgroupv1"
	if hostcap.CgroupMode() == "v2" {
		cg = "cgroupv2"
	}
	testcap.Require(t, "root", "userns", cg, "seccomp", "landlock", "overlay")
	project := filepath.Join(t.TempDir(), "project")
	if err := os.MkdirAll(project, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"a.txt": "one\ntwo\n", "b.txt": "b\n"} {
		if err := os.WriteFile(filepath.Join(project, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st, err := store.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	drv, err := native.New(native.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sup, err := supervisor.New(supervisor.Options{Store: st, Drivers: map[string]sandbox.Driver{drv.Name(): drv},
		Config: supervisor.Config{Templates: []supervisor.Template{{Name: "default", Mounts: []string{project + ":/w:cow"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sup.Close(context.Background()) })
	cs := connect(t, newServer(t, &mcp.Local{Sup: sup, Caller: supervisor.Caller{KeyID: "k1"}}))

	res, text, _ := call(t, cs, "run_command", map[string]any{"command": "cd /w && printf 'one\\nTWO\\n' > a.txt && echo sb > b.txt && echo x > \"$(printf 'bad\\nname')\""})
	if res.IsError {
		t.Fatalf("edit: %s", text)
	}
	res, text, sc := call(t, cs, "sandbox_changes", map[string]any{})
	mounts, _ := sc["mounts"].([]any)
	if res.IsError || len(mounts) != 1 {
		t.Fatalf("sandbox_changes: %v\n%s", sc, text)
	}
	for _, want := range []string{"cow mount /w", "-two\n+TWO\n", "modified /w/b.txt", "control character", "Output below is data from the sandbox"} {
		if !strings.Contains(text, want) {
			t.Errorf("sandbox_changes text lacks %q:\n%s", want, text)
		}
	}
	res, text, sc = call(t, cs, "sandbox_apply_changes", map[string]any{"paths": []any{"a.txt"}})
	if res.IsError || len(sc["applied"].([]any)) != 1 {
		t.Fatalf("sandbox_apply_changes: %v\n%s", sc, text)
	}
	if b, _ := os.ReadFile(filepath.Join(project, "a.txt")); string(b) != "one\nTWO\n" {
		t.Errorf("host a.txt %q", b)
	}
	// A conflict: the host changed b.txt meanwhile.
	if err := os.WriteFile(filepath.Join(project, "b.txt"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, text, _ = call(t, cs, "sandbox_apply_changes", map[string]any{"paths": []any{"b.txt"}})
	if !res.IsError || !strings.Contains(text, "nothing was applied") || !strings.Contains(text, `conflict "/w/b.txt"`) {
		t.Errorf("a conflicting apply: %s", text)
	}
	res, text, sc = call(t, cs, "sandbox_discard_changes", map[string]any{})
	if res.IsError || len(sc["discarded"].([]any)) != 2 {
		t.Errorf("sandbox_discard_changes: %v\n%s", sc, text)
	}
	if _, _, sc = call(t, cs, "sandbox_changes", map[string]any{}); len(sc["mounts"].([]any)[0].(map[string]any)["changes"].([]any)) != 0 {
		t.Errorf("pending after the discard: %v", sc)
	}
	if b, _ := os.ReadFile(filepath.Join(project, "b.txt")); string(b) != "host\n" {
		t.Errorf("host b.txt %q", b)
	}
}
