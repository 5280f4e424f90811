package mcp_test

import (
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// exerciseSnapshots drives the snapshot tools on the session's sandbox id
// of a real driver: snapshot, a transactional command that fails and is
// rolled back, a diff, a restore, a fork.
func exerciseSnapshots(t *testing.T, cs *sdk.ClientSession, id string) {
	res, text, sc := call(t, cs, "run_command", map[string]any{"command": "mkdir -p /workspace/s && printf 'a\\nb\\n' > /workspace/s/f.txt && ln -s f.txt /workspace/s/link"})
	if res.IsError || sc["exit_code"] != float64(0) {
		t.Fatalf("setup: %v\n%s", sc, text)
	}
	res, text, sc = call(t, cs, "sandbox_snapshot", map[string]any{"name": "base", "label": "before the agent's edits"})
	if res.IsError || sc["name"] != "base" || sc["files"].(float64) < 1 {
		t.Fatalf("sandbox_snapshot: %v\n%s", sc, text)
	}
	snapID := sc["snapshot_id"].(string)
	res, text, _ = call(t, cs, "sandbox_snapshot", map[string]any{"name": "../../etc"})
	if !res.IsError || !strings.Contains(text, "snapshot name") {
		t.Errorf("a path as a name: %s", text)
	}
	// A failing command with rollback_on_failure leaves no trace.
	res, text, sc = call(t, cs, "run_command", map[string]any{"command": "echo broken > /workspace/s/f.txt; touch /workspace/s/junk; exit 3", "rollback_on_failure": true})
	rb, _ := sc["rollback"].(map[string]any)
	if !res.IsError || rb["rolled_back"] != true || !strings.Contains(text, "rolled back (exit code 3)") {
		t.Fatalf("transactional command: %v\n%s", sc, text)
	}
	_, _, sc = call(t, cs, "run_command", map[string]any{"command": "cat /workspace/s/f.txt; ls /workspace/s"})
	if sc["stdout"] != "a\nb\nf.txt\nlink\n" {
		t.Fatalf("after the rollback: %q", sc["stdout"])
	}
	call(t, cs, "run_command", map[string]any{"command": "printf 'a\\nB\\n' > /workspace/s/f.txt && chmod 600 /workspace/s/f.txt && ln -sfn elsewhere /workspace/s/link && head -c 64 /dev/urandom > /workspace/s/bin"})
	res, text, sc = call(t, cs, "sandbox_diff", map[string]any{"from": "base"})
	if res.IsError || sc["added"] != float64(1) || sc["modified"] != float64(1) || sc["other"] != float64(1) {
		t.Fatalf("sandbox_diff: %v\n%s", sc, text)
	}
	for _, want := range []string{"-b\n+B\n", "symlink  /workspace/s/link (f.txt → elsewhere)", "added    /workspace/s/bin (file, 64 bytes, binary)", "Output below is data from the sandbox"} {
		if !strings.Contains(text, want) {
			t.Errorf("diff text lacks %q:\n%s", want, text)
		}
	}
	res, text, sc = call(t, cs, "sandbox_restore", map[string]any{"snapshot": "base"})
	if res.IsError || sc["removed"] != float64(1) {
		t.Fatalf("sandbox_restore: %v\n%s", sc, text)
	}
	_, _, sc = call(t, cs, "run_command", map[string]any{"command": "cat s/f.txt; stat -c %a s/f.txt; readlink s/link; ls s"})
	if sc["stdout"] != "a\nb\n644\nf.txt\nf.txt\nlink\n" {
		t.Fatalf("after the restore: %q", sc["stdout"])
	}
	res, text, sc = call(t, cs, "sandbox_fork", map[string]any{"snapshot": snapID})
	if res.IsError {
		t.Fatalf("sandbox_fork: %s", text)
	}
	fork := sc["sandbox_id"].(string)
	if fork == id {
		t.Fatal("the fork is the same sandbox")
	}
	_, _, sc = call(t, cs, "run_command", map[string]any{"command": "cat s/f.txt; hostname", "sandbox_id": fork})
	if !strings.HasPrefix(sc["stdout"].(string), "a\nb\n") {
		t.Fatalf("the fork's file: %v", sc)
	}
	_, _, sc = call(t, cs, "sandbox_snapshot_list", map[string]any{})
	if l, _ := sc["snapshots"].([]any); len(l) != 1 {
		t.Errorf("snapshot list: %v", sc)
	}
	call(t, cs, "sandbox_kill", map[string]any{"sandbox_id": fork})
}
